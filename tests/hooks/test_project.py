"""Project root detection and namespaces on real directories."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from wakemark.shared import project
from wakemark.shared.models import NAMESPACE_RE


def test_nearest_marker_wins(tmp_path: Path) -> None:
    outer = tmp_path / "outer"
    inner = outer / "pkgs" / "inner"
    (inner / "src").mkdir(parents=True)
    (outer / ".git").mkdir()
    (inner / "package.json").write_text("{}")
    assert project.find_root(str(inner / "src"), home=str(tmp_path / "h")) == str(inner)
    assert project.find_root(str(outer / "pkgs"), home=str(tmp_path / "h")) == str(outer)


def test_home_itself_is_never_a_project(tmp_path: Path) -> None:
    home = tmp_path / "home"
    (home / "notes").mkdir(parents=True)
    (home / ".git").mkdir()  # a dotfiles repo in $HOME
    assert project.find_root(str(home / "notes"), home=str(home)) is None
    assert project.find_root(str(home), home=str(home)) is None


def test_no_marker_means_global(tmp_path: Path) -> None:
    bare = tmp_path / "h" / "bare"
    bare.mkdir(parents=True)
    root = project.find_root(str(bare), home=str(tmp_path / "h"))
    assert root is None
    assert project.project_id(root) == "global"


def test_project_id_is_the_sha256_prefix_of_the_resolved_root(tmp_path: Path) -> None:
    (tmp_path / "p" / ".hg").mkdir(parents=True)
    (tmp_path / "link").symlink_to(tmp_path / "p")
    root = project.find_root(str(tmp_path / "link"), home="/nonexistent")
    assert root == str((tmp_path / "p").resolve())
    expected = hashlib.sha256(root.encode()).hexdigest()[:16]
    assert project.project_id(root) == expected


@pytest.mark.parametrize(
    ("raw", "clean"),
    [("alice", "alice"), ("a/b c", "a_b_c"), ("", "unknown"), ("../x", "x"), ("é\x00", "é")],
)
def test_actor_is_namespace_safe(raw: str, clean: str) -> None:
    actor = project.sanitize_actor(raw)
    assert actor == clean
    assert NAMESPACE_RE.match(project.namespace_for(actor, "global"))


def test_actor_from_env_or_os_user() -> None:
    assert project.actor({"WAKEMARK_ACTOR": "bob/x"}) == "bob_x"
    assert project.actor({}) not in ("", "unknown")

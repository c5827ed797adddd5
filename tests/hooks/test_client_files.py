"""A Claude Code Stop without its answer: the transcript it names is read only when it is
the server user's own file, on a loopback server; otherwise the Stop is stored without
the answer and ``wakemark_hook_file_reads_refused_total`` counts the refusal."""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from wakemark.shared import project, tokens
from wakemark.shared.config import Settings, prepare_home
from wakemark.shared.storage import migrate

from .conftest import ACTOR, FIXTURES, Hooks, _hooks, load

FINAL = json.loads((FIXTURES / "claude-code" / "Stop.json").read_text())["last_assistant_message"]


def _transcript(path: Path) -> Path:
    # A long history first: only the tail is read, and the cut first line is skipped.
    filler = json.dumps({"type": "user", "message": {"role": "user", "content": "x" * 1000}})
    lines = [filler] * 800 + [(FIXTURES / "claude-code" / "transcript.jsonl").read_text()]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines))
    return path


def _stop(hooks: Hooks, project_dir: Path, namespace: str, transcript: str) -> str:
    """Posts a Stop without ``last_assistant_message``; returns the stored summary."""
    payload = load("claude-code", "Stop", project_dir)
    del payload["last_assistant_message"]
    payload["transcript_path"] = transcript
    res = hooks.post("claude-code", payload)
    assert (res.status_code, res.data) == (204, b"")
    [event] = hooks.runtime.storage.list_events(namespace=namespace)
    assert event.kind == "session_summary"
    return str(event.body.content)


def _refused(hooks: Hooks) -> int:
    res = hooks.client.get(
        "/metrics", headers={"Authorization": f"Bearer {hooks.token}", "Host": "127.0.0.1:37800"}
    )
    match = re.search(r"^wakemark_hook_file_reads_refused_total (\d+)$", res.text, re.M)
    assert match, res.text
    return int(match.group(1))


def test_a_transcript_in_the_servers_home_is_read(
    sqlite_hooks: Hooks, user_home: Path, project_dir: Path, namespace: str
) -> None:
    path = _transcript(user_home / ".claude" / "projects" / "shop" / "s.jsonl")
    before = _refused(sqlite_hooks)
    assert _stop(sqlite_hooks, project_dir, namespace, str(path)) == FINAL
    assert _refused(sqlite_hooks) == before


def test_a_transcript_outside_home_is_not_read(
    sqlite_hooks: Hooks, user_home: Path, tmp_path: Path, project_dir: Path, namespace: str
) -> None:
    outside = _transcript(tmp_path / "elsewhere" / "s.jsonl")
    before = _refused(sqlite_hooks)
    assert _stop(sqlite_hooks, project_dir, namespace, str(outside)) == ""
    assert _refused(sqlite_hooks) == before + 1


def test_a_symlink_in_home_pointing_out_is_not_followed(
    sqlite_hooks: Hooks, user_home: Path, tmp_path: Path, project_dir: Path, namespace: str
) -> None:
    outside = _transcript(tmp_path / "elsewhere" / "s.jsonl")
    link = user_home / ".claude" / "link.jsonl"
    link.parent.mkdir()
    link.symlink_to(outside)
    before = _refused(sqlite_hooks)
    assert _stop(sqlite_hooks, project_dir, namespace, str(link)) == ""
    assert _refused(sqlite_hooks) == before + 1


def test_a_symlink_within_home_is_read(
    sqlite_hooks: Hooks, user_home: Path, project_dir: Path, namespace: str
) -> None:
    real = _transcript(user_home / "real" / "s.jsonl")
    link = user_home / "link.jsonl"
    link.symlink_to(real)
    assert _stop(sqlite_hooks, project_dir, namespace, str(link)) == FINAL


@pytest.mark.parametrize("kind", ["fifo", "directory", "missing", "relative", "nul"])
def test_what_is_not_a_regular_file_is_not_read(
    sqlite_hooks: Hooks, user_home: Path, project_dir: Path, namespace: str, kind: str
) -> None:
    path = user_home / "t.jsonl"
    if kind == "fifo":
        os.mkfifo(path)  # opening it for reading would block the request
    elif kind == "directory":
        path.mkdir()
    name = {"relative": "t.jsonl", "nul": f"{user_home}/t\x00.jsonl"}.get(kind, str(path))
    before = _refused(sqlite_hooks)
    assert _stop(sqlite_hooks, project_dir, namespace, name) == ""
    assert _refused(sqlite_hooks) == before + 1


@pytest.fixture
def public_hooks(settings: Settings) -> Iterator[Hooks]:
    """A server bound to every interface (as in a container): clients may be elsewhere."""
    settings = settings.replace(host="0.0.0.0")
    prepare_home(settings)
    migrate(settings)
    yield from _hooks(settings)


def test_a_server_not_on_loopback_reads_no_client_file(
    public_hooks: Hooks, user_home: Path, project_dir: Path, namespace: str
) -> None:
    path = _transcript(user_home / "s.jsonl")
    before = _refused(public_hooks)
    assert _stop(public_hooks, project_dir, namespace, str(path)) == ""
    assert _refused(public_hooks) == before + 1


def _scoped(hooks: Hooks) -> dict[str, str]:
    """Headers of a scoped token for the hooks' own actor: another person on a team host."""
    secret = tokens.create(hooks.runtime.storage, actor=ACTOR, project=None, read_only=False,
                           expires=None, name="teammate", who="test")[1]  # fmt: skip
    return {"Authorization": f"Bearer {secret}"}


def test_a_scoped_token_never_has_a_transcript_read(
    sqlite_hooks: Hooks, user_home: Path, project_dir: Path
) -> None:
    path = _transcript(user_home / ".claude" / "projects" / "shop" / "s.jsonl")
    payload = load("claude-code", "Stop", project_dir)
    del payload["last_assistant_message"]
    payload["transcript_path"] = str(path)
    # The project as given: a scoped client's paths are not probed either.
    payload["cwd"] = str(project_dir)
    before = _refused(sqlite_hooks)
    res = sqlite_hooks.post("claude-code", payload, **_scoped(sqlite_hooks))
    assert (res.status_code, res.data) == (204, b"")
    [event] = sqlite_hooks.runtime.storage.list_events(session_id=payload["session_id"])
    assert (event.kind, event.body.content) == ("session_summary", "")
    assert _refused(sqlite_hooks) == before + 1
    # The same delivery with the bootstrap token on this loopback server: read.
    assert sqlite_hooks.post("claude-code", payload).status_code == 204
    stored = sqlite_hooks.runtime.storage.list_events(session_id=payload["session_id"])
    assert sorted(str(e.body.content) for e in stored) == ["", FINAL]


def test_a_scoped_token_gets_no_root_detection(
    sqlite_hooks: Hooks, project_dir: Path, namespace: str
) -> None:
    """The server does not test a scoped client's path for directories or markers: a
    subdirectory is its own project, where the bootstrap token's finds the repository."""
    sub = project_dir / "src"
    payload = load("claude-code", "UserPromptSubmit", sub)
    assert sqlite_hooks.post("claude-code", payload, **_scoped(sqlite_hooks)).status_code == 204
    [scoped] = sqlite_hooks.runtime.storage.list_events(session_id=payload["session_id"])
    assert scoped.namespace == project.namespace_for(ACTOR, project.project_id(str(sub)))
    assert scoped.source.project_path == str(sub)
    payload["session_id"] = "bootstrap-session"
    assert sqlite_hooks.post("claude-code", payload).status_code == 204
    [own] = sqlite_hooks.runtime.storage.list_events(session_id="bootstrap-session")
    assert own.namespace == namespace and own.source.project_path == str(project_dir.resolve())

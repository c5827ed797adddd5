"""``wakemark token`` and ``wakemark audit`` in process, on a real SQLite database."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest

from wakemark.services.cli.main import main
from wakemark.shared import tokens


@pytest.fixture(autouse=True)
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    for name in ("WAKEMARK_DATABASE_URL", "WAKEMARK_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("WAKEMARK_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("WAKEMARK_ACTOR", "ops")
    return tmp_path / "home"


def test_create_list_revoke_audit(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["token", "create", "--actor", "bob", "--project", "/srv/shop", "--new-project"]
    argv.append("--read-only")
    assert main([*argv, "--expires", "12h", "--name", "ci"]) == 0
    out = capsys.readouterr()
    secret = out.out.strip()
    assert secret.startswith(tokens.SECRET_PREFIX)
    pid = out.err.split("/project/")[1].split("/")[0]
    assert len(pid) == 16  # the root path became its project id

    assert main(["token", "list"]) == 0
    [head, row] = capsys.readouterr().out.splitlines()
    assert head.split()[:3] == ["id", "name", "scope"]
    token_id, name, scope, read_only = row.split()[:4]
    assert (name, scope, read_only) == ("ci", f"/actor/bob/project/{pid}/", "yes")
    assert secret not in row

    assert main(["token", "revoke", token_id]) == 0
    assert main(["token", "revoke", token_id]) == 1
    capsys.readouterr()
    assert main(["audit", "--limit", "1"]) == 0
    [_, entry] = capsys.readouterr().out.splitlines()
    assert "cli:ops" in entry and "token_revoke" in entry and token_id in entry


@pytest.mark.parametrize(
    "extra",
    [["--actor", "a/b"], ["--actor", " "], ["--actor", "a", "--project", "x y"],
     ["--actor", "a", "--expires", "0d"], ["--actor", "a", "--expires", "soon"]],
)  # fmt: skip
def test_bad_arguments_are_refused(extra: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["token", "create", *extra]) == 2
    assert capsys.readouterr().out == ""  # no secret printed
    assert main(["token", "list"]) == 0
    assert len(capsys.readouterr().out.splitlines()) == 1  # the header only


def test_a_project_with_nothing_stored_needs_new_project(
    home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from wakemark.shared.config import Settings
    from wakemark.shared.models import MemoryRecord
    from wakemark.shared.runtime import Runtime
    from wakemark.shared.storage import migrate

    argv = ["token", "create", "--actor", "bob", "--project", "nonexistent-project"]
    assert main(argv) == 2
    out = capsys.readouterr()
    assert out.out == ""  # no secret printed
    assert out.err == (
        "wakemark: no project 'nonexistent-project' for actor 'bob' in this database"
        " (see GET /v1/projects); --new-project creates the token anyway\n"
    )
    assert main(["token", "list"]) == 0
    assert len(capsys.readouterr().out.splitlines()) == 1  # the header only

    runtime = Runtime.build(Settings(home=home))
    migrate(runtime.settings)
    ns = "/actor/bob/project/0123456789abcdef/"
    runtime.storage.put_memory_record(MemoryRecord(namespace=ns, title="known"))
    runtime.close()
    assert main(["token", "create", "--actor", "bob", "--project", "0123456789abcdef"]) == 0
    assert main([*argv, "--new-project"]) == 0
    capsys.readouterr()
    assert main(["token", "list"]) == 0
    assert len(capsys.readouterr().out.splitlines()) == 3


def test_parse_duration() -> None:
    assert tokens.parse_duration("30d") == timedelta(days=30)
    assert tokens.parse_duration("90m") == timedelta(minutes=90)
    assert tokens.parse_duration("2W") == timedelta(weeks=2)
    with pytest.raises(ValueError):
        tokens.parse_duration("1y")

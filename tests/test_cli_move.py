"""`wakemark move` as a subprocess against a real HTTP server: a project whose directory
was renamed gets its memories back, named by its vanished path or by its namespace; what
cannot be moved is said in one line, with the likely candidates."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import free_port
from tests.storage.conftest import event
from wakemark.shared import project
from wakemark.shared.models import MemoryRecord
from wakemark.shared.retrieval.lexical import search_lexical
from wakemark.shared.runtime import Runtime

pytestmark = pytest.mark.slow  # every test here starts a wakemark process

ACTOR = "alice"


def _move(
    served: Runtime, cwd: Path, *args: str, port: int | None = None
) -> subprocess.CompletedProcess[str]:
    env = {
        k: v for k, v in os.environ.items() if not k.startswith(("WAKEMARK_", "CLAUDE_", "GEMINI_"))
    }
    env.update(
        WAKEMARK_HOME=str(served.settings.home),
        WAKEMARK_PORT=str(port or served.settings.port),
        WAKEMARK_ACTOR=ACTOR,
    )
    return subprocess.run(
        [sys.executable, "-m", "wakemark.services.cli.main", "move", *args],
        env=env, cwd=cwd, capture_output=True, text=True, timeout=60,
    )  # fmt: skip


def _namespace(root: Path) -> str:
    return project.namespace_for(ACTOR, project.project_id(str(root)))


@pytest.fixture
def renamed(served: Runtime, tmp_path: Path) -> tuple[Path, Path, list[MemoryRecord]]:
    """A project with memories and a session at ``old``, then renamed to ``new``."""
    old = (tmp_path / "invoicer").resolve()
    (old / ".git").mkdir(parents=True)
    ns = _namespace(old)
    served.storage.put_event(event("prompt", ns=ns, project_path=str(old)))
    served.storage.put_event(event("tool_use", ns=ns, project_path=str(old)))
    records = [
        MemoryRecord(namespace=ns, title="Invoices round half to even", summary="totals"),
        MemoryRecord(namespace=ns, title="Invoice PDFs embed their fonts", summary="pdf"),
    ]
    for record in records:
        served.storage.put_memory_record(record)
    new = old.with_name("billing")
    old.rename(new)
    return old, new, records


def _ids(served: Runtime, ns: str) -> set[str]:
    return {r.record_id for r in served.storage.list_memory_records(ns).items}


def test_a_renamed_project_gets_its_memories_back(
    served: Runtime, renamed: tuple[Path, Path, list[MemoryRecord]]
) -> None:
    old, new, records = renamed
    assert search_lexical(served.storage, _namespace(old), "invoices", 10)  # warm

    dry = _move(served, new, str(old), "--dry-run")
    assert dry.returncode == 0, dry.stderr
    assert dry.stdout.startswith(f"would move 2 records, 2 events, 1 turns from {old} to {new}")
    assert _ids(served, _namespace(new)) == set()

    done = _move(served, new, str(old))
    assert done.returncode == 0, done.stderr
    assert done.stdout == f"moved 2 records, 2 events, 1 turns from {old} to {new}\n"
    assert _ids(served, _namespace(new)) == {r.record_id for r in records}
    assert _ids(served, _namespace(old)) == set()
    (stored,) = served.storage.projects()
    assert (stored["namespace"], stored["project_path"]) == (_namespace(new), str(new))
    hits = search_lexical(served.storage, _namespace(new), "invoices", 10)
    assert {h.record.record_id for h in hits} == {r.record_id for r in records}
    (entry,) = served.storage.list_audit()
    assert (entry.action, entry.namespace) == ("move", _namespace(old))

    again = _move(served, new, str(old))
    assert again.returncode == 2 and again.stdout == ""
    assert again.stderr.startswith(f"wakemark: no stored project was at {old}\n")


def test_old_may_be_the_namespace_and_new_a_directory(
    served: Runtime, renamed: tuple[Path, Path, list[MemoryRecord]], tmp_path: Path
) -> None:
    old, new, records = renamed
    missing = _move(served, tmp_path, _namespace(old), str(new / "src"))
    assert missing.returncode == 2 and "no project at or above" in missing.stderr
    (new / "src").mkdir()  # below the root: the root is what NEW names
    done = _move(served, tmp_path, _namespace(old), str(new / "src"))
    assert done.returncode == 0, done.stderr
    assert done.stdout == f"moved 2 records, 2 events, 1 turns from {old} to {new}\n"
    assert _ids(served, _namespace(new)) == {r.record_id for r in records}


def test_an_unknown_old_lists_the_projects_whose_directory_is_gone(
    served: Runtime, renamed: tuple[Path, Path, list[MemoryRecord]], tmp_path: Path
) -> None:
    old, new, _ = renamed
    elsewhere = tmp_path / "never-stored"
    res = _move(served, new, str(elsewhere))
    assert res.returncode == 2 and res.stdout == ""
    first, *rest = res.stderr.splitlines()
    assert first == f"wakemark: no stored project was at {elsewhere}"
    assert rest == [
        "stored projects whose directory no longer exists:",
        f"  {old}  (2 memories, {_namespace(old)})",
    ]
    assert _ids(served, _namespace(old)) and not _ids(served, _namespace(new))


def test_new_must_be_a_project_and_the_server_must_answer(
    served: Runtime, renamed: tuple[Path, Path, list[MemoryRecord]], tmp_path: Path
) -> None:
    old, new, _ = renamed
    bare = tmp_path / "bare"
    bare.mkdir()
    res = _move(served, bare, str(old))
    assert res.returncode == 2
    assert res.stderr == f"wakemark: no project at or above {bare} (no .git or marker)\n"
    down = _move(served, new, str(old), port=free_port())
    assert down.returncode == 2 and len(down.stderr.splitlines()) == 1
    assert "wakemark server is not running" in down.stderr
    assert _ids(served, _namespace(old)) and not _ids(served, _namespace(new))

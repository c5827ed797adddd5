"""``wakemark export`` and ``wakemark import`` as a user runs them (subprocesses)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.test_cli import _env

pytestmark = pytest.mark.slow  # every test here starts a wakemark process

NS = "/actor/me/project/p/"


def _wakemark(*args: str, env: dict[str, str], stdout: object = subprocess.PIPE):  # type: ignore[no-untyped-def]
    return subprocess.run(
        [sys.executable, "-m", "wakemark.services.cli.main", *args],
        env=env,
        stdout=stdout,
        stderr=subprocess.PIPE,
        timeout=120,
        cwd=Path(__file__).resolve().parents[1],
    )


def _seed(home: Path) -> None:
    from wakemark.shared.config import Settings, prepare_home
    from wakemark.shared.models import MemoryRecord
    from wakemark.shared.storage import migrate, open_storage

    settings = Settings(home=home)
    prepare_home(settings)
    migrate(settings)
    storage = open_storage(settings)
    for i in range(3):
        storage.put_memory_record(MemoryRecord(namespace=NS, title=f"memory {i}"))
    storage.close()


def _supersede(home: Path) -> None:
    """One more record, about the subject of the last one: that one becomes its history."""
    from wakemark.shared.config import Settings
    from wakemark.shared.models import MemoryRecord, utcnow
    from wakemark.shared.storage import open_storage

    storage = open_storage(Settings(home=home))
    [old] = storage.list_memory_records(namespace=NS, limit=1).items
    with storage.transaction() as tx:
        new = MemoryRecord(namespace=NS, title="memory 2, again")
        tx.put_memory_record(new)
        assert tx.supersede(old.record_id, new.record_id, utcnow())
    storage.close()


def test_export_import_export_from_the_command_line(tmp_path: Path) -> None:
    src, dst = tmp_path / "src", tmp_path / "dst"
    _seed(src / "home")
    first = tmp_path / "first.jsonl"
    with first.open("wb") as out:
        done = _wakemark("export", "--all", "--events", "--vectors", env=_env(src), stdout=out)
    assert done.returncode == 0, done.stderr
    assert b"exporting: 3/3" in done.stderr  # not a terminal: plain progress lines
    # Into a home never used: the dry run prepares the empty database, imports nothing.
    dry = _wakemark("import", str(first), "--dry-run", env=_env(dst))
    assert dry.returncode == 0 and b"would write 3 record(s)" in dry.stderr, dry.stderr
    done = _wakemark("import", str(first), env=_env(dst))
    assert done.returncode == 0 and b"wrote 3 record(s)" in done.stderr, done.stderr
    again = _wakemark("import", str(first), env=_env(dst))
    assert b"wrote 0 record(s)" in again.stderr
    second = _wakemark("export", "--all", "--events", "--vectors", env=_env(dst))
    assert second.stdout == first.read_bytes()


def test_an_import_says_how_many_older_versions_came_with_the_records(tmp_path: Path) -> None:
    _seed(tmp_path / "home")
    _supersede(tmp_path / "home")
    file = tmp_path / "history.jsonl"
    file.write_bytes(_wakemark("export", "--all", env=_env(tmp_path)).stdout)
    done = _wakemark("import", str(file), env=_env(tmp_path / "other"))
    assert done.returncode == 0, done.stderr
    assert b"read 3 record(s) with 1 older version(s), 0 turn(s)" in done.stderr, done.stderr


def test_import_reports_the_bad_line_and_bad_flags(tmp_path: Path) -> None:
    _seed(tmp_path / "home")
    lines = _wakemark("export", "--namespace", NS, env=_env(tmp_path)).stdout.splitlines()
    broken = tmp_path / "broken.jsonl"
    broken.write_bytes(b"\n".join([*lines[:2], b'{"type": "record"', *lines[2:]]) + b"\n")
    done = _wakemark("import", str(broken), env=_env(tmp_path / "other"))
    assert done.returncode == 1
    assert b"line 3: not JSON" in done.stderr and b"Traceback" not in done.stderr
    bad_map = _wakemark("import", str(broken), "--namespace-map", "a=b", env=_env(tmp_path))
    assert bad_map.returncode == 2 and b"OLD=NEW" in bad_map.stderr
    assert _wakemark("export", env=_env(tmp_path)).returncode == 2
    header = json.loads(lines[0])
    assert header["namespace"] == NS and header["events"] is False

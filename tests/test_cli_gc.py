"""``wakemark gc`` and ``wakemark stats --disk`` as a user runs them (subprocesses)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.storage.test_retention import NS, old_turns
from tests.test_cli import _env
from tests.test_cli_transfer import _wakemark
from wakemark.shared.config import Settings, prepare_home
from wakemark.shared.storage import migrate, open_storage


@pytest.mark.slow
def test_gc_trims_expired_events_and_shrinks_the_file(tmp_path: Path) -> None:
    settings = Settings(home=tmp_path / "home")
    prepare_home(settings)
    migrate(settings)
    storage = open_storage(settings)
    old_turns(storage, 200, days_ago=40)
    storage.close()
    env = _env(tmp_path)
    before = json.loads(_wakemark("stats", "--disk", "--json", env=env).stdout)["disk"]
    assert before["projects"][0]["namespace"] == NS and before["tables"]["events"] > 1_000_000
    kept = _wakemark("gc", "--days", "60", env=env)  # 40 days old: inside a 60-day window
    assert kept.returncode == 0 and b"trimmed 0 event bodies" in kept.stdout
    done = _wakemark("gc", env=env)  # the default, 30 days
    assert done.returncode == 0, done.stderr
    assert b"trimmed 200 event bodies of 200 turns" in done.stdout
    assert b"VACUUM: " in done.stdout
    size = settings.sqlite_path.stat().st_size
    assert size < before["total"] / 5
    after = json.loads(_wakemark("stats", "--disk", "--json", env=env).stdout)
    assert after["counts"]["events"] == 200 and after["disk"]["total"] == size
    text = _wakemark("stats", "--disk", env=env).stdout.decode()
    assert "by table" in text and NS in text
    off = _wakemark("gc", "--no-compact", env={**env, "WAKEMARK_EVENT_RETENTION_DAYS": "0"})
    assert off.returncode == 0 and b"retention is off" in off.stdout

"""What a user sees when something is wrong: one line on stderr and exit 2, never a
traceback; commands that need the database migrate it; and the small CLI fixes of #26."""

from __future__ import annotations

import importlib.metadata
import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

import wakemark
from tests.conftest import free_port
from wakemark.services.api.security import ensure_token
from wakemark.shared.config import Settings, prepare_home
from wakemark.shared.storage import MigrationDriftError, migrate
from wakemark.shared.storage.migrator import Migration, check_drift, default_directory, discover

pytestmark = pytest.mark.slow  # every test here starts a wakemark process

ROOT = Path(__file__).resolve().parents[1]


def _wakemark(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "wakemark.services.cli.main", *args],
        env=env, capture_output=True, text=True, timeout=120, cwd=ROOT,
    )  # fmt: skip


def _env(home: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("WAKEMARK_")}
    return {**env, "WAKEMARK_HOME": str(home), "WAKEMARK_EMBEDDER": "off", **extra}


def _one_line(done: subprocess.CompletedProcess[str], *parts: str) -> str:
    """The single stderr line of a failed command, checked for exit 2 and ``parts``."""
    assert done.returncode == 2, done.stdout + done.stderr
    lines = done.stderr.splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith("wakemark"), lines[0]
    for part in parts:
        assert part in lines[0], lines[0]
    return lines[0]


def _migrated(home: Path) -> Path:
    settings = Settings(home=home)
    prepare_home(settings)
    migrate(settings)
    return settings.sqlite_path


@pytest.mark.parametrize(
    "command", [["migrate"], ["stats"], ["export", "--all"], ["token", "list"], ["serve"]]
)
def test_a_home_that_is_a_file(tmp_path: Path, command: list[str]) -> None:
    home = tmp_path / "home"
    home.write_text("not a directory")
    done = _wakemark(*command, env=_env(home, WAKEMARK_PORT="1"))
    _one_line(done, f"WAKEMARK_HOME: {home} is not a directory")


@pytest.mark.parametrize("home", ["/proc/wakemark-test/home", "/proc/self"])
def test_a_home_that_cannot_be_created_or_used(home: str) -> None:
    # /proc refuses new directories and mode changes, even to root (tests run as root,
    # for whom a chmod 0500 directory would still be writable).
    done = _wakemark("stats", env=_env(Path(home)))
    _one_line(done, f"WAKEMARK_HOME: cannot use {home}: ")


def test_an_unreadable_token_path(tmp_path: Path) -> None:
    home = tmp_path / "home"
    (home / "token").mkdir(parents=True, mode=0o700)
    done = _wakemark("ui", "--print", env=_env(home))
    _one_line(done, f"{home / 'token'}: Is a directory")


def test_an_unreadable_import_file(tmp_path: Path) -> None:
    missing = tmp_path / "missing.jsonl"
    done = _wakemark("import", str(missing), env=_env(tmp_path / "home"))
    _one_line(done, f"{missing}: No such file or directory")  # `<path>: <reason>`


def test_a_file_that_is_not_a_database(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir(mode=0o700)
    (home / "wakemark.db").write_text("garbage " * 100)
    for command in (["stats"], ["migrate"]):
        done = _wakemark(*command, env=_env(home))
        _one_line(done, f"database error: {home / 'wakemark.db'}: file is not a database")


def test_stats_and_export_on_a_home_never_migrated(tmp_path: Path) -> None:
    stats = _wakemark("stats", "--json", env=_env(tmp_path / "a"))
    assert stats.returncode == 0, stats.stderr
    assert json.loads(stats.stdout)["counts"]["memories"] == 0
    export = _wakemark("export", "--all", env=_env(tmp_path / "b"))
    assert export.returncode == 0, export.stderr
    header, end = map(json.loads, export.stdout.splitlines())
    assert header["format"] == "wakemark-export" and end == {
        "type": "end",
        "records": 0,
        "turns": 0,
        "events": 0,
    }


def test_a_database_from_a_newer_version(tmp_path: Path) -> None:
    home = tmp_path / "home"
    db = _migrated(home)
    with sqlite3.connect(db) as conn:
        conn.execute("INSERT INTO _migrations (id, name, applied_at) VALUES (9999, 'future', 'x')")
    for command in (["stats"], ["migrate"], ["export", "--all"], ["serve"]):
        done = _wakemark(*command, env=_env(home, WAKEMARK_PORT="1"))
        _one_line(
            done,
            "the database was written by a newer wakemark",
            f"9999_future is unknown to {wakemark.__version__}",
            "upgrade wakemark",
        )


def test_a_migration_recorded_under_another_name(tmp_path: Path) -> None:
    home = tmp_path / "home"
    db = _migrated(home)
    with sqlite3.connect(db) as conn:
        conn.execute("UPDATE _migrations SET name = 'renamed' WHERE id = 3")
    done = _wakemark("stats", env=_env(home))
    _one_line(done, "database error: migration 0003 is recorded as 'renamed'")


def test_a_migration_missing_from_the_installation() -> None:
    migrations = [m for m in discover(default_directory("sqlite")) if m.id != 5]
    with pytest.raises(MigrationDriftError, match="0005_gone .*reinstall wakemark"):
        check_drift({5: "gone"}, migrations)
    with pytest.raises(MigrationDriftError, match="newer wakemark"):
        check_drift({99: "later"}, [Migration(1, "initial", "")])


def test_one_version_everywhere(tmp_path: Path) -> None:
    from wakemark.services.api import create_app
    from wakemark.services.mcp import server
    from wakemark.shared import __version__ as shared_version
    from wakemark.shared.runtime import Runtime

    assert wakemark.__version__ == importlib.metadata.version("wakemark") == shared_version
    assert server.__version__ == wakemark.__version__  # MCP serverInfo
    settings = Settings(home=tmp_path / "home", embedder="off")
    _migrated(settings.home)
    runtime = Runtime(settings)
    try:
        health = (
            create_app(runtime=runtime)
            .test_client()
            .get("/health", base_url="http://127.0.0.1:37800")
            .json
        )
    finally:
        runtime.close()
    assert health["version"] == wakemark.__version__  # status and the viewer show this


def test_doctor_warns_about_a_missing_model_and_passes(tmp_path: Path) -> None:
    home = tmp_path / "home"
    _migrated(home)
    ensure_token(Settings(home=home))
    env = _env(home, WAKEMARK_EMBEDDER="onnx", WAKEMARK_MODEL_PATH=str(tmp_path / "none.onnx"))
    env["WAKEMARK_PORT"] = str(free_port())
    done = _wakemark("doctor", env=env)
    assert done.returncode == 0, done.stdout
    [line] = [row for row in done.stdout.splitlines() if "embedding model" in row]
    assert line.startswith("warn  embedding model missing at ") and "optional" in line
    assert "FAIL" not in done.stdout and done.stdout.endswith("all checks passed\n")


def test_help_texts(tmp_path: Path) -> None:
    serve = _wakemark("serve", "--help", env=_env(tmp_path, WAKEMARK_PORT="4321"))
    assert "port (default: 4321, from WAKEMARK_PORT)" in " ".join(serve.stdout.split())
    assert "37800" not in serve.stdout
    uninstall = _wakemark("uninstall", "--help", env=_env(tmp_path))
    assert "remove from this project's config" in " ".join(uninstall.stdout.split())
    assert "--service" not in uninstall.stdout
    hook = _wakemark("hook", "--help", env=_env(tmp_path))
    assert hook.returncode == 0 and hook.stdout.startswith("usage: wakemark hook <agent>")

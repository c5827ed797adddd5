"""The ``engram`` command's own behaviour: help, and one-line errors instead of tracebacks."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from services.cli.main import COMMANDS


def _engram(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "services.cli.main", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        cwd=Path(__file__).resolve().parents[1],
    )


def _env(tmp_path: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ENGRAM_")}
    return {**env, "ENGRAM_HOME": str(tmp_path / "home"), **extra}


def test_help_lists_every_command(tmp_path: Path) -> None:
    done = _engram("--help", env=_env(tmp_path))
    assert done.returncode == 0
    assert all(name in done.stdout for name in COMMANDS)


def test_a_bad_setting_is_one_line_naming_the_variable(tmp_path: Path) -> None:
    done = _engram("migrate", env=_env(tmp_path, ENGRAM_PORT="http"))
    assert done.returncode == 2
    assert done.stderr.startswith("engram: ENGRAM_PORT: ")
    assert "Traceback" not in done.stderr


def test_an_unreachable_database_is_an_error_not_a_traceback(tmp_path: Path) -> None:
    url = "postgresql://nobody@127.0.0.1:1/none"
    done = _engram("migrate", env=_env(tmp_path, ENGRAM_DATABASE_URL=url))
    assert done.returncode == 1
    assert done.stderr.startswith("engram: database error: ")
    assert "Traceback" not in done.stderr

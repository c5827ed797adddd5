"""The ``wakemark`` command's own behaviour: help, and one-line errors instead of tracebacks."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from tests.conftest import run_cli
from wakemark.services.cli.main import COMMANDS

pytestmark = pytest.mark.slow  # every test here starts a wakemark process


def _wakemark(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return run_cli(*args, env=env)


def _env(tmp_path: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("WAKEMARK_")}
    return {**env, "WAKEMARK_HOME": str(tmp_path / "home"), **extra}


def test_help_lists_every_command(tmp_path: Path) -> None:
    done = _wakemark("--help", env=_env(tmp_path))
    assert done.returncode == 0
    assert all(name in done.stdout for name in COMMANDS)
    assert "wakemark hook <agent>" in done.stdout  # dispatched before the parser, still listed


def test_a_bad_setting_is_one_line_naming_the_variable(tmp_path: Path) -> None:
    done = _wakemark("migrate", env=_env(tmp_path, WAKEMARK_PORT="http"))
    assert done.returncode == 2
    assert done.stderr.startswith("wakemark: WAKEMARK_PORT: ")
    assert "Traceback" not in done.stderr


def test_an_unreachable_database_is_an_error_not_a_traceback(tmp_path: Path) -> None:
    url = "postgresql://nobody@127.0.0.1:1/none"
    done = _wakemark("migrate", env=_env(tmp_path, WAKEMARK_DATABASE_URL=url))
    assert done.returncode == 1
    assert done.stderr.startswith("wakemark: database error: ")
    assert len(done.stderr.splitlines()) == 1, done.stderr  # psycopg's hint line joined

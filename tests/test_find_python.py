"""scripts/find-python.sh: the interpreter `make` and CI's matrix pick (Python 3.11-3.13)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "find-python.sh"


def _find(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """The script with nothing on PATH but ``tmp_path/bin`` (it needs only shell builtins)
    and pyenv's versions under ``tmp_path/pyenv``."""
    env = {
        "PATH": str(tmp_path / "bin"),
        "PYENV_ROOT": str(tmp_path / "pyenv"),
        "HOME": str(tmp_path),
    }
    return subprocess.run(
        ["/bin/sh", str(SCRIPT), *args], capture_output=True, text=True, env=env, timeout=60
    )


def _fake(path: Path, minor: int) -> None:
    """An executable that answers the script's probe as Python 3.``minor`` would: its
    minor version if it is 11 to 13, else an empty line."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"#!/bin/sh\necho {minor if 11 <= minor <= 13 else ''}\n")
    path.chmod(0o755)


def test_python3_wins_when_it_is_a_supported_version(tmp_path: Path) -> None:
    _fake(tmp_path / "bin" / "python3", 12)
    _fake(tmp_path / "bin" / "python3.13", 13)
    done = _find(tmp_path)
    assert (done.returncode, done.stdout.strip()) == (0, str(tmp_path / "bin" / "python3"))


def test_an_old_python3_falls_back_to_pyenv(tmp_path: Path) -> None:
    _fake(tmp_path / "bin" / "python3", 10)
    minor = sys.version_info.minor
    real = tmp_path / "pyenv" / "versions" / f"3.{minor}.0" / "bin" / f"python3.{minor}"
    real.parent.mkdir(parents=True)
    real.symlink_to(sys.executable)  # this interpreter really runs the probe
    done = _find(tmp_path)
    assert (done.returncode, done.stdout.strip()) == (0, str(real)), done.stderr


def test_all_lists_one_interpreter_per_minor_version(tmp_path: Path) -> None:
    _fake(tmp_path / "bin" / "python3", 12)
    _fake(tmp_path / "bin" / "python3.12", 12)
    _fake(tmp_path / "bin" / "python3.13", 13)
    _fake(tmp_path / "bin" / "python3.11", 11)
    done = _find(tmp_path, "--all")
    assert done.returncode == 0
    assert done.stdout.split() == [
        str(tmp_path / "bin" / name) for name in ("python3", "python3.13", "python3.11")
    ]


def test_nothing_suitable_is_one_line_and_exit_1(tmp_path: Path) -> None:
    _fake(tmp_path / "bin" / "python3", 10)
    _fake(tmp_path / "bin" / "python3.14", 14)  # not a name the script looks for
    done = _find(tmp_path)
    assert done.returncode == 1 and done.stdout == ""
    assert done.stderr.strip() == "no Python 3.11, 3.12 or 3.13 found on PATH or in pyenv"
    assert os.access(SCRIPT, os.X_OK)

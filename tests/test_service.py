"""``wakemark service`` and ``wakemark serve``'s start-up lines, with real processes.

This machine (a container) has no ``systemd --user`` to install into, so the systemd
unit is checked the documented way instead: ``systemd-analyze --user verify`` on the
generated file, then its exact ``ExecStart`` run with its ``Environment`` until /health
answers. The launchd plist is checked by reading it back.
"""

from __future__ import annotations

import http.client
import json
import os
import plistlib
import shlex
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

import wakemark
from tests.conftest import free_port, stop
from wakemark.services.cli import service

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[1]


def _env(home: Path, port: int, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("WAKEMARK_")}
    env.update(WAKEMARK_HOME=str(home), WAKEMARK_PORT=str(port), WAKEMARK_EMBEDDER="off")
    return {**env, **extra}


def _wakemark(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "wakemark.services.cli.main", *args],
        env=env, capture_output=True, text=True, timeout=120, cwd=ROOT,
    )  # fmt: skip


def _health(port: int) -> dict | None:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
    try:
        conn.request("GET", "/health")
        res = conn.getresponse()
        return json.loads(res.read()) if res.status == 200 else None
    except OSError:
        return None
    finally:
        conn.close()


@contextmanager
def _running(argv: list[str], env: dict[str, str], port: int, log: Path) -> Iterator[dict]:
    """``argv`` started and answering /health on ``port``; yields that answer."""
    with log.open("w") as stderr:
        proc = subprocess.Popen(argv, env=env, stdout=stderr, stderr=stderr, cwd="/")
    try:
        deadline = time.monotonic() + 60  # gunicorn boots in seconds; a loaded box is slower
        while (health := _health(port)) is None:
            if proc.poll() is not None:
                pytest.fail(f"exited {proc.returncode}: {log.read_text()}")
            if time.monotonic() > deadline:
                pytest.fail(f"never answered /health: {log.read_text()}")
            time.sleep(0.2)
        yield health
    finally:
        stop(proc)


def _unescape(value: str) -> str:
    return value.replace("%%", "%").replace("$$", "$")


def _unit(text: str) -> tuple[list[str], dict[str, str]]:
    """ExecStart's argv and the Environment of a unit that ``service`` wrote."""
    argv: list[str] = []
    env: dict[str, str] = {}
    for line in text.splitlines():
        key, _, value = line.partition("=")
        if key == "ExecStart":
            argv = [_unescape(a) for a in shlex.split(value)]
        elif key == "Environment":
            name, _, val = _unescape(shlex.split(value)[0]).partition("=")
            env[name] = val
    return argv, env


def _verify(unit: Path, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    if not shutil.which("systemd-analyze"):
        if sys.platform != "linux":
            pytest.skip("systemd units are checked on Linux")
        pytest.fail("systemd-analyze missing: install the Debian `systemd` package (.ci/run)")
    # Short: systemd reads the user's socket units, whose paths under this directory must
    # fit a socket address (108 bytes), which a test worker's tmp_path may not.
    with tempfile.TemporaryDirectory(prefix="xdg-", dir="/tmp") as runtime_dir:
        os.chmod(runtime_dir, 0o700)
        env = {**os.environ, "XDG_RUNTIME_DIR": runtime_dir}
        return subprocess.run(
            ["systemd-analyze", "--user", "verify", str(unit)],
            env=env, capture_output=True, text=True, timeout=60,
        )  # fmt: skip


def test_the_systemd_unit_verifies_and_its_command_serves(tmp_path: Path) -> None:
    # A data directory whose name needs every kind of escaping systemd has.
    home = tmp_path / 'wake mark 100% $HOME "q"'
    port = free_port()
    env = _env(home, port, WAKEMARK_WORKERS="1", XDG_CONFIG_HOME=str(tmp_path / "config"))
    dry = _wakemark(env, "service", "install", "--dry-run")
    assert dry.returncode == 0, dry.stderr
    head, _, text = dry.stdout.partition("\n")
    assert head == f"# {tmp_path / 'config' / 'systemd' / 'user' / 'wakemark.service'}"
    assert "Restart=on-failure" in text and "RestartPreventExitStatus=2" in text
    assert "WantedBy=default.target" in text  # started at login
    unit = tmp_path / "wakemark.service"
    unit.write_text(text)
    verified = _verify(unit, tmp_path)
    assert (verified.returncode, verified.stderr) == (0, ""), verified.stderr

    argv, unit_env = _unit(text)
    assert argv == [sys.executable, "-m", "wakemark.services.cli.main", "serve"]
    assert unit_env == {
        "WAKEMARK_EMBEDDER": "off", "WAKEMARK_HOME": str(home),
        "WAKEMARK_PORT": str(port), "WAKEMARK_WORKERS": "1",
    }  # fmt: skip
    # As systemd starts it: that environment only (and a PATH), from another directory.
    bare = {"PATH": "/usr/bin:/bin", **unit_env}
    with _running(argv, bare, port, tmp_path / "service.log") as health:
        assert health["version"] == wakemark.__version__
    assert (home / "token").exists() and (home / "wakemark.db").exists()


def test_verify_catches_a_broken_unit(tmp_path: Path) -> None:
    # The check above can fail: a unit whose command does not exist does not verify.
    text = service.Systemd().render(["/nonexistent/python", "-m", "x"], {"WAKEMARK_HOME": "/h"})
    unit = tmp_path / "wakemark.service"
    unit.write_text(text)
    verified = _verify(unit, tmp_path)
    assert verified.returncode != 0 or verified.stderr


def test_the_launchd_agent(tmp_path: Path) -> None:
    env = {"WAKEMARK_HOME": str(tmp_path / "h"), "WAKEMARK_TOKEN": "t0k"}
    argv = service.server_argv()
    job = plistlib.loads(service.Launchd().render(argv, env).encode())
    log = str(tmp_path / "h" / "logs" / "service.log")
    assert job == {
        "Label": service.LABEL,
        "ProgramArguments": argv,
        "EnvironmentVariables": env,
        "RunAtLoad": True,
        "KeepAlive": {"SuccessfulExit": False},
        "ThrottleInterval": 10,
        "StandardOutPath": log,
        "StandardErrorPath": log,
    }
    assert service.manager_for("darwin").logs_argv(50, False)[:3] == ["tail", "-n", "50"]
    assert service.manager_for("linux").logs_argv(50, True) == [
        "journalctl", "--user", "-u", "wakemark.service", "-n", "50", "--no-pager", "-f",
    ]  # fmt: skip


def test_service_env_keeps_the_settings_and_masks_the_token(tmp_path: Path) -> None:
    env = _env(tmp_path / "h", 4242, WAKEMARK_TOKEN="s3cret-value", WAKEMARK_TEST_X="no")
    env["XDG_CONFIG_HOME"] = str(tmp_path)
    assert service.service_env(env) == {
        "WAKEMARK_EMBEDDER": "off", "WAKEMARK_HOME": str(tmp_path / "h"),
        "WAKEMARK_PORT": "4242", "WAKEMARK_TOKEN": "s3cret-value",
    }  # fmt: skip
    dry = _wakemark(env, "service", "install", "--dry-run")
    assert "s3cret-value" not in dry.stdout and "WAKEMARK_TOKEN=<WAKEMARK_TOKEN>" in dry.stdout


@pytest.mark.parametrize("action", ["install", "uninstall", "status", "logs"])
def test_without_a_service_manager_it_says_how_to_run_the_server(
    tmp_path: Path, action: str
) -> None:
    env = _env(tmp_path / "h", free_port(), PATH=str(tmp_path))  # no systemctl on PATH
    done = _wakemark(env, "service", action)
    assert done.returncode == 2
    assert done.stderr == (
        "wakemark: no service manager here (no systemctl); run the server in a terminal"
        " instead: wakemark serve\n"
    )
    assert not (tmp_path / "h").exists()


def test_install_offers_the_service_when_no_server_runs(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    env = _env(home / ".wakemark", free_port(), HOME=str(home), PATH=str(tmp_path))
    hint = _wakemark(env, "install", "codex")  # no terminal: a hint, not a question
    assert hint.returncode == 0, hint.stderr
    [line] = hint.stderr.splitlines()
    assert "no server answers at http://127.0.0.1:" in line and "wakemark serve" in line
    forced = _wakemark(env, "install", "codex", "--service")
    assert forced.returncode == 2 and len(forced.stderr.splitlines()) == 1
    assert "no service manager here" in forced.stderr
    quiet = _wakemark(env, "install", "codex", "--no-service")
    assert (quiet.returncode, quiet.stderr) == (0, "")


def test_serve_prints_the_next_steps_and_refuses_a_port_in_use(tmp_path: Path) -> None:
    port = free_port()
    home = tmp_path / "home"
    env = _env(home, port, WAKEMARK_WORKERS="1")
    argv = [sys.executable, "-m", "wakemark.services.cli.main", "serve"]
    log = tmp_path / "serve.log"
    with _running(argv, env, port, log):
        lines = log.read_text().splitlines()
        assert lines[:4] == [
            f"wakemark: serving on http://127.0.0.1:{port} (sqlite, 1 worker(s) x 1 thread(s))",
            f"wakemark: token: {home / 'token'} (the hooks and the viewer use it)",
            "wakemark: next: `wakemark install <agent>` (claude-code, codex, cursor,"
            " gemini-cli, kiro-cli), then restart the agent",
            "wakemark: viewer: `wakemark ui`; in the background, at login:"
            " `wakemark service install`",
        ]
        second = _wakemark(env, "serve")
        assert second.returncode == 2
        assert second.stderr == (
            f"wakemark: port {port} is in use: wakemark {wakemark.__version__} is already"
            " running there (`wakemark status`); to run another one, pass --port or set"
            " WAKEMARK_PORT\n"
        )


def test_serve_on_a_port_another_program_holds(tmp_path: Path) -> None:
    with socket.socket() as other:
        other.bind(("127.0.0.1", 0))
        other.listen()
        port = other.getsockname()[1]
        done = _wakemark(_env(tmp_path / "home", port), "serve")
    assert done.returncode == 2
    assert done.stderr == (
        f"wakemark: port {port} is in use by another program (no wakemark answers there):"
        " stop it, or pass --port / set WAKEMARK_PORT\n"
    )


# A stand-in for `systemctl --user` where no user manager runs: it records each call,
# and `restart` starts the unit's ExecStart with its Environment the way systemd would,
# so install, status and uninstall run against the real file and a real server.
FAKE_SYSTEMCTL = """#!/bin/sh
echo "$*" >> "$FAKE_DIR/calls"
unit="$XDG_CONFIG_HOME/systemd/user/wakemark.service"
case "$*" in
  "--user show-environment") exit 0 ;;
  "--user is-active wakemark.service") cat "$FAKE_DIR/state" 2>/dev/null || echo inactive ;;
  "--user restart wakemark.service")
    eval "set -- $(sed -n 's/^Environment=//p' "$unit")"
    for kv in "$@"; do export "$kv"; done
    eval "set -- $(sed -n 's/^ExecStart=//p' "$unit")"
    "$@" > "$FAKE_DIR/log" 2>&1 &
    echo $! > "$FAKE_DIR/pid"; echo active > "$FAKE_DIR/state" ;;
  "--user disable --now wakemark.service")
    kill "$(cat "$FAKE_DIR/pid")"; echo inactive > "$FAKE_DIR/state" ;;
esac
"""


def test_install_status_uninstall_with_a_stand_in_systemctl(tmp_path: Path) -> None:
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "systemctl").write_text(FAKE_SYSTEMCTL)
    (fake / "systemctl").chmod(0o755)
    port = free_port()
    env = _env(tmp_path / "home", port, WAKEMARK_WORKERS="1", FAKE_DIR=str(tmp_path))
    env.update(PATH=f"{fake}:/usr/bin:/bin", XDG_CONFIG_HOME=str(tmp_path / "config"))
    unit = tmp_path / "config" / "systemd" / "user" / "wakemark.service"
    try:
        done = _wakemark(env, "install", "codex", "--service", "--project", str(tmp_path))
        assert done.returncode == 0, done.stdout + done.stderr
        assert f"installed {unit}: starts at every login" in done.stdout
        assert f"wakemark is running at http://127.0.0.1:{port}" in done.stdout
        assert unit.stat().st_mode & 0o777 == 0o600
        assert _health(port) is not None
        status = _wakemark(env, "service", "status")
        assert status.returncode == 0, status.stdout
        assert status.stdout.splitlines() == [
            f"wakemark service: systemd active ({unit})",
            f"server: wakemark {wakemark.__version__} answering at http://127.0.0.1:{port} (ok)",
        ]
        again = _wakemark(env, "install", "codex", "--project", str(tmp_path))
        assert (again.returncode, again.stderr) == (0, "")  # a server answers: no offer
    finally:
        gone = _wakemark(env, "service", "uninstall")
    assert gone.returncode == 0 and not unit.exists()
    assert (tmp_path / "calls").read_text().splitlines() == [
        "--user show-environment",
        "--user is-active wakemark.service",
        "--user daemon-reload",
        "--user enable wakemark.service",
        "--user restart wakemark.service",
        "--user show-environment",
        "--user is-active wakemark.service",
        "--user show-environment",
        "--user disable --now wakemark.service",
        "--user daemon-reload",
    ]
    status = _wakemark(env, "service", "status")
    assert status.returncode == 1 and "not installed" in status.stdout


def test_install_asks_on_a_terminal(tmp_path: Path) -> None:
    import pty

    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "systemctl").write_text(FAKE_SYSTEMCTL)
    (fake / "systemctl").chmod(0o755)
    env = _env(tmp_path / "home", free_port(), FAKE_DIR=str(tmp_path))
    env.update(PATH=f"{fake}:/usr/bin:/bin", XDG_CONFIG_HOME=str(tmp_path / "config"))
    primary, secondary = pty.openpty()
    argv = [sys.executable, "-m", "wakemark.services.cli.main", "install", "codex"]
    argv += ["--project", str(tmp_path)]
    proc = subprocess.Popen(
        argv, env=env, cwd=ROOT, stdin=secondary, stdout=secondary, stderr=subprocess.PIPE
    )
    os.close(secondary)
    os.write(primary, b"n\n")
    _out, err = proc.communicate(timeout=120)
    seen = b""
    try:
        while chunk := os.read(primary, 4096):
            seen += chunk
    except OSError:  # the terminal closed with the process
        pass
    os.close(primary)
    assert proc.returncode == 0, err
    assert b"Install the background service? [Y/n]" in seen + err  # readline: stderr
    assert b"start it: `wakemark service install`" in err
    assert not (tmp_path / "config" / "systemd").exists()


def test_install_refuses_a_port_it_could_not_serve_on(tmp_path: Path) -> None:
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "systemctl").write_text(FAKE_SYSTEMCTL)
    (fake / "systemctl").chmod(0o755)
    with socket.socket() as other:
        other.bind(("127.0.0.1", 0))
        other.listen()
        port = other.getsockname()[1]
        env = _env(tmp_path / "home", port, FAKE_DIR=str(tmp_path))
        env.update(PATH=f"{fake}:/usr/bin:/bin", XDG_CONFIG_HOME=str(tmp_path / "config"))
        done = _wakemark(env, "service", "install")
    assert done.returncode == 2
    assert done.stderr == (
        f"wakemark: port {port} is in use by another program (no wakemark answers there):"
        " stop it, or pass --port / set WAKEMARK_PORT\n"
    )
    assert not (tmp_path / "config" / "systemd").exists()

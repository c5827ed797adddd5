"""``wakemark service install|uninstall|status|logs``: ``wakemark serve`` in the background.

A systemd user unit on Linux, a launchd agent on macOS: started now and at every login,
restarted when it fails, its output where ``logs`` reads it (the user journal; under
launchd ``$WAKEMARK_HOME/logs/service.log``). Exit 2 (a setting or a port it cannot use)
is not restarted: the next attempt would fail the same way. The service runs
``wakemark serve`` with the ``WAKEMARK_*`` settings of the shell that installed it, so
it serves the same home, port and database the agents' hooks were set up for. Where no
service manager runs, it says so in one line and how to run the server instead.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from wakemark.services.cli.args import positive_int

if TYPE_CHECKING:
    import subprocess

# plistlib, shutil and subprocess are imported where used: every command's module is
# loaded to build the parser, so what one command needs is not paid for by the others.

UNIT = "wakemark.service"
LABEL = "wakemark.server"  # the launchd job label
START_WAIT_S = 15.0  # how long `install` waits for /health before pointing at the logs


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    install = sub.add_parser("install", help="install the service, start it now and at every login")
    install.add_argument(
        "--dry-run", action="store_true", help="print the service file and its path, change nothing"
    )
    sub.add_parser("uninstall", help="stop the service and remove its file")
    sub.add_parser("status", help="installed? running? does the server answer?")
    logs = sub.add_parser("logs", help="the server's output")
    logs.add_argument(
        "-n", "--lines", type=positive_int, default=100, metavar="N", help="last N lines (100)"
    )
    logs.add_argument("-f", "--follow", action="store_true", help="keep printing new lines")


def server_argv() -> list[str]:
    """What the service runs: ``wakemark serve`` under this very interpreter, so it
    finds the package wherever it is installed (a venv, pipx, a checkout)."""
    return [sys.executable, "-m", "wakemark.services.cli.main", "serve"]


def service_env(environ: Any = None) -> dict[str, str]:
    """The ``WAKEMARK_*`` settings set in ``environ``, with the data directory made
    absolute: the service starts with neither this shell's variables nor its cwd."""
    from wakemark.shared.config import Settings, documented_settings

    env = os.environ if environ is None else environ
    names = {name for name, _doc in documented_settings()}
    out = {name: env[name] for name in sorted(names) if name in env}
    out["WAKEMARK_HOME"] = str(Settings.from_env(env).home.absolute())
    return out


class Systemd:
    name = "systemd"

    def path(self) -> Path:
        config = os.environ.get("XDG_CONFIG_HOME") or os.path.expanduser("~/.config")
        return Path(config) / "systemd" / "user" / UNIT

    def render(self, argv: list[str], env: dict[str, str]) -> str:
        lines = [
            "[Unit]",
            "Description=wakemark: persistent memory for AI coding agents",
            "",
            "[Service]",
            "Type=exec",
            "ExecStart=" + " ".join(_systemd_quote(a, exec_line=True) for a in argv),
            *(f"Environment={_systemd_quote(f'{k}={v}')}" for k, v in env.items()),
            "Restart=on-failure",
            "RestartSec=2",
            "RestartPreventExitStatus=2",
            "",
            "[Install]",
            "WantedBy=default.target",
        ]
        return "\n".join(lines) + "\n"

    def unavailable(self) -> str | None:
        import shutil

        if not shutil.which("systemctl"):
            return "no systemctl"
        done = _run(["systemctl", "--user", "show-environment"])
        if done.returncode != 0:
            return "systemctl --user: " + _first_line(done.stderr, "no user session")
        return None

    def start(self) -> subprocess.CompletedProcess[str]:
        for argv in (
            ["systemctl", "--user", "daemon-reload"],
            ["systemctl", "--user", "enable", UNIT],
            ["systemctl", "--user", "restart", UNIT],  # a re-install runs the new unit
        ):
            done = _run(argv)
            if done.returncode != 0:
                return done
        return done

    def stop(self) -> None:
        _run(["systemctl", "--user", "disable", "--now", UNIT])

    def forget(self) -> None:
        _run(["systemctl", "--user", "daemon-reload"])

    def state(self) -> str:
        return _run(["systemctl", "--user", "is-active", UNIT]).stdout.strip() or "unknown"

    def running(self, state: str) -> bool:
        return state == "active"

    def logs_argv(self, lines: int, follow: bool) -> list[str]:
        argv = ["journalctl", "--user", "-u", UNIT, "-n", str(lines), "--no-pager"]
        return argv + (["-f"] if follow else [])


class Launchd:
    """Written from launchd.plist(5) and checked by reading the plist back; not yet run
    on a real Mac, which the docs say."""

    name = "launchd"

    def path(self) -> Path:
        return Path(os.path.expanduser("~/Library/LaunchAgents")) / f"{LABEL}.plist"

    def log_path(self, env: dict[str, str]) -> Path:
        return Path(env["WAKEMARK_HOME"]) / "logs" / "service.log"

    def render(self, argv: list[str], env: dict[str, str]) -> str:
        import plistlib

        log = str(self.log_path(env))
        job = {
            "Label": LABEL,
            "ProgramArguments": argv,
            "EnvironmentVariables": env,
            "RunAtLoad": True,  # at login, as the agent loads
            "KeepAlive": {"SuccessfulExit": False},  # restarted when it exits with an error
            "ThrottleInterval": 10,
            "StandardOutPath": log,
            "StandardErrorPath": log,
        }
        return plistlib.dumps(job).decode()

    def unavailable(self) -> str | None:
        import shutil

        return None if shutil.which("launchctl") else "no launchctl"

    def _domain(self) -> str:
        return f"gui/{os.getuid()}"

    def start(self) -> subprocess.CompletedProcess[str]:
        _run(["launchctl", "bootout", f"{self._domain()}/{LABEL}"])  # a re-install reloads
        self.log_path(service_env()).parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        return _run(["launchctl", "bootstrap", self._domain(), str(self.path())])

    def stop(self) -> None:
        _run(["launchctl", "bootout", f"{self._domain()}/{LABEL}"])

    def forget(self) -> None:
        pass

    def state(self) -> str:
        done = _run(["launchctl", "print", f"{self._domain()}/{LABEL}"])
        if done.returncode != 0:
            return "not loaded"
        for line in done.stdout.splitlines():
            key, _, value = line.strip().partition(" = ")
            if key == "state":
                return value
        return "loaded"

    def running(self, state: str) -> bool:
        return state == "running"

    def logs_argv(self, lines: int, follow: bool) -> list[str]:
        log = str(self.log_path(service_env()))
        return ["tail", "-n", str(lines), *(["-F"] if follow else []), log]


Manager = Systemd | Launchd


def manager_for(platform: str = sys.platform) -> Manager:
    return Launchd() if platform == "darwin" else Systemd()


def no_manager_line(reason: str) -> str:
    return (
        f"no service manager here ({reason}); run the server in a terminal instead: wakemark serve"
    )


def run(args: argparse.Namespace) -> int:
    manager = manager_for()
    if args.action == "install" and args.dry_run:
        print(f"# {manager.path()}")
        print(_masked(manager.render(server_argv(), service_env())), end="")
        return 0
    reason = manager.unavailable()
    if reason:
        print(f"wakemark: {no_manager_line(reason)}", file=sys.stderr)
        return 2
    if args.action == "install":
        return install(manager)
    if args.action == "uninstall":
        return uninstall(manager)
    if args.action == "status":
        return status(manager)
    argv = manager.logs_argv(args.lines, args.follow)
    sys.stdout.flush()
    os.execvp(argv[0], argv)
    return 0  # not reached


def install(manager: Manager) -> int:
    """Write the service file, (re)start it and wait a little for /health."""
    from wakemark.services.cli.serve import port_problem, wakemark_at
    from wakemark.shared.config import Settings

    settings = Settings.from_env()
    url = f"http://{settings.host}:{settings.port}"
    if not manager.running(manager.state()):
        # The service would exit 2 on a port in use and, by design, not be restarted.
        if wakemark_at(settings.host, settings.port):
            print(
                f"wakemark: a wakemark started by hand already answers at {url}: stop it,"
                " then run `wakemark service install` again",
                file=sys.stderr,
            )
            return 2
        problem = port_problem(settings.host, settings.port)
        if problem:
            print(f"wakemark: {problem}", file=sys.stderr)
            return 2
    path = manager.path()
    path.parent.mkdir(parents=True, exist_ok=True)
    # 0600: the environment it carries may hold WAKEMARK_TOKEN or a database password.
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        fh.write(manager.render(server_argv(), service_env()))
    os.chmod(path, 0o600)
    done = manager.start()
    if done.returncode != 0:
        print(
            f"wakemark: {manager.name} refused {path}: {_first_line(done.stderr, 'no reason')}",
            file=sys.stderr,
        )
        return 1
    print(f"installed {path}: starts at every login, restarted if it fails")
    deadline = time.monotonic() + START_WAIT_S
    while time.monotonic() < deadline:
        if wakemark_at(settings.host, settings.port):
            print(f"wakemark is running at {url}; logs: wakemark service logs")
            return 0
        time.sleep(0.5)
    print(f"wakemark is starting (not answering at {url} yet): wakemark service status / logs")
    return 0


def uninstall(manager: Manager) -> int:
    path = manager.path()
    if not path.exists():
        print(f"wakemark service: not installed (no {path})")
        return 0
    manager.stop()
    path.unlink()
    manager.forget()
    print(f"stopped and removed {path}")
    return 0


def status(manager: Manager) -> int:
    from wakemark.services.cli.serve import wakemark_at
    from wakemark.shared.config import Settings

    path = manager.path()
    if not path.exists():
        print(f"wakemark service: not installed (no {path}); install it: wakemark service install")
        return 1
    state = manager.state()
    print(f"wakemark service: {manager.name} {state} ({path})")
    settings = Settings.from_env()
    health = wakemark_at(settings.host, settings.port)
    url = f"http://{settings.host}:{settings.port}"
    if health is None:
        print(f"server: not answering at {url}; see: wakemark service logs")
        return 1
    print(f"server: wakemark {health.get('version')} answering at {url} ({health.get('status')})")
    return 0 if manager.running(state) else 1


def _systemd_quote(value: str, exec_line: bool = False) -> str:
    # `%` starts a specifier everywhere; `$` a variable only on the command line.
    value = value.replace("\\", "\\\\").replace('"', '\\"').replace("%", "%%")
    if exec_line:
        value = value.replace("$", "$$")
    return f'"{value}"'


def _masked(text: str) -> str:
    token = os.environ.get("WAKEMARK_TOKEN", "").strip()
    return text.replace(token, "<WAKEMARK_TOKEN>") if token else text


def _run(argv: list[str]) -> subprocess.CompletedProcess[str]:
    import subprocess

    try:
        return subprocess.run(argv, capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return subprocess.CompletedProcess(argv, 1, "", str(exc))


def _first_line(text: str, default: str) -> str:
    return next((line.strip() for line in text.splitlines() if line.strip()), default)

"""``wakemark serve``: migrate, then run the API under gunicorn (threaded workers)."""

from __future__ import annotations

import argparse
import errno
import os
import socket
import sys
from typing import Any

from wakemark.services.cli.args import setting

# Threads per worker, by backend. Requests are short and CPU-bound (the GIL), so threads
# only help where a request waits on I/O outside the process: Postgres round trips. With
# SQLite every step holds the GIL or the write lock, and a second thread only contends
# for them. One thread is served by InlineWorker (services/api/polled.py), which answers
# on the polling thread; more go to PolledWorker's pool. Both read requests whole before
# serving them, so a slow client never holds a thread.
DEFAULT_THREADS = {"sqlite": 1, "postgres": 4}
INLINE_WORKER = "wakemark.services.api.polled.InlineWorker"
POLLED_WORKER = "wakemark.services.api.polled.PolledWorker"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--host", help=f"bind address (default: {_default('host')})")
    parser.add_argument("--port", type=setting("port"), help=f"port (default: {_default('port')})")
    parser.add_argument(
        "--workers",
        type=setting("workers"),
        help=f"gunicorn worker processes (default: {_default('workers')})",
    )
    parser.add_argument(
        "--threads",
        type=int,
        help="threads per worker (default 1 with SQLite, 4 with Postgres)",
    )


def _default(key: str) -> str:
    """The value in effect, for --help: the variable's when it is set."""
    from wakemark.shared.config import Settings, env_name

    name = env_name(key)
    if name in os.environ:
        return f"{os.environ[name]}, from {name}"
    return f"{name}, else {getattr(Settings(), key)}"


def wakemark_at(host: str, port: int) -> dict[str, Any] | None:
    """What a wakemark at ``host:port`` says on /health; None when none answers there."""
    from wakemark.services.cli.status import fetch, is_wakemark

    try:
        _code, health = fetch(host, port, "/health")
    except OSError:
        return None
    return health if is_wakemark(health) else None


def port_problem(host: str, port: int) -> str | None:
    """Why the server could not listen on ``host:port``, in one line; None if it can."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as gunicorn binds
        try:
            s.bind((host, port))
        except OSError as exc:
            if exc.errno != errno.EADDRINUSE:
                return f"cannot listen on {host}:{port}: {exc.strerror}"
        else:
            return None
    health = wakemark_at(host, port)
    if health is not None:
        return (
            f"port {port} is in use: wakemark {health['version']} is already running there"
            " (`wakemark status`); to run another one, pass --port or set WAKEMARK_PORT"
        )
    return (
        f"port {port} is in use by another program (no wakemark answers there):"
        " stop it, or pass --port / set WAKEMARK_PORT"
    )


def gunicorn_argv(host: str, port: int, workers: int, threads: int) -> list[str]:
    bind = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    return [
        sys.executable, "-m", "gunicorn",
        "--bind", bind,
        "--workers", str(workers),
        "--worker-class", INLINE_WORKER if threads == 1 else POLLED_WORKER,
        "--threads", str(threads),
        # Recycle workers now and then so a slow leak can never grow without bound, but
        # rarely: a restart re-imports the app and reloads the model, which costs ingest
        # throughput when it happens often.
        "--max-requests", "50000",
        "--max-requests-jitter", "5000",
        "--graceful-timeout", "10",
        # gunicorn 27's control socket is one fixed path per user: several servers (tests,
        # bench) would fight over it, and wakemark does not use it.
        "--no-control-socket",
        "--config", "python:wakemark.services.api.gunicorn_conf",
        "wakemark.services.api.wsgi:app",
    ]  # fmt: skip


def run(args: argparse.Namespace) -> int:
    from wakemark.services.api.security import ensure_token
    from wakemark.services.cli.model import prepare_for_serve
    from wakemark.shared.config import ConfigError, Settings, env_name, prepare_home
    from wakemark.shared.storage import migrate

    settings = Settings.from_env()
    changes = {k: v for k in ("host", "port", "workers") if (v := getattr(args, k)) is not None}
    if changes:
        # Through the environment, so every gunicorn worker builds the same settings.
        for key, value in changes.items():
            os.environ[env_name(key)] = str(value)
        settings = Settings.from_env()
    threads = DEFAULT_THREADS[settings.backend] if args.threads is None else args.threads
    if threads < 1 or threads > 64:
        raise ConfigError("--threads: expected an integer from 1 to 64")
    problem = port_problem(settings.host, settings.port)
    if problem:
        raise ConfigError(problem)
    prepare_home(settings)
    migrate(settings)
    ensure_token(settings)  # before the workers start, so they never race to create it
    prepare_for_serve(settings)
    argv = gunicorn_argv(settings.host, settings.port, settings.workers, threads)
    for line in next_steps(settings, f"http://{argv[4]}", threads):
        print(f"wakemark: {line}", file=sys.stderr)
    sys.stderr.flush()
    os.execv(sys.executable, argv)
    return 0  # not reached


def next_steps(settings: Any, url: str, threads: int) -> list[str]:
    from wakemark.services import agents

    token = "WAKEMARK_TOKEN" if settings.token else str(settings.token_path)
    return [
        f"serving on {url} ({settings.backend}, {settings.workers} worker(s) x {threads}"
        " thread(s))",
        f"token: {token} (the hooks and the viewer use it)",
        f"next: `wakemark install <agent>` ({', '.join(agents.names())}), then restart the agent",
        "viewer: `wakemark ui`; in the background, at login: `wakemark service install`",
    ]

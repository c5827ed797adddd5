"""``wakemark serve``: migrate, then run the API under gunicorn (threaded workers)."""

from __future__ import annotations

import argparse
import os
import sys

# Threads per worker, by backend. Requests are short and CPU-bound (the GIL), so threads
# only help where a request waits on I/O outside the process: Postgres round trips. With
# SQLite every step holds the GIL or the write lock, and a second thread only contends
# for them. One thread is served by InlineWorker (services/api/worker.py), which answers
# on the polling thread; more go to gthread's pool.
DEFAULT_THREADS = {"sqlite": 1, "postgres": 4}
INLINE_WORKER = "wakemark.services.api.worker.InlineWorker"  # answers on the polling thread


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--host", help="bind address (default WAKEMARK_HOST, 127.0.0.1)")
    parser.add_argument("--port", type=int, help="port (default WAKEMARK_PORT, 37800)")
    parser.add_argument(
        "--workers", type=int, help="gunicorn worker processes (default WAKEMARK_WORKERS)"
    )
    parser.add_argument(
        "--threads",
        type=int,
        help="threads per worker (default 1 with SQLite, 4 with Postgres)",
    )


def gunicorn_argv(host: str, port: int, workers: int, threads: int) -> list[str]:
    bind = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    return [
        sys.executable, "-m", "gunicorn",
        "--bind", bind,
        "--workers", str(workers),
        # One thread: the request is answered on the polling thread (services/api/worker).
        "--worker-class", INLINE_WORKER if threads == 1 else "gthread",
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
    prepare_home(settings)
    migrate(settings)
    ensure_token(settings)  # before the workers start, so they never race to create it
    prepare_for_serve(settings)
    argv = gunicorn_argv(settings.host, settings.port, settings.workers, threads)
    print(
        f"wakemark: serving on http://{argv[4]} ({settings.backend}, {settings.workers} "
        f"worker(s) x {threads} thread(s))",
        file=sys.stderr,
        flush=True,
    )
    os.execv(sys.executable, argv)
    return 0  # not reached

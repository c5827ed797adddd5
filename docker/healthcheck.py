#!/usr/bin/env python3
"""Container healthcheck per role (``wakemark-healthcheck api|worker|beat``): exit 0 = healthy."""

from __future__ import annotations

import os
import socket
import sys
import urllib.request


def api() -> bool:
    # The request carries Host 127.0.0.1:<port>, which the API's Host guard accepts.
    port = os.environ.get("WAKEMARK_PORT", "37800")
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=5) as resp:
        return bool(resp.status == 200)


def worker() -> bool:
    from wakemark.services.worker import create_celery
    from wakemark.shared.config import Settings

    app = create_celery(Settings.from_env())
    # Only this container's worker (node ``wakemark-<pid>@<host>``, see `wakemark worker`):
    # a live sibling in another container must not hide a wedged one.
    suffix = f"@{socket.gethostname()}"
    replies = app.control.ping(timeout=5)
    return any(name.endswith(suffix) for reply in replies for name in reply)


def beat() -> bool:
    # Beat holds no socket to probe; without its broker it schedules nothing.
    import redis

    from wakemark.shared.config import Settings

    url = Settings.from_env().redis_url or ""
    return bool(redis.Redis.from_url(url, socket_connect_timeout=3, socket_timeout=3).ping())


CHECKS = {"api": api, "worker": worker, "beat": beat}


def main(argv: list[str]) -> int:
    if len(argv) != 1 or argv[0] not in CHECKS:
        print(f"usage: wakemark-healthcheck {'|'.join(CHECKS)}", file=sys.stderr)
        return 2
    try:
        return 0 if CHECKS[argv[0]]() else 1
    except Exception as exc:
        print(f"unhealthy: {exc.__class__.__name__}: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

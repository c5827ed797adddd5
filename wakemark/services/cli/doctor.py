"""``wakemark doctor``: check the installation and say how to fix each problem found."""

from __future__ import annotations

import argparse
import os
import socket
import stat
from collections.abc import Callable
from pathlib import Path

from wakemark.shared.config import Settings

OK, WARN, FAIL = "ok", "warn", "FAIL"  # WARN: an optional part is missing; not a failure
Result = tuple[str, str]  # (OK, WARN or FAIL; what was found and how to fix it)
Check = Callable[[Settings], Result]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.epilog = "Exit status is 1 when any check fails (FAIL); warnings (warn) leave it 0."


def _mode(path: Path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


def check_home(settings: Settings) -> Result:
    home = settings.home
    if not home.exists():
        return FAIL, f"data dir {home} missing: run `wakemark migrate` (or `wakemark serve`)"
    if _mode(home) & 0o077:
        return FAIL, f"data dir {home} is {oct(_mode(home))}: run `chmod 700 {home}`"
    return OK, f"data dir {home} (0700)"


def check_token(settings: Settings) -> Result:
    if settings.token:
        return OK, "token from WAKEMARK_TOKEN"
    path = settings.token_path
    if not path.exists():
        return FAIL, f"no token at {path}: `wakemark serve` creates it on first start"
    if _mode(path) & 0o077:
        return FAIL, f"token {path} is {oct(_mode(path))}: run `chmod 600 {path}`"
    if not path.read_text().strip():
        return FAIL, f"token {path} is empty: delete it and restart `wakemark serve`"
    return OK, f"token {path} (0600)"


def check_port(settings: Settings) -> Result:
    from wakemark.services.cli.status import fetch, is_wakemark, local_token

    where = f"{settings.host}:{settings.port}"
    try:
        code, health = fetch(settings.host, settings.port, "/health", local_token(settings))
    except OSError:
        with socket.socket(socket.AF_INET6 if ":" in settings.host else socket.AF_INET) as s:
            try:
                s.bind((settings.host, settings.port))
            except OSError as exc:
                return FAIL, f"port {where} unusable ({exc.strerror}): set WAKEMARK_PORT"
        return OK, f"port {where} free (server not running)"
    if code == 401 and isinstance(health, dict) and health.get("error") == "unauthorized":
        return FAIL, (
            f"port {where} served by wakemark, which refuses this machine's token: "
            f"WAKEMARK_TOKEN and {settings.token_path} must match the server's"
        )
    if is_wakemark(health):
        return OK, f"port {where} served by wakemark ({health.get('status')})"
    return FAIL, f"port {where} is used by another program: stop it or set WAKEMARK_PORT"


def check_database(settings: Settings) -> Result:
    from wakemark.shared.runtime import Runtime

    if settings.backend == "sqlite" and not settings.sqlite_path.exists():
        return FAIL, f"no database at {settings.sqlite_path}: run `wakemark migrate`"
    if settings.database_url:
        # Before the pool, which without the vector type only retries until it times out.
        from wakemark.shared.storage import missing_extensions

        try:
            missing, sql = missing_extensions(settings)
        except Exception as exc:
            return FAIL, f"database unreachable ({exc.__class__.__name__}): is it running? " + (
                "check WAKEMARK_DATABASE_URL"
            )
        if missing:
            what = "; ".join(f"extension {name} missing" for name in missing)
            return FAIL, (
                f"{what}: run `wakemark migrate` (it creates them when the role may), "
                f"or as a superuser: {sql}"
            )
    runtime = Runtime(settings)  # not ``build``: a check must not create the home
    try:
        storage = runtime.storage
    except Exception as exc:
        return FAIL, f"database unreachable ({exc.__class__.__name__}: {exc})"
    try:
        storage.ping()
    except Exception as exc:
        return FAIL, f"database unreachable ({exc.__class__.__name__}): is it running? check " + (
            "WAKEMARK_DATABASE_URL" if settings.database_url else str(settings.sqlite_path)
        )
    try:
        storage.stats()
    except Exception as exc:
        return FAIL, f"database not migrated ({exc.__class__.__name__}): run `wakemark migrate`"
    finally:
        runtime.close()
    return OK, f"database {settings.backend} reachable and migrated"


def check_redis(settings: Settings) -> Result:
    if not settings.redis_url:
        return OK, "redis not configured (in-process jobs)"
    import redis

    try:
        redis.Redis.from_url(settings.redis_url, socket_connect_timeout=3).ping()
    except Exception as exc:
        return FAIL, f"redis unreachable ({exc.__class__.__name__}): check WAKEMARK_REDIS_URL"
    return OK, "redis reachable"


def check_model(settings: Settings) -> Result:
    if settings.embedder == "off":
        return OK, "embedder off (lexical-only search)"
    from wakemark.shared.embedding import is_valid_export

    path = settings.onnx_model_path
    if not path.exists():
        return WARN, (
            f"embedding model missing at {path} (optional: search is full-text only):"
            " run `wakemark model export`"
        )
    if not is_valid_export(path):
        return FAIL, f"embedding model at {path} is invalid: run `wakemark model export --force`"
    return OK, f"embedding model {path}"


CHECKS: tuple[Check, ...] = (
    check_home,
    check_token,
    check_port,
    check_database,
    check_redis,
    check_model,
)


def run(args: argparse.Namespace) -> int:
    settings = Settings.from_env()
    failed = 0
    for check in CHECKS:
        try:
            status, message = check(settings)
        except Exception as exc:  # a broken check is a failed check, with its reason
            status, message = FAIL, f"{check.__name__}: {exc.__class__.__name__}: {exc}"
        failed += status == FAIL
        print(f"{status:<4}  {message}")
    print("all checks passed" if not failed else f"{failed} problem(s) found")
    return 1 if failed else 0

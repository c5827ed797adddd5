"""Fixtures for the process-level stack: a private Redis, a fresh Postgres schema, the
processes themselves; a failing test gets every process's log tail in its report."""

from __future__ import annotations

import os
import secrets
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from .stack import PG_BIN, PostgresServer, RedisServer, Stack

# Fast sweeps so recovery from a lost queue or a killed worker takes seconds; one API
# worker so that warming its embedder (via /v1/search) is deterministic.
STACK_ENV = {
    "WAKEMARK_WORKERS": "1",
    "WAKEMARK_SWEEP_INTERVAL_S": "2",
    "WAKEMARK_LOG_LEVEL": "info",
}

REQUIRE_SERVICES = os.environ.get("WAKEMARK_REQUIRE_SERVICES") == "1"  # as tests/conftest.py

_stacks: dict[str, list[Stack]] = {}


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[Any]) -> Iterator[None]:
    outcome: Any = yield
    report = outcome.get_result()
    if report.failed and report.when in ("setup", "call"):
        for stack in _stacks.get(item.nodeid, []):
            report.sections.append((f"stack logs ({stack.workdir})", stack.logs(60)))


def _need(binary: str) -> None:
    if shutil.which(binary) is None:
        reason = f"{binary} not on PATH"
        if REQUIRE_SERVICES:
            pytest.fail(f"WAKEMARK_REQUIRE_SERVICES=1 but {reason}")
        pytest.skip(reason)


@pytest.fixture
def private_redis(tmp_path: Path) -> Iterator[RedisServer]:
    _need("redis-server")
    server = RedisServer(tmp_path, password=secrets.token_hex(16))
    server.start()
    yield server
    server.stop()


@pytest.fixture
def private_postgres(tmp_path: Path) -> Iterator[PostgresServer]:
    """A private cluster: ``postgres`` its superuser, ``wakemark`` the app's owner role."""
    _need(str(PG_BIN / "postgres"))
    server = PostgresServer(tmp_path / "pg")
    server.init()
    yield server
    server.close()


@pytest.fixture
def start_stack(
    request: pytest.FixtureRequest, tmp_path: Path, onnx_model_path: Path
) -> Iterator[Any]:
    """``start_stack(**kwargs)`` -> a started ``Stack`` in its own directory; all stopped
    at teardown."""
    started: list[Stack] = _stacks.setdefault(request.node.nodeid, [])

    def start(name: str = "stack", **kwargs: Any) -> Stack:
        env = {**STACK_ENV, "WAKEMARK_MODEL_PATH": str(onnx_model_path), **kwargs.pop("env", {})}
        stack = Stack(tmp_path / name, env=env, **kwargs)
        started.append(stack)
        return stack.start()

    yield start
    for stack in started:
        stack.stop()
    _stacks.pop(request.node.nodeid, None)


@pytest.fixture
def deployment(start_stack: Any, pg_url: str, private_redis: RedisServer) -> Iterator[Stack]:
    """migrate -> gunicorn -> two Celery workers -> beat, on Postgres+pgvector and Redis."""
    stack: Stack = start_stack("deployment", database_url=pg_url, redis_url=private_redis.url)
    yield stack
    stack.stop()  # before Redis stops and the schema is dropped (teardown runs in reverse)

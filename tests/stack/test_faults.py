"""Faults the deployment must ride out (figures under load: ``bench faults``).

- Postgres stopped: every write answers 503 + ``Retry-After`` inside an agent hook's
  timeout, never a hang; the first request after it is back succeeds.
- A Celery worker SIGKILLed mid-extraction (its transaction open, blocked on a lock the
  test holds): the turn is extracted exactly once, by the sweep, after a restart.
"""

from __future__ import annotations

import time
from collections import Counter
from pathlib import Path
from typing import Any

import psycopg
import pytest

from wakemark.services.forwarder.forward import TIMEOUT_S as HOOK_TIMEOUT_S

from .replay import Client, load_session, make_projects, records, wait_caught_up
from .stack import PostgresServer, Stack

pytestmark = [pytest.mark.slow, pytest.mark.postgres, pytest.mark.redis]


def _first_turn(project: Path) -> list[dict[str, Any]]:
    """SessionStart, then the first turn's UserPromptSubmit ... Stop."""
    rows = load_session("shop", project)
    stop = next(i for i, r in enumerate(rows) if r["hook_event_name"] == "Stop")
    return rows[: stop + 1]


def _timed(stack: Stack, method: str, path: str, body: Any, headers: dict[str, str]) -> Any:
    start = time.monotonic()
    status, reply, sent = stack.exchange(method, path, body, headers)
    return status, reply, sent, time.monotonic() - start


def test_postgres_down_answers_503_with_retry_after_inside_the_hook_timeout(
    start_stack: Any, private_postgres: PostgresServer, private_redis: Any, tmp_path: Path
) -> None:
    stack: Stack = start_stack(
        "pgdown", database_url=private_postgres.url, redis_url=private_redis.url
    )
    project = make_projects(tmp_path)["shop"]
    turn = _first_turn(project)
    headers = {"X-Wakemark-Project": str(project), "X-Wakemark-Actor": "dev"}
    status, *_ = _timed(stack, "POST", "/v1/hooks/claude-code", turn[0], headers)
    assert status in (200, 204)

    private_postgres.stop()
    for payload in turn[1:4]:
        status, reply, sent, took = _timed(stack, "POST", "/v1/hooks/claude-code", payload, headers)
        assert status == 503, reply
        assert reply["error"] == "unavailable"
        assert int(sent["Retry-After"]) >= 1
        assert took < HOOK_TIMEOUT_S, f"503 after {took:.2f}s, past the hook's {HOOK_TIMEOUT_S}s"

    private_postgres.start()
    for payload in turn[1:]:  # the client's retries: the same payloads, the same event ids
        for _ in range(5):
            status, reply, sent, took = _timed(
                stack, "POST", "/v1/hooks/claude-code", payload, headers
            )
            assert took < HOOK_TIMEOUT_S
            if status != 503:
                break
            time.sleep(int(sent["Retry-After"]))  # refused for a moment after the outage
        assert status in (200, 204), reply
    client = Client(stack)
    wait_caught_up(client, check=stack.check_alive)
    assert len(records(client)) == 1


def test_a_worker_killed_mid_extraction_leaves_the_turn_to_be_extracted_exactly_once(
    deployment: Stack, pg_url: str, tmp_path: Path
) -> None:
    client = Client(deployment)
    project = make_projects(tmp_path)["shop"]
    worker = deployment.procs["worker-extraction"]
    with psycopg.connect(pg_url, autocommit=True) as locker:
        # Readers pass, but an extraction's write of its records waits: the worker is
        # stopped inside its transaction, after it marked the turn extracted.
        locker.execute("BEGIN")
        locker.execute("LOCK TABLE memory_records IN SHARE MODE")
        for payload in _first_turn(project):
            client.hook(payload, project)
        _wait_for_lock_waiter(pg_url)
        worker.kill()  # SIGKILL to the whole group, mid-transaction
        locker.execute("COMMIT")
    stats = client.get("/v1/stats")  # its transaction died with it: nothing written
    assert stats["memories"] == 0 and stats["pending_extraction"] > 0
    deployment.start_worker("worker-extraction")
    wait_caught_up(client, check=deployment.check_alive)
    recs = records(client)
    assert len(recs) == 1
    sources = Counter(e for r in recs for e in r["source_event_ids"])
    assert sources and max(sources.values()) == 1


def _wait_for_lock_waiter(url: str, timeout: float = 60.0) -> None:
    """Until a session waits on a lock to write ``memory_records``. Polled outside the
    locking transaction: inside one, ``pg_stat_activity`` is a snapshot taken once."""
    deadline = time.monotonic() + timeout
    with psycopg.connect(url, autocommit=True) as conn:
        while time.monotonic() < deadline:
            row = conn.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'"
                " AND query ILIKE '%memory_records%'"
            ).fetchone()
            if row and row[0]:
                return
            time.sleep(0.05)
    raise AssertionError("no extraction reached its write within the timeout")

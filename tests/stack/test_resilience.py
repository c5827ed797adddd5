"""The stack loses a worker (SIGKILL) and its Redis (restart, no persistence) mid-replay:
every closed turn still becomes exactly one record, because the database, not the queue,
remembers pending work."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from .replay import Client, make_projects, records, replay_all, wait_caught_up
from .stack import RedisServer, Stack

pytestmark = [pytest.mark.slow, pytest.mark.postgres, pytest.mark.redis]

KILL_WORKER_AT = 6  # hook indexes into the interleaved replay (30 hooks)
RESTART_REDIS_AT = 12
RESTART_WORKER_AT = 20


def test_worker_kill_and_redis_restart_lose_no_turn_and_duplicate_none(
    deployment: Stack, private_redis: RedisServer, tmp_path: Path
) -> None:
    client = Client(deployment)
    events: list[str] = []

    def chaos(i: int) -> None:
        if i == KILL_WORKER_AT:
            worker = deployment.procs["worker-extraction"]
            worker.kill()  # SIGKILL to the whole group, as `docker kill` does
            assert not worker.alive
            events.append("killed worker")
        elif i == RESTART_REDIS_AT:
            # A turn closed while no extraction worker ran: its job sits in Redis now.
            assert client.get("/v1/stats")["pending_extraction"] > 0
            private_redis.stop()  # --save "": every queued message is gone
            private_redis.start()
            events.append("restarted redis")
        elif i == RESTART_WORKER_AT:
            deployment.start_worker("worker-extraction")  # restart: unless-stopped
            events.append("restarted worker")

    turns = replay_all(client, make_projects(tmp_path), between=chaos)
    assert events == ["killed worker", "restarted redis", "restarted worker"]
    wait_caught_up(client, check=deployment.check_alive)

    recs = records(client)
    assert len(recs) == turns
    sources = Counter(e for r in recs for e in r["source_event_ids"])
    assert sources, "records must name their source events"
    assert max(sources.values()) == 1, "an event fed two records"
    assert len({r["title"] for r in recs}) == turns
    # Still serving after the chaos, with Redis back.
    assert deployment.request("GET", "/health")[1]["jobs"]["queue_depth"] is not None

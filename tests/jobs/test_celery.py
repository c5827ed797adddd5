"""Deployment mode: real `wakemark worker`/`beat` subprocesses, real Redis, real Postgres."""

from __future__ import annotations

import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from redis import Redis

from tests.conftest import free_port
from wakemark.shared.config import Settings
from wakemark.shared.jobs import sweep
from wakemark.shared.jobs.celery_dispatch import CeleryDispatcher, celery_config
from wakemark.shared.jobs.tasks import EXTRACT_BATCH, JOBS

from .conftest import (
    Processes,
    assert_extracted_once,
    caught_up,
    ingest,
    wait_until,
    wakemark_env,
)

# Generous per-test timeout: real workers on a shared 2-core box can be slow, not wrong.
pytestmark = [pytest.mark.slow, pytest.mark.redis, pytest.mark.postgres, pytest.mark.timeout(900)]


@pytest.fixture
def deploy(settings: Settings, pg_url: str, redis_url: str) -> Settings:
    return settings.replace(database_url=pg_url, redis_url=redis_url, sweep_interval_s=1)


def worker(processes: Processes, settings: Settings) -> subprocess.Popen[Any]:
    return processes.start(["worker", "--concurrency", "1"], wakemark_env(settings))


def beat(processes: Processes, settings: Settings) -> subprocess.Popen[Any]:
    schedule = processes.log_dir / f"beat-{len(processes.procs)}.db"
    return processes.start(["beat", "--schedule", str(schedule)], wakemark_env(settings))


def extracted(runtime: Any, turns: list[str]) -> int:
    return sum(bool((t := runtime.storage.get_turn(tid)) and t.extracted) for tid in turns)


def test_config_routes_every_task_and_bounds_publish_time(deploy: Settings):
    config = celery_config(deploy)
    assert config["task_routes"] == {job.name: {"queue": job.queue} for job in JOBS.values()}
    assert len(JOBS) == 5
    assert config["task_acks_late"] and config["task_reject_on_worker_lost"]
    assert config["task_soft_time_limit"] < config["task_time_limit"] == deploy.task_time_limit_s
    assert config["broker_transport_options"]["socket_connect_timeout"] <= 1


def test_sweep_does_not_pile_up_copies_of_queued_work(deploy: Settings, make_runtime):
    runtime = make_runtime(deploy)  # no worker: everything stays queued
    for i in range(EXTRACT_BATCH + 5):  # one request's turn at a time, as the API sends them
        ingest(runtime, 1, start=i)
    assert runtime.jobs.queue_depth("extraction") == EXTRACT_BATCH + 5
    assert sweep(runtime.tasks)["extract"] == EXTRACT_BATCH + 5
    assert runtime.jobs.queue_depth("extraction") == EXTRACT_BATCH + 5
    Redis.from_url(deploy.redis_url).delete("extraction")  # the queue is lost
    sweep(runtime.tasks)
    assert runtime.jobs.queue_depth() == 2  # everything again, in batches


def test_sweep_re_enqueues_lost_work_while_fresh_work_is_queued(deploy: Settings, make_runtime):
    runtime = make_runtime(deploy)  # no worker: what is queued stays queued
    lost = ingest(runtime, 5)
    Redis.from_url(deploy.redis_url).delete("extraction")  # their messages are gone
    fresh = ingest(runtime, 1, start=5)  # steady load: a new turn's message is waiting
    assert runtime.jobs.queued_ids("extraction") == set(fresh)
    sweep(runtime.tasks)
    # The lost turns come back, once; the queued one is not copied.
    assert runtime.jobs.queued_ids("extraction") == set(lost + fresh)
    assert runtime.jobs.queue_depth("extraction") == 2
    sweep(runtime.tasks)
    assert runtime.jobs.queue_depth("extraction") == 2


def test_worker_extracts_and_embeds(
    deploy: Settings, onnx_model_path: Path, processes: Processes, make_runtime
):
    deploy = deploy.replace(embedder="onnx", model_path=onnx_model_path)
    runtime = make_runtime(deploy)
    assert isinstance(runtime.jobs, CeleryDispatcher)
    worker(processes, deploy)
    beat(processes, deploy)
    turns = ingest(runtime, 10)
    wait_until(lambda: caught_up(runtime), timeout=120, what=f"worker:\n{processes.logs()}")
    assert_extracted_once(runtime, turns)
    assert runtime.storage.stats()["embedded"] == 10
    # Beat ticks queued while the single worker process was busy drain right after.
    wait_until(lambda: runtime.jobs.queue_depth() == 0, timeout=30, what="queues to drain")


def test_sigkill_mid_extraction_then_restart_extracts_each_turn_once(
    deploy: Settings, onnx_model_path: Path, processes: Processes, make_runtime
):
    # The slow path is real: each extraction embeds its record inline.
    deploy = deploy.replace(embedder="onnx", model_path=onnx_model_path)
    runtime = make_runtime(deploy)
    turns = ingest(runtime, 150)
    first = worker(processes, deploy)
    beat(processes, deploy)  # as deployed: the sweep re-enqueues whatever a queue lost
    wait_until(lambda: extracted(runtime, turns) >= 5, timeout=120, what="first extractions")
    processes.kill(first)
    done = extracted(runtime, turns)
    assert 0 < done < len(turns), "the worker must die mid-batch for this test to mean much"
    worker(processes, deploy)  # its start-up sweep re-enqueues what the queue lost
    wait_until(lambda: caught_up(runtime), timeout=600, what=f"restart:\n{processes.logs()}")
    assert_extracted_once(runtime, turns)


@pytest.fixture
def own_redis(tmp_path: Path) -> Iterator[Any]:
    """A private redis-server on a free port the test may stop and restart (never 6379)."""
    port = free_port()
    cmd = ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", ""]
    cmd += ["--appendonly", "no", "--dir", str(tmp_path)]

    class Server:
        url = f"redis://127.0.0.1:{port}/0"
        proc: subprocess.Popen[bytes] | None = None

        def start(self) -> None:
            self.proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL)
            wait_until(self._up, timeout=20, what="redis-server")

        def stop(self) -> None:
            if self.proc is not None:
                self.proc.terminate()
                self.proc.wait(timeout=20)
                self.proc = None

        def _up(self) -> bool:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                return True
            except OSError:
                return False

    server = Server()
    server.start()
    yield server
    server.stop()


def test_redis_down_ingest_succeeds_and_work_completes_when_it_returns(
    settings: Settings, pg_url: str, own_redis: Any, processes: Processes, make_runtime
):
    deploy = settings.replace(database_url=pg_url, redis_url=own_redis.url, sweep_interval_s=1)
    runtime = make_runtime(deploy)
    worker(processes, deploy)
    beat(processes, deploy)
    before = ingest(runtime, 3)
    wait_until(lambda: caught_up(runtime), timeout=60, what=f"worker:\n{processes.logs()}")

    own_redis.stop()
    during = ingest(runtime, 5)  # the enqueue fails and logs; the rows are committed
    assert runtime.jobs.queue_depth() is None
    assert runtime.storage.stats()["pending_extraction"] == 10

    own_redis.start()  # empty: every message published before is gone
    wait_until(lambda: caught_up(runtime), timeout=120, what=f"recovery:\n{processes.logs()}")
    assert_extracted_once(runtime, before + during)

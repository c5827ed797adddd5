"""The Celery worker and beat: ``create_celery(settings)`` builds the app and its tasks.

Tasks are thin: they take ids and call the shared task functions with this process's
``Runtime``. Queues, routes and broker options come from ``wakemark.shared.jobs.names`` so the
API's publisher and the workers share one definition.
"""

from __future__ import annotations

import logging
import os
import threading
from contextlib import suppress
from typing import Any

from celery import Celery
from celery.signals import worker_ready

from wakemark.shared import jobs, retention
from wakemark.shared.config import Settings
from wakemark.shared.jobs.names import (
    TASK_BACKFILL,
    TASK_EMBED,
    TASK_EXTRACT,
    TASK_RETENTION,
    TASK_SWEEP,
    celery_config,
)
from wakemark.shared.runtime import Runtime
from wakemark.shared.storage.base import TransientStorageError

log = logging.getLogger("wakemark.worker")

BACKFILL_LOCK = "wakemark:backfill:lock"


def _retryable() -> tuple[type[BaseException], ...]:
    """Transient failures worth an automatic retry; everything else fails the task."""
    from kombu.exceptions import OperationalError
    from redis.exceptions import ConnectionError as RedisConnectionError
    from redis.exceptions import TimeoutError as RedisTimeoutError

    return (TransientStorageError, OperationalError, RedisConnectionError, RedisTimeoutError)


class _ProcessRuntime:
    """One Runtime per worker process, built on first use (after the prefork fork)."""

    def __init__(self, settings: Settings) -> None:
        self._settings = settings
        self._lock = threading.Lock()
        self._runtime: Runtime | None = None
        self._pid = 0

    def get(self) -> Runtime:
        with self._lock:
            if self._runtime is None or self._pid != os.getpid():
                self._runtime, self._pid = Runtime.build(self._settings), os.getpid()
            return self._runtime


def create_celery(settings: Settings) -> Celery:
    app = Celery("wakemark", set_as_current=False)
    app.conf.update(celery_config(settings))
    every = float(settings.sweep_interval_s)
    app.conf.beat_schedule = {
        "sweep": {"task": TASK_SWEEP, "schedule": every},
        "backfill": {"task": TASK_BACKFILL, "schedule": every},
        "retention": {"task": TASK_RETENTION, "schedule": max(every, retention.RUN_INTERVAL_S)},
    }
    runtime = _ProcessRuntime(settings)
    retry: dict[str, Any] = {
        "autoretry_for": _retryable(),
        "retry_backoff": True,
        "retry_backoff_max": 300,
        "retry_jitter": True,
        "max_retries": 5,
    }

    @app.task(name=TASK_EXTRACT, **retry)
    def extract_turns(turn_ids: list[str]) -> int:
        return len(jobs.extract_turns(runtime.get(), turn_ids))

    @app.task(name=TASK_EMBED, **retry)
    def embed_records(record_ids: list[str]) -> int:
        return jobs.embed_records(runtime.get(), record_ids)

    @app.task(name=TASK_BACKFILL, **retry)
    def backfill_embeddings(namespace: str | None = None) -> dict[str, Any]:
        # One backfill at a time across all workers: beat fires every interval, and two
        # runs would embed the same oldest records twice.
        from redis import Redis

        client = Redis.from_url(settings.redis_url or "", socket_connect_timeout=2)
        lock = client.lock(BACKFILL_LOCK, timeout=settings.task_time_limit_s)
        if not lock.acquire(blocking=False):
            client.close()
            return {"skipped": "another backfill is running"}
        try:
            # Stop between batches well inside the time limit; the next tick continues.
            budget = settings.task_time_limit_s * 0.5
            return jobs.backfill_embeddings(runtime.get(), namespace=namespace, max_seconds=budget)
        finally:
            with suppress(Exception):
                lock.release()
            client.close()

    @app.task(name=TASK_RETENTION, **retry)
    def trim_events() -> dict[str, int] | None:
        return retention.run(runtime.get(), every_s=0)

    @app.task(name=TASK_SWEEP, **retry)
    def sweep() -> dict[str, int]:
        # Records missing a vector are the scheduled backfill's job here, not the sweep's.
        return jobs.sweep(runtime.get(), embeddings=False)

    @worker_ready.connect(weak=False)
    def _sweep_at_start(sender: Any = None, **_: Any) -> None:
        # A restarted worker catches up on whatever died with its predecessor.
        owner: Any = getattr(sender, "app", None)
        if owner is app:
            owner.send_task(TASK_SWEEP)
            owner.send_task(TASK_BACKFILL)

    return app

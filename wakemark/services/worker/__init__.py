"""The Celery worker and beat: ``create_celery(settings)`` builds the app and its tasks.

Every job in ``wakemark.shared.jobs.JOBS`` becomes one task of the same name, run with
this process's ``Runtime``; its queue, retry policy and schedule come from the same
declaration, and the broker options from ``celery_config``, which the API's publisher
uses too.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from contextlib import suppress
from typing import Any

from celery import Celery
from celery.signals import worker_process_init, worker_ready

from wakemark.shared.config import Settings
from wakemark.shared.jobs import JOBS, Job
from wakemark.shared.jobs.celery_dispatch import celery_config
from wakemark.shared.runtime import Runtime
from wakemark.shared.storage import TransientStorageError

log = logging.getLogger("wakemark.worker")

LOCK_PREFIX = "wakemark:lock:"  # + job name: the lock of an ``exclusive`` job


def _retryable() -> tuple[type[BaseException], ...]:
    """Transient failures worth an automatic retry; everything else fails the task."""
    from kombu.exceptions import OperationalError
    from redis.exceptions import ConnectionError as RedisConnectionError
    from redis.exceptions import TimeoutError as RedisTimeoutError

    return (TransientStorageError, OperationalError, RedisConnectionError, RedisTimeoutError)


def create_celery(settings: Settings) -> Celery:
    app = Celery("wakemark", set_as_current=False)
    app.conf.update(celery_config(settings))
    every = float(settings.sweep_interval_s)
    periodic = [job for job in JOBS.values() if job.periodic is not None]
    app.conf.beat_schedule = {
        job.name: {
            "task": job.name,
            "schedule": max(every, job.every_s or every),
            "kwargs": dict(job.periodic or {}),
        }
        for job in periodic
    }
    # Built lazily, so a prefork parent opens nothing; each child resets what it
    # inherited in ``worker_process_init``.
    runtime = Runtime.build(settings)
    for job in JOBS.values():
        app.task(
            name=job.name,
            autoretry_for=_retryable(),
            retry_backoff=True,
            retry_backoff_max=job.retry.backoff_max_s,
            retry_jitter=True,
            max_retries=job.retry.max_retries,
        )(_task(job, runtime, settings))

    @worker_process_init.connect(weak=False)
    def _after_fork(**_: Any) -> None:
        runtime.after_fork()

    @worker_ready.connect(weak=False)
    def _catch_up_at_start(sender: Any = None, **_: Any) -> None:
        # A restarted worker catches up on whatever died with its predecessor.
        owner: Any = getattr(sender, "app", None)
        if owner is app:
            for job in periodic:
                owner.send_task(job.name, kwargs=dict(job.periodic or {}))

    return app


def _task(job: Job, runtime: Runtime, settings: Settings) -> Callable[..., Any]:
    def run(*args: Any, **kwargs: Any) -> Any:
        if not job.exclusive:
            return job.run(runtime.tasks, *args, **kwargs)
        from redis import Redis

        client = Redis.from_url(settings.redis_url or "", socket_connect_timeout=2)
        lock = client.lock(LOCK_PREFIX + job.name, timeout=settings.task_time_limit_s)
        if not lock.acquire(blocking=False):
            client.close()
            return {"skipped": f"another {job.name} is running"}
        try:
            return job.run(runtime.tasks, *args, **kwargs)
        finally:
            with suppress(Exception):
                lock.release()
            client.close()

    run.__name__ = run.__qualname__ = job.name.rsplit(".", 1)[-1]
    return run

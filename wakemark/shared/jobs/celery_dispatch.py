"""The deployment dispatcher: publishes task ids to Celery queues over Redis.

Publishing is best effort by design: jobs are only sent after the rows they need are
committed, so if Redis is down we log and return (ingest still succeeds) and the next
sweep re-enqueues everything the database still lists as pending.

``celery_config`` is the one Celery configuration: the API's publisher and the worker
(``services/worker``) both build their app from it, so routing can never disagree.
"""

from __future__ import annotations

import base64
import json
import logging
import threading
from collections.abc import Iterable
from contextlib import AbstractContextManager, nullcontext
from typing import TYPE_CHECKING, Any

from wakemark.shared.config import Settings
from wakemark.shared.jobs.job import QUEUE_EXTRACTION, QUEUES, Job
from wakemark.shared.jobs.tasks import JOBS

if TYPE_CHECKING:
    from celery import Celery
    from redis import Redis

log = logging.getLogger("wakemark.jobs")


def task_routes() -> dict[str, dict[str, str]]:
    return {job.name: {"queue": job.queue} for job in JOBS.values()}


def celery_config(settings: Settings) -> dict[str, Any]:
    limit = settings.task_time_limit_s
    return {
        "broker_url": settings.redis_url,
        "task_serializer": "json",
        "accept_content": ["json"],
        "result_serializer": "json",
        "task_ignore_result": True,  # the database is the result
        "task_routes": task_routes(),
        "task_default_queue": QUEUE_EXTRACTION,
        # Every task is idempotent (re-reads, conditional writes), so redelivery is safe.
        "task_acks_late": True,
        "task_reject_on_worker_lost": True,
        "task_time_limit": limit,
        "task_soft_time_limit": max(1, int(limit * 0.8)),
        "worker_prefetch_multiplier": 1,
        "worker_hijack_root_logger": False,
        "broker_connection_retry_on_startup": True,
        "broker_connection_timeout": 2,
        "broker_transport_options": {
            # A dead broker must cost the API about a second, not a hang.
            "socket_connect_timeout": 1,
            "socket_timeout": 5,
            "max_retries": 1,
            # Unacked messages of a killed worker come back after this; keep it above the
            # longest task so a slow task is not delivered twice while it still runs.
            "visibility_timeout": 2 * limit + 60,
        },
        "task_publish_retry": True,
        "task_publish_retry_policy": {
            "max_retries": 1,
            "interval_start": 0,
            "interval_step": 0.2,
            "interval_max": 0.2,
        },
    }


class CeleryDispatcher:
    mode = "celery"

    def __init__(self, settings: Settings) -> None:
        self._settings = settings
        self._lock = threading.Lock()
        self._app: Celery | None = None
        self._redis: Redis | None = None

    def _celery(self) -> Celery:
        with self._lock:
            if self._app is None:
                from celery import Celery

                app = Celery("wakemark", set_as_current=False)
                app.conf.update(celery_config(self._settings))
                self._app = app
            return self._app

    def _send(self, job: Job, args: list[Any]) -> bool:
        """Publish one message (routed by ``celery_config``); False if that failed."""
        try:
            self._celery().send_task(job.name, args=args)
            return True
        except Exception as exc:  # broker down: the database still lists the work
            log.warning("could not enqueue %s (%s); the sweep will retry", job.name, exc)
            return False

    def start(self) -> None:
        """Nothing to start in the API process; beat and workers run elsewhere."""

    def enqueue(self, job: Job, ids: Iterable[str]) -> None:
        if job.embeds and self._settings.embedder == "off":
            return
        items = list(ids)
        for i in range(0, len(items), job.batch):
            if not self._send(job, [items[i : i + job.batch]]):
                return  # broker down: don't pay the timeout once per batch

    def serving(self) -> AbstractContextManager[None]:
        """Workers are other processes: requests and jobs never share a GIL here."""
        return nullcontext()

    def _client(self) -> Redis:
        with self._lock:
            if self._redis is None:
                from redis import Redis

                self._redis = Redis.from_url(
                    self._settings.redis_url or "", socket_connect_timeout=1, socket_timeout=1
                )
            return self._redis

    def queue_depth(self, queue: str | None = None) -> int | None:
        """Messages waiting in one queue or all three; None if Redis cannot be reached."""
        try:
            pipe = self._client().pipeline()
            for name in (queue,) if queue else QUEUES:
                pipe.llen(name)
            return int(sum(pipe.execute()))
        except Exception as exc:
            log.debug("queue depth unavailable: %s", exc)
            return None

    def queued_ids(self, queue: str) -> set[str] | None:
        """The ids the messages waiting in ``queue`` carry; None if Redis cannot be read.

        Reads kombu's Redis list as Celery's task protocol 2 writes it with the JSON
        serializer (``celery_config``): each item a JSON envelope whose base64 ``body``
        is ``[args, kwargs, embed]``, ``args`` being ``[ids]`` for a job that takes ids.
        Messages a worker has taken but not acknowledged are not in the list.
        """
        try:
            raw = self._client().lrange(queue, 0, -1)
        except Exception as exc:
            log.debug("queued ids unavailable: %s", exc)
            return None
        ids: set[str] = set()
        for item in raw:
            try:
                args = json.loads(base64.b64decode(json.loads(item)["body"]))[0]
            except (ValueError, KeyError, IndexError, TypeError):
                continue  # not a message of ours
            if args and isinstance(args[0], list):
                ids.update(str(i) for i in args[0])
        return ids

    def wait_idle(self, timeout: float | None = None) -> bool:
        """Workers run elsewhere; a caller polls the database (``stats``) instead."""
        return False

    def after_fork(self) -> None:
        # A connection pool inherited across fork would share sockets with the parent:
        # drop both clients unclosed (closing would close the parent's sockets too).
        self._lock = threading.Lock()
        self._app = self._redis = None

    def close(self) -> None:
        with self._lock:
            app, client = self._app, self._redis
            self._app = self._redis = None
        if client is not None:
            client.close()
        if app is not None:
            app.close()

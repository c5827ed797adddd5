"""The deployment dispatcher: publishes task ids to Celery queues over Redis.

Publishing is best effort by design: jobs are only sent after the rows they need are
committed, so if Redis is down we log and return (ingest still succeeds) and the next
sweep re-enqueues everything the database still lists as pending.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Iterable
from contextlib import AbstractContextManager, nullcontext
from typing import TYPE_CHECKING, Any

from wakemark.shared.jobs import tasks
from wakemark.shared.jobs.names import (
    EMBED_BATCH,
    EXTRACT_BATCH,
    QUEUES,
    TASK_BACKFILL,
    TASK_EMBED,
    TASK_EXTRACT,
    TASK_SWEEP,
    celery_config,
)

if TYPE_CHECKING:
    from celery import Celery
    from redis import Redis

    from wakemark.shared.runtime import Runtime

log = logging.getLogger("wakemark.jobs")


class CeleryDispatcher:
    mode = "celery"

    def __init__(self, runtime: Runtime) -> None:
        self._runtime = runtime
        self._settings = runtime.settings
        self._lock = threading.Lock()
        self._app: Celery | None = None
        self._redis: Redis | None = None
        self._pid = os.getpid()

    def _celery(self) -> Celery:
        with self._lock:
            self._after_fork_check()
            if self._app is None:
                from celery import Celery

                app = Celery("wakemark", set_as_current=False)
                app.conf.update(celery_config(self._settings))
                self._app = app
            return self._app

    def _after_fork_check(self) -> None:
        # A connection pool inherited across fork would share sockets with the parent.
        if self._pid != os.getpid():
            self._pid, self._app, self._redis = os.getpid(), None, None

    def send(self, task: str, args: list[Any] | None = None, **kwargs: Any) -> bool:
        """Publish one task by name (routing comes from TASK_ROUTES); False if it failed."""
        try:
            self._celery().send_task(task, args=args or [], kwargs=kwargs or None)
            return True
        except Exception as exc:  # broker down: the database still lists the work
            log.warning("could not enqueue %s (%s); the sweep will retry", task, exc)
            return False

    def start(self) -> None:
        """Nothing to start in the API process; beat and workers run elsewhere."""

    def enqueue_extract(self, turn_ids: Iterable[str]) -> None:
        ids = list(turn_ids)
        for i in range(0, len(ids), EXTRACT_BATCH):
            if not self.send(TASK_EXTRACT, [ids[i : i + EXTRACT_BATCH]]):
                return  # broker down: don't pay the timeout once per batch

    def enqueue_embed(self, record_ids: Iterable[str]) -> None:
        if self._settings.embedder == "off":
            return
        ids = list(record_ids)
        for i in range(0, len(ids), EMBED_BATCH):
            if not self.send(TASK_EMBED, [ids[i : i + EMBED_BATCH]]):
                return

    def serving(self) -> AbstractContextManager[None]:
        """Workers are other processes: requests and jobs never share a GIL here."""
        return nullcontext()

    def enqueue_sweep(self) -> bool:
        return self.send(TASK_SWEEP)

    def enqueue_backfill(self, namespace: str | None = None) -> bool:
        return self.send(TASK_BACKFILL, [], namespace=namespace)

    def queue_depth(self, queue: str | None = None) -> int | None:
        """Messages waiting in one queue or all three; None if Redis cannot be reached."""
        try:
            with self._lock:
                self._after_fork_check()
                if self._redis is None:
                    from redis import Redis

                    self._redis = Redis.from_url(
                        self._settings.redis_url or "",
                        socket_connect_timeout=1,
                        socket_timeout=1,
                    )
                client = self._redis
            pipe = client.pipeline()
            for name in (queue,) if queue else QUEUES:
                pipe.llen(name)
            return int(sum(pipe.execute()))
        except Exception as exc:
            log.debug("queue depth unavailable: %s", exc)
            return None

    def state(self) -> dict[str, Any]:
        return {
            "mode": self.mode,
            "queue_depth": self.queue_depth(),
            "backfill": tasks.backfill_breaker(self._runtime).snapshot(),
        }

    def wait_idle(self, timeout: float | None = None) -> bool:
        """Workers run elsewhere; a caller polls the database (``stats``) instead."""
        return False

    def close(self) -> None:
        with self._lock:
            app, client = self._app, self._redis
            self._app = self._redis = None
        if client is not None:
            client.close()
        if app is not None:
            app.close()

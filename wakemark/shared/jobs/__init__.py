"""Background jobs: their declarations (``tasks.JOBS``), and the dispatchers that run them.

``open_dispatcher`` picks the shape from settings: Celery over Redis when
``WAKEMARK_REDIS_URL`` is set, else a small in-process executor. Callers only use the
``Dispatcher`` surface, and only after their transaction committed (``Tx.on_commit``).
"""

from __future__ import annotations

from collections.abc import Iterable
from contextlib import AbstractContextManager
from typing import Protocol

from wakemark.shared.jobs.job import Context, Job
from wakemark.shared.jobs.tasks import (
    BACKFILL,
    EMBED,
    EXTRACT,
    JOBS,
    SWEEP,
    backfill_embeddings,
    embed_records,
    extract_turns,
    rebuild_embeddings,
    sweep,
)


class Dispatcher(Protocol):
    mode: str  # "inprocess" | "celery"

    def start(self) -> None: ...

    def enqueue(self, job: Job, ids: Iterable[str]) -> None:
        """Queue ``ids`` for ``job`` in batches of ``job.batch``; never fails the caller
        for an unreachable queue (the database still lists the work)."""

    # Wraps each API request; in-process jobs wait while requests are in flight.
    def serving(self) -> AbstractContextManager[None]: ...

    def queue_depth(self, queue: str | None = None) -> int | None: ...

    def queued_ids(self, queue: str) -> set[str] | None:
        """Ids that jobs waiting in ``queue`` carry; None when the queue cannot be read."""

    def wait_idle(self, timeout: float | None = None) -> bool: ...

    def after_fork(self) -> None:
        """In a forked child: forget threads, locks and connections of the parent."""

    def close(self) -> None: ...


def open_dispatcher(context: Context) -> Dispatcher:
    if context.settings.redis_url:
        from wakemark.shared.jobs.celery_dispatch import CeleryDispatcher

        return CeleryDispatcher(context.settings)
    from wakemark.shared.jobs.inprocess import InProcessDispatcher

    return InProcessDispatcher(context)


__all__ = [
    "BACKFILL",
    "EMBED",
    "EXTRACT",
    "JOBS",
    "SWEEP",
    "Context",
    "Dispatcher",
    "Job",
    "backfill_embeddings",
    "rebuild_embeddings",
    "embed_records",
    "extract_turns",
    "open_dispatcher",
    "sweep",
]

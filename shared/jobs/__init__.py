"""Background jobs: the task functions and the dispatcher that runs them.

``open_dispatcher`` picks the shape from settings: Celery over Redis when
``WAKEMARK_REDIS_URL`` is set, else a small in-process executor. Callers only use the
``Dispatcher`` surface, and only after their transaction committed.
"""

from __future__ import annotations

from collections.abc import Iterable
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any, Protocol

from wakemark.shared.jobs.tasks import (
    backfill_breaker,
    backfill_embeddings,
    embed_records,
    extract_turns,
    sweep,
)

if TYPE_CHECKING:
    from wakemark.shared.runtime import Runtime


class Dispatcher(Protocol):
    mode: str  # "inprocess" | "celery"

    def start(self) -> None: ...

    def enqueue_extract(self, turn_ids: Iterable[str]) -> None: ...

    def enqueue_embed(self, record_ids: Iterable[str]) -> None: ...

    # Wraps each API request; in-process jobs wait while requests are in flight.
    def serving(self) -> AbstractContextManager[None]: ...

    def queue_depth(self, queue: str | None = None) -> int | None: ...

    def state(self) -> dict[str, Any]: ...

    def wait_idle(self, timeout: float | None = None) -> bool: ...

    def close(self) -> None: ...


def open_dispatcher(runtime: Runtime) -> Dispatcher:
    if runtime.settings.redis_url:
        from wakemark.shared.jobs.celery_dispatch import CeleryDispatcher

        return CeleryDispatcher(runtime)
    from wakemark.shared.jobs.inprocess import InProcessDispatcher

    return InProcessDispatcher(runtime)


__all__ = [
    "Dispatcher",
    "backfill_breaker",
    "backfill_embeddings",
    "embed_records",
    "extract_turns",
    "open_dispatcher",
    "sweep",
]

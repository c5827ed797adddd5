"""What a job is: ``Job`` declares one (its name, queue, batch size, function, retry
policy), and ``Context`` is what its function is given to work with.

The declarations themselves live beside their functions (``tasks.JOBS``); both
dispatchers, the Celery worker's task registration and its beat schedule read them.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from wakemark.shared.storage import (
    Events,
    Records,
    RetrievalLog,
    Transactions,
    Upkeep,
    Vectors,
)

if TYPE_CHECKING:
    from wakemark.shared.config import Settings
    from wakemark.shared.embedding import Embedder
    from wakemark.shared.jobs.breaker import Breaker

QUEUE_EXTRACTION = "extraction"
QUEUE_EMBEDDING = "embedding"
QUEUE_BACKFILL = "backfill"
QUEUES = (QUEUE_EXTRACTION, QUEUE_EMBEDDING, QUEUE_BACKFILL)


@dataclass(frozen=True)
class Retry:
    """Celery's automatic retry of a task that failed on a transient error (storage or
    broker unreachable); any other error fails the task, and its work stays pending."""

    max_retries: int = 5
    backoff_max_s: int = 300


@dataclass(frozen=True, eq=False)  # each Job is one declaration: compared by identity
class Job:
    name: str  # the Celery task name; also how logs name the job
    queue: str
    run: Callable[..., Any]  # run(context, *args, **kwargs); idempotent
    # Ids per job when enqueued with ids (``Dispatcher.enqueue``); 0: takes no ids.
    batch: int = 0
    # Skipped at enqueue when the embedder is off: there is nothing it could do.
    embeds: bool = False
    # Scheduled every sweep interval (Celery beat) with these kwargs; None: on demand only.
    periodic: Mapping[str, Any] | None = None
    # A periodic job run less often than every sweep interval, in seconds.
    every_s: float | None = None
    # At most one run at a time across all workers (a Redis lock in the worker).
    exclusive: bool = False
    retry: Retry = field(default_factory=Retry)


Enqueue = Callable[[Job, Sequence[str]], None]


class JobStorage(Events, Records, Vectors, Upkeep, RetrievalLog, Transactions, Protocol):
    """Turns to extract, records and their vectors to write, the pending counts; and what
    the retention job hands to ``retention``."""


@dataclass(frozen=True)
class Context:
    """A job's collaborators, wired by the composition root (``shared/runtime.py``)."""

    settings: Settings
    storage: JobStorage
    embedder: Embedder
    enqueue: Enqueue  # after commit only: the rows a job needs must exist
    queued_ids: Callable[[str], set[str] | None]  # ids waiting in a queue; None: unknown
    breaker: Breaker  # the backfill's: one per process, so a cool-down outlasts a run

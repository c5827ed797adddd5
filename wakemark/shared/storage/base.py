"""``Storage``: the composition of the concern ports (``ports/``), and ``Tx``, the
composition of their transaction parts.

Both backends (``sqlite/`` and ``postgres/``) pass one conformance suite
(``tests/storage/test_*.py``, a file per concern). Callers see the package's types
(``wakemark.shared.storage``) and are typed with the ports they use; what a consumer
that writes needs as well is ``Transactions``.
"""

from __future__ import annotations

import abc
import logging
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from typing import Protocol

import numpy as np

from wakemark.shared.models import Event, MemoryRecord
from wakemark.shared.storage.ports.anchors import Anchors, AnchorsTx
from wakemark.shared.storage.ports.audit import Audit, AuditTx
from wakemark.shared.storage.ports.events import Events, EventsTx, PutEventResult
from wakemark.shared.storage.ports.records import Records, RecordsTx
from wakemark.shared.storage.ports.search import Search
from wakemark.shared.storage.ports.upkeep import Upkeep
from wakemark.shared.storage.ports.vectors import Vectors, VectorsTx

log = logging.getLogger(__name__)


class Tx(EventsTx, RecordsTx, VectorsTx, AuditTx, AnchorsTx):
    """A write transaction: all of its calls commit together or none do."""

    def __init__(self) -> None:
        self._after_commit: list[Callable[[], None]] = []

    def on_commit(self, fn: Callable[[], None]) -> None:
        """Call ``fn`` once the transaction has committed (never if it rolls back): the
        place to enqueue work on rows it wrote, which then exist for the job."""
        self._after_commit.append(fn)

    def committed(self) -> None:
        """Run the on-commit calls; the backend's ``transaction()`` calls this after COMMIT.
        One that fails is logged, not raised: the write stands, and what a lost enqueue
        leaves undone is pending in the database for the next sweep."""
        calls, self._after_commit = self._after_commit, []
        for fn in calls:
            try:
                fn()
            except Exception:
                log.exception("on-commit call %r failed", fn)


class Transactions(Protocol):
    """Writes of several concerns that commit together."""

    def transaction(self) -> AbstractContextManager[Tx]: ...


class Storage(Events, Records, Vectors, Search, Audit, Upkeep, Anchors):
    backend: str  # "sqlite" | "postgres"
    vector_index = False

    @abc.abstractmethod
    @contextmanager
    def transaction(self) -> Iterator[Tx]: ...

    # A single write is a transaction of its own.
    def put_events(self, events: Sequence[Event]) -> list[PutEventResult]:
        if not events:
            return []
        with self.transaction() as tx:
            return tx.put_events(events)

    def put_memory_record(self, record: MemoryRecord) -> None:
        with self.transaction() as tx:
            tx.put_memory_record(record)

    def put_embedding(self, record_id: str, vector: np.ndarray) -> None:
        with self.transaction() as tx:
            tx.put_embedding(record_id, vector)

    def delete_memory_records(self, record_ids: Sequence[str]) -> list[str]:
        with self.transaction() as tx:
            return tx.delete_memory_records(record_ids)

    @abc.abstractmethod
    def ping(self) -> None:
        """Raise if the database cannot be reached."""

    @abc.abstractmethod
    def close(self) -> None:
        """Idempotent."""

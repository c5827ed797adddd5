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
from wakemark.shared.storage.errors import NotFoundError
from wakemark.shared.storage.ports.anchors import Anchors, AnchorsTx
from wakemark.shared.storage.ports.audit import Audit, AuditTx
from wakemark.shared.storage.ports.events import Events, EventsTx, PutEventResult
from wakemark.shared.storage.ports.history import History, HistoryTx, Version
from wakemark.shared.storage.ports.records import Records, RecordsTx
from wakemark.shared.storage.ports.search import Search
from wakemark.shared.storage.ports.upkeep import Upkeep
from wakemark.shared.storage.ports.vectors import Vectors, VectorsTx

log = logging.getLogger(__name__)


class Tx(EventsTx, RecordsTx, VectorsTx, AuditTx, AnchorsTx, HistoryTx):
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


class Storage(Events, Records, Vectors, Search, Audit, Upkeep, Anchors, History):
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

    def split_version(self, record_id: str) -> MemoryRecord:
        """Undo a wrong merge: the version ``record_id`` is a current record again
        (without an embedding: the embed job redoes it), with the older versions it
        had replaced as its own history; the rest of the chain stays where it was.
        Raises NotFoundError when ``record_id`` is not a version."""
        with self.transaction() as tx:
            version = tx.take_version(record_id)
            if version is None:
                raise NotFoundError(f"no superseded version {record_id}")
            chain = self.get_history(version.current_id)
            tx.put_memory_record(version.record)
            if version.anchors is not None:
                tx.put_anchors(version.anchors)
            tx.move_versions(_replaced_by(record_id, chain), record_id)
        return version.record

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


def _replaced_by(record_id: str, chain: Sequence[Version]) -> list[str]:
    """The versions of ``chain`` that ``record_id`` replaced, directly or through others."""
    found: list[str] = []
    heads = {record_id}
    for version in chain:  # newest first: a successor comes before what it replaced
        if version.superseded_by in heads and version.record.record_id != record_id:
            found.append(version.record.record_id)
            heads.add(version.record.record_id)
    return found

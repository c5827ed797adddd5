"""The storage interface every backend implements, with its contracts.

Both backends (``sqlite/`` and ``postgres/``) pass one conformance suite
(``tests/storage/test_conformance.py``). Callers only ever see this module's types.

Namespaces: every ``namespace`` argument of a read method may be a full namespace
(``/actor/a/project/p/``) or an actor prefix (``/actor/a/``). Matching is an escaped
``LIKE prefix%`` (``%``, ``_`` and ``\\`` escaped) and the argument must end in ``/``,
so ``/actor/a/project/ab/`` never matches ``/actor/a/project/abc/``.

Turns: ``put_events`` assigns each event to a turn of its session. A ``prompt`` closes
the session's open turn and opens a new one; ``tool_use`` joins the open turn (opening
one if there is none); ``session_summary`` joins the open turn and closes it; a ``note``
is a turn of its own, closed at once. A batch assigns turns exactly as its events
stored one at a time would (the rules live once, in ``wakemark.shared.storage.turns``). A turn is
pending extraction until ``mark_turn_extracted`` commits together with its records.
"""

from __future__ import annotations

import abc
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import numpy as np

from wakemark.shared.models import Event, MemoryRecord, StoredEvent


class StorageError(Exception):
    """Base class of storage errors."""


class DuplicateRecordError(StorageError):
    """``put_memory_record`` was given a ``record_id`` that already exists."""


class NotFoundError(StorageError):
    """The named row does not exist."""


class EmbeddingDecodeError(StorageError):
    """A stored embedding has the wrong size; the message names the record."""


class MigrationDriftError(StorageError):
    """A migration recorded in ``_migrations`` differs from the one in the code."""


class TransientStorageError(StorageError):
    """A connection-level failure worth retrying (database down, restarting)."""


@dataclass(frozen=True)
class PutEventResult:
    event_id: str
    stored: bool
    turn_id: str | None
    closed_turns: tuple[str, ...] = ()  # turns this event closed: extraction may start


@dataclass(frozen=True)
class LexicalHit:
    record: MemoryRecord
    rank: int  # 0-based position in the lexical ranking


@dataclass(frozen=True)
class EmbeddingMatrix:
    """Embedded records as columns: row ``i`` of every column is one record.

    Built without a Python object per vector, so a 50k-record namespace loads as one
    array. ``total`` and ``watermark`` come from the same snapshot as the rows.
    """

    record_ids: list[str]
    created_at: np.ndarray  # (n,) float64 seconds since the Unix epoch
    observation_types: list[str]
    vectors: np.ndarray  # (n, 384) float32, C-contiguous; the caller owns it (writable)
    total: int  # every embedded record under the namespace, even when this is a delta
    watermark: int  # opaque; pass as ``since`` to list only what changed after this

    def __len__(self) -> int:
        return len(self.record_ids)


@dataclass(frozen=True)
class Turn:
    turn_id: str
    namespace: str
    session_id: str
    closed: bool
    extracted: bool
    events: list[StoredEvent] = field(default_factory=list)  # in valid_time order


@dataclass(frozen=True)
class TurnInfo:
    """A turn without its events: what became of it (``record_ids`` empty once extracted
    means extraction kept nothing of it)."""

    turn_id: str
    opened_at: datetime
    closed: bool
    extracted: bool
    record_ids: list[str]


@dataclass(frozen=True)
class MemoryFilter:
    """Records under ``namespace`` (a full namespace or a prefix); each set field narrows."""

    namespace: str
    observation_type: str | None = None
    before: datetime | None = None  # created_at < before
    after: datetime | None = None  # created_at >= after
    session_id: str | None = None  # a source event of the record is of this session


@dataclass(frozen=True)
class Page:
    items: list[Any]
    total: int | None  # None: not counted (``list_memory_records(count=False)``)
    limit: int
    offset: int


class Tx(abc.ABC):
    """A write transaction: all of its calls commit together or none do."""

    @abc.abstractmethod
    def put_memory_record(self, record: MemoryRecord) -> None: ...

    @abc.abstractmethod
    def put_embedding(self, record_id: str, vector: np.ndarray) -> None: ...

    @abc.abstractmethod
    def delete_memory_records(self, record_ids: Sequence[str]) -> list[str]:
        """Cascade delete; returns the ids that existed (each namespace's epoch bumps)."""

    @abc.abstractmethod
    def mark_turn_extracted(self, turn_id: str, record_ids: Sequence[str]) -> bool:
        """Mark the turn extracted; False (and nothing changes) if it already was."""

    @abc.abstractmethod
    def delete_events(self, event_ids: Sequence[str]) -> int:
        """Delete the events that exist among ``event_ids``; returns how many. Their turns
        stay (with the ids of the records made from them)."""


class Storage(abc.ABC):
    backend: str  # "sqlite" | "postgres"

    # --- events and turns -------------------------------------------------------------
    @abc.abstractmethod
    def put_events(self, events: Sequence[Event]) -> list[PutEventResult]:
        """Store events in one transaction (all or none). Idempotent per ``event_id``: a
        repeat keeps the first row and ``transaction_time`` and reports stored=False."""

    def put_event(self, event: Event) -> PutEventResult:
        return self.put_events([event])[0]

    @abc.abstractmethod
    def get_event(self, event_id: str) -> StoredEvent | None: ...

    @abc.abstractmethod
    def count_events(self, event_ids: Sequence[str]) -> int:
        """How many of ``event_ids`` are stored."""

    @abc.abstractmethod
    def list_events(
        self, namespace: str | None = None, session_id: str | None = None, limit: int = 50
    ) -> list[StoredEvent]:
        """Newest first (transaction_time desc, event_id desc)."""

    def get_turn(self, turn_id: str) -> Turn | None:
        turns = self.get_turns([turn_id])
        return turns[0] if turns else None

    @abc.abstractmethod
    def get_turns(self, turn_ids: Sequence[str]) -> list[Turn]:
        """The turns that exist among ``turn_ids``, in that order, each with its events
        (read in one snapshot)."""

    @abc.abstractmethod
    def session_turns(self, namespace: str, session_id: str, limit: int = 200) -> list[TurnInfo]:
        """The session's turns in that namespace, oldest first, at most ``limit``."""

    @abc.abstractmethod
    def close_idle_turns(self, idle_before: datetime) -> list[str]:
        """Close open turns whose last event was recorded before ``idle_before``."""

    @abc.abstractmethod
    def pending_turns(self, limit: int = 1000) -> list[str]:
        """Closed turns not yet extracted, oldest first."""

    # --- memory records -----------------------------------------------------------------
    @abc.abstractmethod
    @contextmanager
    def transaction(self) -> Iterator[Tx]: ...

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
    def get_memory_record(self, record_id: str) -> MemoryRecord | None: ...

    @abc.abstractmethod
    def get_memory_records(self, record_ids: Sequence[str]) -> list[MemoryRecord]:
        """Records in the order of ``record_ids``; unknown ids are skipped."""

    @abc.abstractmethod
    def list_memory_records(
        self,
        namespace: str,
        limit: int = 50,
        offset: int = 0,
        pinned_first: bool = False,
        count: bool = True,
    ) -> Page:
        """Newest first (created_at desc, record_id desc); pinned ones first if asked.
        ``count=False`` skips counting the namespace (``total`` is None): on Postgres
        that count took 35-100 ms at 50k records, against ~1 ms for a page."""

    @abc.abstractmethod
    def set_pinned(self, record_id: str, pinned: bool) -> MemoryRecord:
        """Raises NotFoundError for an unknown id."""

    @abc.abstractmethod
    def edit_memory_record(
        self,
        record_id: str,
        title: str | None = None,
        summary: str | None = None,
        facts: Sequence[str] | None = None,
    ) -> MemoryRecord:
        """Store a correction of the given fields (None: unchanged), stamp ``edited_at``
        and clear the embedding so the embed job redoes it; the full-text entry follows in
        the same statement. Raises NotFoundError for an unknown id."""

    @abc.abstractmethod
    def find_memory_ids(self, where: MemoryFilter) -> list[str]:
        """Ids of the records ``where`` selects, oldest first (what a bulk delete takes)."""

    @abc.abstractmethod
    def timeline(self, record_id: str, before: int, after: int) -> list[MemoryRecord]:
        """The record and its neighbours in its namespace, in source-turn order
        (created_at, record_id). Raises NotFoundError for an unknown id."""

    @abc.abstractmethod
    def has_embedding(self, record_id: str) -> bool: ...

    # --- search -------------------------------------------------------------------------
    @abc.abstractmethod
    def search_lexical(
        self,
        namespace: str,
        query: str,
        limit: int,
        observation_type: str | None = None,
        since: datetime | None = None,
    ) -> list[LexicalHit]:
        """Never raises on user text: sanitized full-text first (best rank first); if the
        engine refuses the query, escaped substring match ordered by recency."""

    @abc.abstractmethod
    def list_embeddings(self, namespace: str, since: int | None = None) -> EmbeddingMatrix:
        """Embedded records under the namespace (prefix), oldest first.

        With ``since`` (the ``watermark`` of an earlier result): at least every record
        embedded (or re-embedded) after that result's snapshot, possibly a few more; a
        record embedded at or before it and unchanged since is left out. Deletions (and
        cleared embeddings) show only in ``total`` and ``embedded_ids``.
        """

    @abc.abstractmethod
    def embedded_ids(self, namespace: str) -> list[str]:
        """Ids of every embedded record under the namespace (no vectors: cheap)."""

    @abc.abstractmethod
    def records_missing_embedding(
        self, limit: int, namespace: str | None = None
    ) -> list[MemoryRecord]:
        """Oldest first."""

    @abc.abstractmethod
    def clear_embeddings(self, namespace: str | None = None) -> int:
        """Set embeddings to NULL (``wakemark backfill --rebuild``); returns the count."""

    # --- stats --------------------------------------------------------------------------
    @abc.abstractmethod
    def stats(self, namespace: str | None = None) -> dict[str, int]:
        """``events``, ``memories``, ``embedded``, ``pending_extraction`` (events in
        unextracted turns), ``pending_embedding`` (records with NULL embedding)."""

    @abc.abstractmethod
    def projects(self) -> list[dict[str, Any]]:
        """``[{namespace, project_id, display_name, project_path, event_count,
        memory_count, last_activity}]``; project_path is the last one an event carried
        (None if none did), display_name its basename."""

    @abc.abstractmethod
    def ping(self) -> None:
        """Raise if the database cannot be reached."""

    @abc.abstractmethod
    def close(self) -> None:
        """Idempotent."""

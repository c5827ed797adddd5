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
import logging
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import numpy as np

from wakemark.shared.models import Event, MemoryRecord, Retrieval, StoredEvent

log = logging.getLogger(__name__)


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


class MissingExtensionError(StorageError):
    """Postgres lacks an extension this role may not create; the message names the SQL."""


class TransientStorageError(StorageError):
    """A connection-level failure worth retrying (database down, restarting)."""


class StorageFullError(StorageError):
    """The disk holding the database is full: the write was rolled back whole."""


class StorageTimeoutError(StorageError):
    """A read ran past the time it was given and was cancelled."""


@dataclass(frozen=True)
class PutEventResult:
    event_id: str
    stored: bool
    turn_id: str | None
    closed_turns: tuple[str, ...] = ()  # turns this event closed: extraction may start
    # The id it is (or already was) stored under: the client's, or (that id taken in
    # another namespace) ``turns.namespaced_id``. None: not stored (an ignored project).
    stored_id: str | None = None


@dataclass(frozen=True)
class TermStats:
    """What the full-text index knows of a query's tokens."""

    # Documents holding each token; a token missing here is rare (or unknown) to the
    # index: its phrase may be rare however common its parts.
    doc_freq: Mapping[str, int]
    total: int | None  # documents in the index, None if unknown


@dataclass(frozen=True)
class EmbeddingMatrix:
    """Embedded records as columns: row ``i`` of every column is one record.

    Built without a Python object per vector, so a large namespace loads as one
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
class VectorHit:
    """One nearest neighbour found by the database (``Storage.search_vector``)."""

    record_id: str
    created_at: float  # seconds since the Unix epoch
    cosine: float


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
    skip_reason: str | None = None  # why extraction kept nothing: command, meta, trivial...


@dataclass(frozen=True)
class MemoryFilter:
    """Records under ``namespace`` (a full namespace or a prefix); each set field narrows."""

    namespace: str
    observation_type: str | None = None
    before: datetime | None = None  # created_at < before
    after: datetime | None = None  # created_at >= after
    session_id: str | None = None  # a source event of the record is of this session
    pinned: bool | None = None  # only pinned (True) or only unpinned (False) records


@dataclass(frozen=True)
class PageKey:
    """Where a page of records ends, in their order: the next page starts after it, with
    an index seek, however deep it is (an OFFSET walks every row it skips)."""

    created_at: datetime
    record_id: str
    pinned: bool = False

    @classmethod
    def of(cls, record: Any) -> PageKey:
        return cls(record.created_at, record.record_id, record.pinned)


@dataclass(frozen=True)
class Page:
    items: list[Any]
    total: int | None  # None: not counted (``list_memory_records(count=False)``)
    limit: int
    next: PageKey | None  # None: nothing after this page (a full page always has one)

    @classmethod
    def of(cls, items: list[Any], total: int | None, limit: int) -> Page:
        return cls(items, total, limit, PageKey.of(items[-1]) if len(items) == limit else None)


@dataclass(frozen=True)
class TurnRow:
    """A turn's own columns, as export writes them and import restores them."""

    turn_id: str
    namespace: str
    session_id: str
    opened_at: datetime
    last_event_at: datetime
    closed_at: datetime | None
    extracted_at: datetime | None
    record_ids: list[str]


@dataclass
class ImportBatch:
    """Rows restored together (``Storage.import_batch``): records with their vectors
    (None: embedded later by the backfill), turns as they were, events in their turns."""

    records: list[tuple[MemoryRecord, np.ndarray | None]] = field(default_factory=list)
    turns: list[TurnRow] = field(default_factory=list)
    events: list[StoredEvent] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.records) + len(self.turns) + len(self.events)


@dataclass(frozen=True)
class ImportCounts:
    """Rows an import wrote; rows whose id already existed are not counted."""

    records: int = 0
    vectors: int = 0
    turns: int = 0
    events: int = 0


@dataclass(frozen=True)
class DiskUsage:
    """``total``: bytes the database takes; ``tables``: bytes per table (indexes in);
    ``projects``: per namespace, rows and the bytes of their stored text."""

    total: int
    tables: dict[str, int]
    projects: list[dict[str, Any]]


@dataclass(frozen=True)
class RetrievalSession:
    """Sums over one session's retrieval audit rows (kept by triggers)."""

    namespace: str
    session_id: str
    prompts: int
    injected: int  # prompts that got a block
    records: int  # records injected, over all its prompts
    bytes: int  # bytes injected, over all its prompts
    latency_ms: float  # summed
    first_at: datetime
    last_at: datetime


@dataclass(frozen=True)
class ApiToken:
    """A scoped API token as stored (never its secret: only a SHA-256 of it)."""

    token_id: str
    name: str
    actor: str
    project: str | None  # None: every project of the actor
    read_only: bool
    created_at: datetime
    expires_at: datetime | None = None
    revoked_at: datetime | None = None
    last_used_at: datetime | None = None


@dataclass(frozen=True)
class AuditEntry:
    """One destructive action: who (a token id and name, "bootstrap" or "cli:<user>"),
    what (action, namespace, target ids, count) and when."""

    who: str
    action: str  # "delete", "bulk_delete", "import", "token_create", "token_revoke", ...
    namespace: str | None
    targets: tuple[str, ...]
    count: int
    at: datetime
    id: int | None = None  # assigned by storage


class Tx(abc.ABC):
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

    @abc.abstractmethod
    def put_events(self, events: Sequence[Event]) -> list[PutEventResult]:
        """See ``Storage.put_events``."""

    @abc.abstractmethod
    def put_memory_record(self, record: MemoryRecord) -> None: ...

    @abc.abstractmethod
    def put_embedding(self, record_id: str, vector: np.ndarray) -> None: ...

    @abc.abstractmethod
    def delete_memory_records(self, record_ids: Sequence[str]) -> list[str]:
        """Cascade delete; returns the ids that existed (each namespace's epoch bumps)."""

    @abc.abstractmethod
    def mark_turn_extracted(
        self, turn_id: str, record_ids: Sequence[str], skip_reason: str | None = None
    ) -> bool:
        """Mark the turn extracted (with why it gave no record, if it gave none); False
        (and nothing changes) if it already was."""

    @abc.abstractmethod
    def replace_record_text(self, record: MemoryRecord) -> None:
        """Overwrite the stored record's title, summary, facts, concepts and
        files_touched with ``record``'s, and clear its embedding (the text changed): the
        full-text entry follows, the namespace's epoch bumps, the record awaits
        re-embedding. Raises NotFoundError for an unknown id."""

    @abc.abstractmethod
    def audit(self, entry: AuditEntry) -> None:
        """Append to the audit log, committed with the action it records."""

    @abc.abstractmethod
    def put_token(self, token: ApiToken, secret_sha256: str) -> None: ...

    @abc.abstractmethod
    def revoke_token(self, token_id: str, when: datetime) -> bool:
        """False if there is no such token or it was already revoked."""

    @abc.abstractmethod
    def delete_events(self, event_ids: Sequence[str]) -> int:
        """Delete the events that exist among ``event_ids``; returns how many. Their turns
        stay (with the ids of the records made from them)."""


class Storage(abc.ABC):
    backend: str  # "sqlite" | "postgres"
    # True: the database searches vectors itself (``count_embeddings``, ``search_vector``,
    # ``vector_cosines``), for namespaces too large for the process's vector cache.
    vector_index = False

    # --- events and turns -------------------------------------------------------------
    def put_events(self, events: Sequence[Event]) -> list[PutEventResult]:
        """Store events in one transaction (all or none). Idempotent per ``event_id``: a
        repeat keeps the first row and ``transaction_time`` and reports stored=False."""
        if not events:
            return []
        with self.transaction() as tx:
            return tx.put_events(events)

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

    @abc.abstractmethod
    def events_after(self, after: str | None, limit: int) -> list[StoredEvent]:
        """Every event, in ``event_id`` order, after ``after`` (None: from the first)."""

    @abc.abstractmethod
    def rewrite_events(self, events: Sequence[Event]) -> int:
        """Overwrite the client text of each stored event with the same ``event_id`` by
        ``event``'s — its body, source and actor (``wakemark scrub``); ids, namespace,
        session, times and turn stay. Returns how many existed."""

    @abc.abstractmethod
    def rename_session(self, namespace: str, old: str, new: str) -> int:
        """Move session ``old`` of ``namespace`` to the id ``new`` (``wakemark scrub``
        redacting a session id): its events, turns and retrieval audit rows. Should ``new``
        already have an open turn there, ``old``'s open turn closes at its last event (a
        session has one open turn). Returns how many events moved."""

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
        after: PageKey | None = None,
        pinned_first: bool = False,
        count: bool = True,
    ) -> Page:
        """Newest first (created_at desc, record_id desc); pinned ones first if asked.
        ``after``: the ``next`` of the previous page (same ``pinned_first``); the page
        holds the records past it. ``count=False``: ``total`` is None."""

    def record_pages(
        self, namespace: str, limit: int = 500, pinned_first: bool = False
    ) -> Iterator[list[MemoryRecord]]:
        """Every record under the namespace, one ``list_memory_records`` page at a time."""
        after: PageKey | None = None
        while True:
            page = self.list_memory_records(
                namespace, limit, after, pinned_first=pinned_first, count=False
            )
            if page.items:
                yield page.items
            if (after := page.next) is None:
                return

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
    # Primitives of the lexical search; which terms to search for, and what to do when
    # the engine refuses them, is retrieval's (``wakemark.shared.retrieval.lexical``).
    @abc.abstractmethod
    def term_stats(self, tokens: Sequence[str]) -> TermStats | None:
        """Index statistics of ``lexical.tokenize`` tokens; None if the engine refuses."""

    @abc.abstractmethod
    def search_terms(
        self,
        namespace: str,
        terms: Sequence[str],
        limit: int,
        observation_type: str | None = None,
        since: datetime | None = None,
        timeout_s: float | None = None,
        *,
        stats: TermStats,
    ) -> list[MemoryRecord] | None:
        """Records matching any of the terms (each taken literally), best rank first;
        None if the engine refuses the query or no term is searchable. ``stats``: what
        ``term_stats`` said of the query's tokens (the terms among them), for a backend
        whose ranking needs them. Past ``timeout_s`` seconds the statement running is
        cancelled and ``StorageTimeoutError`` raised (so for each search method that
        takes it)."""

    @abc.abstractmethod
    def search_substring(
        self,
        namespace: str,
        text: str,
        limit: int,
        observation_type: str | None = None,
        since: datetime | None = None,
        timeout_s: float | None = None,
    ) -> list[MemoryRecord]:
        """Records containing ``text`` (escaped, case-insensitive), newest first, among
        the namespace's newest ``lexical.SUBSTRING_ROWS`` (no index serves it)."""

    @abc.abstractmethod
    def search_fragments(
        self,
        namespace: str,
        fragments: Sequence[str],
        limit: int,
        observation_type: str | None = None,
        since: datetime | None = None,
        timeout_s: float | None = None,
    ) -> list[MemoryRecord]:
        """Records whose title, summary or facts contain any of the fragments (taken
        literally, case-insensitive), most fragments first, then newest. Fragments of
        ``lexical.TRIGRAM_CHARS`` or more go through the trigram index; shorter ones scan
        the namespace's newest ``SUBSTRING_ROWS`` rows. Each fragment counts the newest
        ``FRAGMENT_WINDOW`` of its first ``FRAGMENT_CANDIDATES`` matches. Past
        ``timeout_s`` seconds in all, the statement running is cancelled and
        ``StorageTimeoutError`` raised."""

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

    def count_embeddings(self, namespace: str) -> int:
        """Embedded records under the namespace (``vector_index`` backends)."""
        raise NotImplementedError(f"{self.backend} has no vector index")

    def search_vector(
        self,
        namespace: str,
        vector: np.ndarray,
        limit: int,
        observation_type: str | None = None,
        since: datetime | None = None,
        exact: bool = False,
        timeout_s: float | None = None,
    ) -> list[VectorHit]:
        """The ``limit`` embedded records under the namespace nearest to ``vector`` by
        cosine, best first, after the filters (``vector_index`` backends). ``exact``: a
        scan of the namespace's rows instead of the approximate index."""
        raise NotImplementedError(f"{self.backend} has no vector index")

    def vector_cosines(
        self, namespace: str, vector: np.ndarray, record_ids: Sequence[str]
    ) -> dict[str, float]:
        """The cosine of ``vector`` with each of ``record_ids`` embedded under the
        namespace (``vector_index`` backends)."""
        raise NotImplementedError(f"{self.backend} has no vector index")

    @abc.abstractmethod
    def records_missing_embedding(
        self, limit: int, namespace: str | None = None
    ) -> list[MemoryRecord]:
        """Oldest first."""

    @abc.abstractmethod
    def clear_embeddings(self, namespace: str | None = None) -> int:
        """Set embeddings to NULL (``wakemark backfill --rebuild``); returns the count."""

    # --- retrieval audit ------------------------------------------------------------------
    @abc.abstractmethod
    def put_retrieval(self, retrieval: Retrieval) -> None:
        """Store one audit row. Raises NotFoundError if its prompt event is not stored:
        a row lives as long as its event (deleting the event deletes it)."""

    @abc.abstractmethod
    def get_retrieval(self, retrieval_id: str) -> Retrieval | None: ...

    @abc.abstractmethod
    def list_retrievals(
        self,
        namespace: str | None = None,
        session_id: str | None = None,
        limit: int = 50,
        after: tuple[datetime, str] | None = None,
    ) -> list[Retrieval]:
        """Newest first (created_at desc, retrieval_id desc); ``after``: the
        ``(created_at, retrieval_id)`` of the previous page's last row."""

    @abc.abstractmethod
    def retrieval_sessions(
        self, namespace: str, limit: int = 50, after: tuple[datetime, str] | None = None
    ) -> list[RetrievalSession]:
        """The sessions of one namespace that have audit rows, most recent prompt first
        (last_at desc, session_id desc); ``after``: the previous page's last
        ``(last_at, session_id)``."""

    @abc.abstractmethod
    def retrieval_totals(self, namespace: str | None = None) -> dict[str, float]:
        """``prompts``, ``injected``, ``records``, ``bytes``, ``latency_ms`` summed over
        every audit row under the namespace (prefix; None: all)."""

    # --- export and import ------------------------------------------------------------
    @abc.abstractmethod
    def export_records(
        self, namespace: str | None, after: str | None, limit: int, vectors: bool
    ) -> list[tuple[MemoryRecord, np.ndarray | None]]:
        """A keyset page: up to ``limit`` records under the namespace (None: all) with
        ``record_id > after``, in record_id order; each with its vector when ``vectors``
        (None for a record not embedded yet, and always None without ``vectors``)."""

    @abc.abstractmethod
    def export_turns(
        self, namespace: str | None, after: str | None, limit: int
    ) -> list[tuple[TurnRow, list[StoredEvent]]]:
        """A keyset page of turns (``turn_id > after``, in turn_id order), each with its
        events in (valid_time, event_id) order."""

    @abc.abstractmethod
    def import_batch(self, batch: ImportBatch, commit: bool = True) -> ImportCounts:
        """Write the batch in one transaction, exactly as given (ids, times, turn
        membership and extraction marks kept). A row whose id already exists is left
        alone, so importing twice writes nothing the second time. ``commit=False`` rolls
        the transaction back: the counts say what would have been written."""

    # --- retention and size ---------------------------------------------------------
    @abc.abstractmethod
    def trimmable_turns(self, extracted_before: datetime, limit: int) -> list[str]:
        """Turns extracted before the time whose events are not trimmed yet, oldest
        extraction first."""

    @abc.abstractmethod
    def trim_turns(self, bodies: Mapping[str, Mapping[str, str]]) -> int:
        """One transaction: for each turn id, set the bodies (JSON text) of the events
        named (events of other turns are left alone) and mark the turn trimmed, so it is
        never listed again; returns the number of events changed."""

    @abc.abstractmethod
    def expire_turns(self, extracted_before: datetime, limit: int) -> tuple[int, int]:
        """One transaction: delete up to ``limit`` trimmed turns extracted before the time
        (oldest extraction first) with their events and those events' retrieval audit rows;
        records stay, their ``source_event_ids`` then naming expired events. Returns
        (turns, events) deleted."""

    @abc.abstractmethod
    def delete_retrievals(self, created_before: datetime) -> int:
        """Delete the retrieval audit rows created before the time; returns how many."""

    @abc.abstractmethod
    def merge_indexes(self) -> None:
        """A bounded step of index upkeep the retention pass runs after deleting records:
        SQLite merges its full-text segments so the deleted records' entries are dropped
        (without it the full-text indexes keep growing while records are deleted as fast
        as they come); Postgres leaves it to autovacuum."""

    @abc.abstractmethod
    def compact(self) -> list[str]:
        """Give freed space back (SQLite: VACUUM or incremental vacuum; Postgres: VACUUM
        (ANALYZE) of the big tables where the role may); returns what was done, one line
        each, or advice when it could not be."""

    @abc.abstractmethod
    def disk_usage(self) -> DiskUsage: ...

    @abc.abstractmethod
    def database_bytes(self) -> int:
        """What the database takes now, cheaply (no scan): SQLite the file and its WAL;
        Postgres wakemark's tables with their indexes and TOAST."""

    # --- tokens and audit ---------------------------------------------------------------
    @abc.abstractmethod
    def token_by_hash(self, secret_sha256: str) -> ApiToken | None:
        """The token with that secret hash, revoked or expired ones included."""

    @abc.abstractmethod
    def list_tokens(self) -> list[ApiToken]:
        """Oldest first."""

    @abc.abstractmethod
    def touch_token(self, token_id: str, when: datetime) -> None:
        """Set ``last_used_at``."""

    @abc.abstractmethod
    def list_audit(self, limit: int = 100) -> list[AuditEntry]:
        """Newest first."""

    # --- stats --------------------------------------------------------------------------
    @abc.abstractmethod
    def stats(self, namespace: str | None = None) -> dict[str, int]:
        """``events``, ``memories``, ``embedded``, ``pending_extraction`` (events in
        unextracted turns), ``pending_embedding`` (records with NULL embedding)."""

    @abc.abstractmethod
    def skipped_turns(self) -> dict[str, int]:
        """Extracted turns that gave no record, by ``skip_reason``."""

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

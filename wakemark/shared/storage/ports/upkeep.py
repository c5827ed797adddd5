"""Upkeep: export and import, moving a project, retention, index upkeep and compaction,
sizes, counts."""

from __future__ import annotations

import abc
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol

import numpy as np

from wakemark.shared.models import NAMESPACE_RE, MemoryRecord, StoredEvent
from wakemark.shared.storage.errors import ConflictError
from wakemark.shared.storage.ports.anchors import CodeAnchors
from wakemark.shared.storage.ports.audit import AuditEntry


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
    skip_reason: str | None = None  # why extraction kept nothing (``TurnInfo.skip_reason``)
    repeat_of: str | None = None  # the record a turn of repeats said again


def kept_model(stored: str | None, model: str | None) -> bool:
    """Whether vectors made by ``model`` (None: not recorded, taken as the stored one's)
    go into a database whose vectors are ``stored``'s (None: it records none yet)."""
    return model is None or stored in (None, model)


# What ``Upkeep.move_namespace`` counts, and the table of each: every table whose rows
# belong to a namespace, but the per-project counts (merged) and the audit log (history).
MOVED_TABLES = {
    "records": "memory_records",
    "versions": "record_history",
    "anchors": "code_anchors",
    "turns": "turns",
    "events": "events",
    "retrievals": "retrievals",
}


def check_move(old: str, new: str) -> None:
    """ValueError unless ``old`` and ``new`` are two different full namespaces."""
    for namespace in (old, new):
        if not NAMESPACE_RE.fullmatch(namespace):
            raise ValueError(f"not a namespace /actor/<actor>/project/<id>/: {namespace!r}")
    if old == new:
        raise ValueError(f"{old} would move onto itself")


def open_in_both(sessions: list[str]) -> ConflictError:
    """The error of a move refused for sessions with an open turn on both sides (empty:
    not known which)."""
    named = ", ".join(sessions[:5]) + (
        f" and {len(sessions) - 5} more" if len(sessions) > 5 else ""
    )
    return ConflictError(
        f"a session ({named or 'opened meanwhile'}) has an open turn in both projects; move"
        " again once it is closed (when its answer arrives, or after it has been idle a while)"
    )


@dataclass
class ImportBatch:
    """Rows restored together (``Upkeep.import_batch``): records with their vectors
    (None: embedded later by the backfill), turns as they were, events in their turns;
    the code anchors of those records (written with a record the import adds, never over
    the anchors of one already stored). ``model``: the identity of the model that made
    the vectors (None: not recorded); they are written only while it is the database's
    (or it records none), checked in the batch's own transaction, so a rebuild's swap
    committing meanwhile leaves the records to the backfill instead."""

    model: str | None = None
    records: list[tuple[MemoryRecord, np.ndarray | None]] = field(default_factory=list)
    anchors: dict[str, CodeAnchors] = field(default_factory=dict)  # by record id
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


class Upkeep(Protocol):
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
        alone, so importing twice writes nothing the second time. A batch into a
        namespace a move is leaving waits for the move, then lands whole in it
        (``move_namespace``). ``commit=False`` rolls the transaction back: the counts say
        what would have been written."""

    # --- moving a project -------------------------------------------------------------
    @abc.abstractmethod
    def move_namespace(
        self,
        old: str,
        new: str,
        project_path: str | None = None,
        commit: bool = True,
        audit: AuditEntry | None = None,
    ) -> dict[str, int]:
        """Move every row of the namespace ``old`` (exactly, not as a prefix) into
        ``new``, in one transaction: the memories of a project whose directory was moved
        or renamed. Rows already in ``new`` stay: the per-project counts end as if the
        moved rows had been written there; the audit log stays as it was (history).
        ``project_path``: the project's root from now on (``projects()``). ``audit``: the
        audit log's entry of the move, written in the same transaction, so neither
        commits without the other. An event, retrieval row or import batch written into
        ``old`` while the move runs waits for it, then lands in ``old`` (an event in a turn
        opened there, an import in its own turns). Moved vectors and texts are stamped as
        written now, so caches refreshed from a watermark take them in, and the change
        hook is called for both namespaces after the commit.
        Returns the rows moved by kind (``MOVED_TABLES``); ``commit=False`` rolls back:
        the counts say what would move. Raises ValueError unless ``old`` and ``new`` are
        two different full namespaces, NotFoundError when ``old`` holds no row, and
        ConflictError when a session has an open turn in both (nothing moves)."""

    # --- retention ------------------------------------------------------------------
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

    # --- index upkeep and size ------------------------------------------------------
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

    # --- counts (stats, the viewer's project list) ------------------------------------
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

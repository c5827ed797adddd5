"""Upkeep of the SQLite backend: export and import, moving a project, retention, index
upkeep, sizes and counts."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Mapping
from datetime import datetime
from pathlib import PurePosixPath, PureWindowsPath
from typing import Any

import numpy as np

from wakemark.shared.models import MemoryRecord, StoredEvent, utcnow
from wakemark.shared.storage import columns, lexical
from wakemark.shared.storage.errors import NotFoundError
from wakemark.shared.storage.ports.audit import AuditEntry
from wakemark.shared.storage.ports.upkeep import (
    MOVED_TABLES,
    DiskUsage,
    ImportBatch,
    ImportCounts,
    TurnRow,
    check_move,
    kept_model,
    open_in_both,
)
from wakemark.shared.storage.sqlite import anchors as anchors_sql
from wakemark.shared.storage.sqlite import codec
from wakemark.shared.storage.sqlite.audit import INSERT_AUDIT, audit_params
from wakemark.shared.storage.sqlite.base import NS, T_NS, SqliteBase, snapshot
from wakemark.shared.storage.sqlite.events import (
    INSERT_EVENT,
    INSERT_EVENT_COUNTS,
    MERGE_EVENT_COUNTS,
    TURNS_EVENTS,
    count_added_events,
)
from wakemark.shared.storage.sqlite.records import INSERT_RECORD, RECORD_COLUMNS
from wakemark.shared.storage.sqlite.vectors import MODELS, SET_EMBEDDING

# Keyset pages in id order: each page seeks the unique index past the last id, so an
# export of a million rows costs the same per page from start to end. The unary + keeps
# SQLite off the namespace index, whose rows it would have to sort again for every page.
_PLUS_NS = "+namespace >= :ns_lo AND +namespace < :ns_hi"

EXPORT_RECORDS = f"""
SELECT {RECORD_COLUMNS}, CASE WHEN :vectors THEN embedding END AS embedding
FROM memory_records WHERE record_id > :after AND {_PLUS_NS}
ORDER BY record_id LIMIT :limit
"""

EXPORT_TURNS = f"""
SELECT * FROM turns WHERE turn_id > :after AND {_PLUS_NS} ORDER BY turn_id LIMIT :limit
"""

# OR IGNORE: a row whose id exists is kept as it is (import is idempotent).
IMPORT_RECORD = INSERT_RECORD.replace("INSERT INTO", "INSERT OR IGNORE INTO", 1)

# An open turn whose session already has another open turn here arrives closed (at its
# last event): a session has one open turn, and its events must not be left turnless.
IMPORT_TURN = """
INSERT OR IGNORE INTO turns (turn_id, namespace, session_id, opened_at, last_event_at,
                             closed_at, extracted_at, record_ids, skip_reason, repeat_of)
SELECT :turn_id, :namespace, :session_id, :opened_at, :last_event_at,
       CASE WHEN :closed_at IS NULL AND EXISTS (
                SELECT 1 FROM turns WHERE namespace = :namespace AND session_id = :session_id
                   AND closed_at IS NULL AND turn_id <> :turn_id)
            THEN :last_event_at ELSE :closed_at END,
       :extracted_at, :record_ids, :skip_reason, :repeat_of
"""

IMPORT_EVENT = INSERT_EVENT.replace("INSERT INTO", "INSERT OR IGNORE INTO", 1)

# move_namespace: all with :old and :new. A session may have one open turn per project.
OPEN_IN_BOTH = """
SELECT o.session_id FROM turns o JOIN turns n
    ON n.namespace = :new AND n.session_id = o.session_id AND n.closed_at IS NULL
 WHERE o.namespace = :old AND o.closed_at IS NULL
"""

NEXT_EMBEDDING_SEQ = "UPDATE embedding_seq SET value = value + 1 WHERE id = 1 RETURNING value"

# Besides the namespace: a moved vector takes a new stamp (:seq), or a vector cache of the
# new namespace, refreshed from its watermark, would never read it (the text stamp and the
# full-text scope follow the namespace by trigger); a version's body holds its record.
_ALSO_SET = {
    "memory_records": ", embedded_seq = iif(embedding IS NULL, embedded_seq, :seq)",
    "record_history": ", body = json_set(body, '$.record.namespace', :new)",
}
MOVE_ROWS = {
    kind: f"UPDATE {table} SET namespace = :new{_ALSO_SET.get(table, '')} WHERE namespace = :old"
    for kind, table in MOVED_TABLES.items()
}

# The per-project counts: an UPDATE of the namespace fires none of the triggers that keep
# them, so the old project's rows are added to the new one's, as their writes would have
# been, then dropped.
MERGE_COUNTS = (
    INSERT_EVENT_COUNTS + "SELECT :new, events, last_event_at, project_path, project_path_at"
    " FROM namespace_event_counts WHERE namespace = :old" + MERGE_EVENT_COUNTS,
    """INSERT INTO namespace_record_counts (namespace, memories, embedded, last_record_at)
    SELECT :new, memories, embedded, last_record_at FROM namespace_record_counts
     WHERE namespace = :old
    ON CONFLICT (namespace) DO UPDATE SET
        memories = memories + excluded.memories,
        embedded = embedded + excluded.embedded,
        last_record_at = max(coalesce(last_record_at, ''), excluded.last_record_at)""",
    """INSERT INTO retrieval_sessions
    SELECT :new, session_id, prompts, injected, records, bytes, latency_ms, first_at, last_at
      FROM retrieval_sessions WHERE namespace = :old
    ON CONFLICT (namespace, session_id) DO UPDATE SET
        prompts = prompts + excluded.prompts,
        injected = injected + excluded.injected,
        records = records + excluded.records,
        bytes = bytes + excluded.bytes,
        latency_ms = latency_ms + excluded.latency_ms,
        first_at = min(first_at, excluded.first_at),
        last_at = max(last_at, excluded.last_at)""",
    "DELETE FROM namespace_event_counts WHERE namespace = :old",
    "DELETE FROM namespace_record_counts WHERE namespace = :old",
    "DELETE FROM retrieval_sessions WHERE namespace = :old",
)

SET_PROJECT_PATH = """
INSERT INTO namespace_event_counts (namespace, events, project_path, project_path_at)
VALUES (:new, 0, :path, :at)
ON CONFLICT (namespace) DO UPDATE SET
    project_path = excluded.project_path, project_path_at = excluded.project_path_at
"""

TRIMMABLE_TURNS = """
SELECT turn_id FROM turns
WHERE extracted_at IS NOT NULL AND trimmed_at IS NULL AND extracted_at < ?
ORDER BY extracted_at, turn_id LIMIT ?
"""

# A trimmed body is a delete and a re-insert of the row under its rowid, not an UPDATE:
# SQLite merges the pages a DELETE leaves underfull, while an UPDATE that shrinks a row
# leaves its page mostly empty for good (new events append at the end of the table), so
# the file kept growing at ~70% of its pace without retention (bench/soak).
TRIM_DELETE_EVENT = """
DELETE FROM events WHERE event_id = :event_id AND turn_id = :turn_id
RETURNING rowid AS row_id, *
"""

TRIM_INSERT_EVENT = """
INSERT INTO events (rowid, event_id, parent_event_id, session_id, actor_id, namespace, kind,
                    body, valid_time, source, schema_version, transaction_time, turn_id)
VALUES (:row_id, :event_id, :parent_event_id, :session_id, :actor_id, :namespace, :kind,
        :body, :valid_time, :source, :schema_version, :transaction_time, :turn_id)
"""

MARK_TRIMMED = "UPDATE turns SET trimmed_at = :now WHERE turn_id = :turn_id"

EXPIRABLE_TURNS = """
SELECT turn_id FROM turns WHERE trimmed_at IS NOT NULL AND extracted_at < ?
ORDER BY extracted_at, turn_id LIMIT ?
"""

# Events first: their retrieval rows go with them (ON DELETE CASCADE).
EXPIRE_EVENTS = "DELETE FROM events WHERE turn_id IN (SELECT value FROM json_each(?))"

EXPIRE_TURNS = "DELETE FROM turns WHERE turn_id IN (SELECT value FROM json_each(?))"

FTS_TABLES = ("memory_fts", "memory_trgm")  # the full-text indexes merge and optimize

# Leaf pages one merge_indexes() step merges per index. Negative: merge across levels, so
# the old segments that hold a deleted record's entries are reached too.
FTS_MERGE_PAGES = -500

# Bytes per table, its indexes included (FTS5 shadow tables count as the index's).
TABLE_SIZES = """
SELECT CASE WHEN coalesce(m.tbl_name, d.name) LIKE 'memory\\_fts%' ESCAPE '\\'
            THEN 'memory_fts' ELSE coalesce(m.tbl_name, d.name) END AS tbl,
       sum(d.pgsize) AS bytes
FROM dbstat d LEFT JOIN sqlite_master m ON m.name = d.name
GROUP BY tbl ORDER BY bytes DESC
"""

EVENT_BYTES = """
SELECT namespace, count(*) AS n, sum(length(CAST(body AS BLOB))) AS bytes
FROM events GROUP BY namespace
"""

RECORD_BYTES = """
SELECT namespace, count(*) AS n,
       sum(length(CAST(title AS BLOB)) + length(CAST(summary AS BLOB))
           + length(CAST(facts AS BLOB)) + length(CAST(concepts AS BLOB))
           + length(CAST(files_touched AS BLOB)) + coalesce(length(embedding), 0)) AS bytes
FROM memory_records GROUP BY namespace
"""

# events, memories and embedded come from the counts the triggers of migration 0011 keep:
# one row per project, however many events and records it holds.
STATS = f"""
SELECT
  (SELECT coalesce(sum(events), 0) FROM namespace_event_counts WHERE {NS}) AS events,
  (SELECT coalesce(sum(memories), 0) FROM namespace_record_counts WHERE {NS}) AS memories,
  (SELECT coalesce(sum(embedded), 0) FROM namespace_record_counts WHERE {NS}) AS embedded,
  -- from the unextracted turns (a partial index) to their events: costs what is
  -- pending, not what is stored (counting from the events read all of them)
  (SELECT count(*) FROM turns t JOIN events e ON e.turn_id = t.turn_id
    WHERE t.extracted_at IS NULL AND {T_NS}) AS pending_extraction,
  (SELECT coalesce(sum(memories - embedded), 0) FROM namespace_record_counts WHERE {NS})
    AS pending_embedding
"""

SKIPPED_TURNS = """
SELECT skip_reason, count(*) AS n FROM turns WHERE skip_reason IS NOT NULL GROUP BY skip_reason
"""

PROJECTS = """
WITH names AS (
  SELECT namespace FROM namespace_event_counts WHERE events > 0
  UNION SELECT namespace FROM namespace_record_counts WHERE memories > 0
)
SELECT n.namespace, coalesce(e.events, 0) AS event_count, coalesce(r.memories, 0) AS memory_count,
       nullif(max(coalesce(e.last_event_at, ''), coalesce(r.last_record_at, '')), '')
         AS last_activity,
       e.project_path
  FROM names n
  LEFT JOIN namespace_event_counts e ON e.namespace = n.namespace
  LEFT JOIN namespace_record_counts r ON r.namespace = n.namespace
 ORDER BY last_activity DESC, n.namespace
"""


class SqliteUpkeep(SqliteBase):
    def export_records(
        self, namespace: str | None, after: str | None, limit: int, vectors: bool
    ) -> list[tuple[MemoryRecord, np.ndarray | None]]:
        params = {
            **lexical.namespace_range(namespace),
            "after": after or "",
            "limit": limit,
            "vectors": int(vectors),
        }
        out: list[tuple[MemoryRecord, np.ndarray | None]] = []
        for row in self._read(EXPORT_RECORDS, params):
            blob = row["embedding"]
            vector = None
            if blob is not None:
                vector = codec.decode_embeddings([blob], [row["record_id"]])[0]
            out.append((codec.to_record(row), vector))
        return out

    def export_turns(
        self, namespace: str | None, after: str | None, limit: int
    ) -> list[tuple[TurnRow, list[StoredEvent]]]:
        params = {**lexical.namespace_range(namespace), "after": after or "", "limit": limit}
        conn = self._conns.get()
        with snapshot(conn):
            rows = conn.execute(EXPORT_TURNS, params).fetchall()
            ids = json.dumps([r["turn_id"] for r in rows])
            events = conn.execute(TURNS_EVENTS, (ids,)).fetchall()
        by_turn: dict[str, list[StoredEvent]] = {}
        for e in events:
            by_turn.setdefault(e["turn_id"], []).append(codec.to_event(e))
        return [(codec.to_turn_row(r), by_turn.get(r["turn_id"], [])) for r in rows]

    def import_batch(self, batch: ImportBatch, commit: bool = True) -> ImportCounts:
        changed: set[str] = set()
        try:
            with self._conns.write() as conn:
                records = vectors = 0
                # One writer at a time: no swap commits before this transaction does.
                keep = kept_model(conn.execute(MODELS).fetchone()["model"], batch.model)
                for record, vector in batch.records:
                    vector = vector if keep else None
                    if conn.execute(IMPORT_RECORD, codec.record_params(record)).rowcount:
                        records += 1
                        if record.record_id in batch.anchors:
                            anchors = batch.anchors[record.record_id]
                            conn.execute(anchors_sql.PUT_ANCHORS, anchors_sql.put_params(anchors))
                        if vector is not None:
                            conn.execute(
                                SET_EMBEDDING,
                                (codec.encode_embedding(vector), record.record_id),
                            ).fetchall()
                            vectors += 1
                            changed.add(record.namespace)
                turns_written = sum(
                    conn.execute(IMPORT_TURN, codec.turn_row_params(t)).rowcount
                    for t in batch.turns
                )
                added = []
                for e in batch.events:
                    at = codec.ts(e.transaction_time)
                    params = {**codec.event_params(e, at), "turn_id": e.turn_id}
                    if conn.execute(IMPORT_EVENT, params).rowcount:
                        added.append((e.namespace, at, e.source.project_path))
                count_added_events(conn, added)
                events = len(added)
                counts = ImportCounts(records, vectors, turns_written, events)
                if not commit:
                    raise _RollBack
        except _RollBack:
            return counts
        self._notify(changed)
        return counts

    def move_namespace(
        self,
        old: str,
        new: str,
        project_path: str | None = None,
        commit: bool = True,
        audit: AuditEntry | None = None,
    ) -> dict[str, int]:
        check_move(old, new)
        params: dict[str, Any] = {"old": old, "new": new}
        try:
            with self._conns.write() as conn:
                clash = [r[0] for r in conn.execute(OPEN_IN_BOTH, params)]
                if clash:
                    raise open_in_both(clash)
                params["seq"] = conn.execute(NEXT_EMBEDDING_SEQ).fetchone()[0]
                moved = {
                    kind: conn.execute(sql, params).rowcount for kind, sql in MOVE_ROWS.items()
                }
                if not any(moved.values()):
                    raise NotFoundError(f"nothing stored under {old}")
                for sql in MERGE_COUNTS:
                    conn.execute(sql, params)
                if project_path is not None:
                    at = codec.ts(utcnow())
                    conn.execute(SET_PROJECT_PATH, {"new": new, "path": project_path, "at": at})
                if audit is not None:
                    conn.execute(INSERT_AUDIT, audit_params(audit))
                if not commit:
                    raise _RollBack
        except _RollBack:
            return moved
        self._notify({old, new})
        return moved

    def trimmable_turns(self, extracted_before: datetime, limit: int) -> list[str]:
        return [r[0] for r in self._read(TRIMMABLE_TURNS, (codec.ts(extracted_before), limit))]

    def trim_turns(self, bodies: Mapping[str, Mapping[str, str]]) -> int:
        now = codec.ts(utcnow())
        with self._conns.write() as conn:
            added = []
            for turn_id, events in bodies.items():
                for event_id, body in events.items():
                    key = {"event_id": event_id, "turn_id": turn_id}
                    row = conn.execute(TRIM_DELETE_EVENT, key).fetchone()
                    if row is not None:
                        conn.execute(TRIM_INSERT_EVENT, {**dict(row), "body": body})
                        path = json.loads(row["source"]).get("project_path")
                        added.append((row["namespace"], row["transaction_time"], path))
                conn.execute(MARK_TRIMMED, {"now": now, "turn_id": turn_id})
            # The delete trigger took each re-inserted event off its project's count.
            count_added_events(conn, added)
        return len(added)

    def expire_turns(self, extracted_before: datetime, limit: int) -> tuple[int, int]:
        with self._conns.write() as conn:
            rows = conn.execute(EXPIRABLE_TURNS, (codec.ts(extracted_before), limit))
            ids = json.dumps([r[0] for r in rows.fetchall()])
            events = conn.execute(EXPIRE_EVENTS, (ids,)).rowcount
            return conn.execute(EXPIRE_TURNS, (ids,)).rowcount, events

    def merge_indexes(self) -> None:
        with self._conns.write() as conn:
            for table in FTS_TABLES:
                conn.execute(
                    f"INSERT INTO {table} ({table}, rank) VALUES ('merge', ?)",
                    (FTS_MERGE_PAGES,),
                )

    def compact(self) -> list[str]:
        with self._conns.exclusive() as conn:
            before = _file_bytes(conn)
            # A deleted or rewritten record leaves a tombstone in the full-text indexes
            # until a merge reaches its segment; 'optimize' merges each into one segment.
            for table in FTS_TABLES:
                conn.execute(f"INSERT INTO {table} ({table}) VALUES ('optimize')")
            # auto_vacuum=INCREMENTAL (2) can hand free pages back without a rewrite;
            # NONE (0, the default) and FULL (1) need VACUUM, which rewrites the file.
            if conn.execute("PRAGMA auto_vacuum").fetchone()[0] == 2:
                conn.execute("PRAGMA incremental_vacuum").fetchall()
                done = "incremental vacuum"
            else:
                conn.execute("VACUUM")
                done = "VACUUM"
            # The rewritten pages sit in the WAL until a checkpoint copies them back.
            busy = conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()[0]
            after = _file_bytes(conn)
        lines = [f"{done}: {self.path} {before:,} -> {after:,} bytes"]
        if busy:
            lines.append(
                "a reader kept the WAL from being truncated; it shrinks at the next checkpoint"
            )
        return lines

    def disk_usage(self) -> DiskUsage:
        conn = self._conns.get()
        tables = {r["tbl"]: int(r["bytes"]) for r in conn.execute(TABLE_SIZES)}
        free = conn.execute("PRAGMA freelist_count").fetchone()[0]
        tables["(free pages)"] = free * conn.execute("PRAGMA page_size").fetchone()[0]
        return DiskUsage(
            total=_file_bytes(conn),
            tables=tables,
            projects=columns.project_sizes(conn.execute(EVENT_BYTES), conn.execute(RECORD_BYTES)),
        )

    def database_bytes(self) -> int:
        files = (self.path, self.path.with_name(self.path.name + "-wal"))
        return sum(f.stat().st_size for f in files if f.exists())

    def stats(self, namespace: str | None = None) -> dict[str, int]:
        row = self._read(STATS, lexical.namespace_range(namespace))[0]
        return {key: int(row[key]) for key in row.keys()}  # noqa: SIM118 - Row has no iter

    def skipped_turns(self) -> dict[str, int]:
        return {r["skip_reason"]: int(r["n"]) for r in self._read(SKIPPED_TURNS)}

    def projects(self) -> list[dict[str, Any]]:
        return [_project(r) for r in self._read(PROJECTS)]


def _file_bytes(conn: sqlite3.Connection) -> int:
    pages = conn.execute("PRAGMA page_count").fetchone()[0]
    return int(pages * conn.execute("PRAGMA page_size").fetchone()[0])


class _RollBack(Exception):
    """Raised inside a write transaction to roll it back (a dry-run import or move)."""


def _project(row: sqlite3.Row) -> dict[str, Any]:
    namespace: str = row["namespace"]
    project_id = namespace.rstrip("/").rsplit("/", 1)[-1]
    path: str | None = row["project_path"]
    name = None
    if path:
        # Hooks on Windows send backslash paths; either separator ends a component.
        pure = PureWindowsPath(path) if "\\" in path else PurePosixPath(path)
        name = pure.name or None
    return {
        "namespace": namespace,
        "project_id": project_id,
        "display_name": name or project_id,
        "project_path": path,
        "event_count": row["event_count"],
        "memory_count": row["memory_count"],
        "last_activity": codec.from_ts(row["last_activity"]) if row["last_activity"] else None,
    }

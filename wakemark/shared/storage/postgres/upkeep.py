"""Upkeep of the Postgres backend: export and import, moving a project, retention, index
upkeep, sizes and counts."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict
from datetime import datetime
from typing import Any

import numpy as np
import psycopg
from psycopg import sql

from wakemark.shared.models import MemoryRecord, StoredEvent, utcnow
from wakemark.shared.storage import columns, lexical
from wakemark.shared.storage.errors import NotFoundError
from wakemark.shared.storage.fields import record_fields
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
from wakemark.shared.storage.postgres import anchors as anchors_sql
from wakemark.shared.storage.postgres.audit import INSERT_AUDIT
from wakemark.shared.storage.postgres.base import (
    LOCK_RECORDS,
    NAMESPACE_LOCK,
    NS,
    PostgresBase,
)
from wakemark.shared.storage.postgres.connection import REPEATABLE_READ
from wakemark.shared.storage.postgres.events import TURNS_EVENTS, insert_events
from wakemark.shared.storage.postgres.records import RECORD_COLUMNS
from wakemark.shared.storage.postgres.rows import (
    check_vector,
    event_params,
    memory_record,
    stored_event,
)
from wakemark.shared.storage.postgres.vectors import MODELS_SHARED

_TURN_EVENTS = "SELECT count(*) FROM events e WHERE e.turn_id = t.turn_id"

# events, memories and embedded come from the counts the triggers of migration 0013 keep:
# one row per project, however many events and records it holds.
STATS = f"""
SELECT
  (SELECT coalesce(sum(events), 0)::bigint FROM namespace_event_counts WHERE namespace {NS}),
  (SELECT coalesce(sum(memories), 0)::bigint FROM namespace_record_counts WHERE namespace {NS}),
  (SELECT coalesce(sum(embedded), 0)::bigint FROM namespace_record_counts WHERE namespace {NS}),
  -- from the unextracted turns (closed ones, then open ones: two partial indexes) to
  -- their events, one index lookup per turn: costs what is pending, not what is stored
  -- (as a join the planner hashed every event of the database: 50 ms at 165k events)
  (SELECT coalesce(sum(({_TURN_EVENTS})), 0)::bigint FROM turns t
    WHERE t.closed_at IS NOT NULL AND t.extracted_at IS NULL AND t.namespace {NS})
  + (SELECT coalesce(sum(({_TURN_EVENTS})), 0)::bigint FROM turns t
    WHERE t.closed_at IS NULL AND t.namespace {NS}),
  (SELECT coalesce(sum(memories - embedded), 0)::bigint FROM namespace_record_counts
    WHERE namespace {NS})
"""

SKIPPED_TURNS = """
SELECT skip_reason, count(*) FROM turns WHERE skip_reason IS NOT NULL GROUP BY skip_reason
"""

PROJECTS = """
SELECT coalesce(e.namespace, r.namespace), e.project_path,
       coalesce(e.events, 0), coalesce(r.memories, 0),
       greatest(e.last_event_at, r.last_record_at)
  FROM (SELECT * FROM namespace_event_counts WHERE events > 0) e
  FULL JOIN (SELECT * FROM namespace_record_counts WHERE memories > 0) r
    ON r.namespace = e.namespace
 ORDER BY 5 DESC NULLS LAST, 1
"""

# Keyset pages in id order (primary keys; ids are ULIDs, which sort the same in every
# collation), so each page is one index seek however far into the table it is.
EXPORT_RECORDS = f"""
SELECT {RECORD_COLUMNS}, CASE WHEN %(vectors)s THEN embedding END
  FROM memory_records
 WHERE record_id > %(after)s AND namespace {NS}
 ORDER BY record_id
 LIMIT %(limit)s
"""

EXPORT_TURNS = f"""
SELECT turn_id, namespace, session_id, opened_at, last_event_at, closed_at, extracted_at,
       record_ids, skip_reason, repeat_of
  FROM turns
 WHERE turn_id > %(after)s AND namespace {NS}
 ORDER BY turn_id
 LIMIT %(limit)s
"""

# With its vector in the same row: an insert then an UPDATE of the embedding would write
# every index (HNSW included) twice. The stamp is what migration 0003's trigger sets on
# an update, so a vector cache's incremental refresh sees imported vectors too.
IMPORT_RECORD = f"""
INSERT INTO memory_records ({RECORD_COLUMNS}, embedding, embedded_xid)
VALUES (%(record_id)s, %(namespace)s, %(title)s, %(summary)s, %(facts)s, %(concepts)s,
        %(files_touched)s, %(observation_type)s, %(source_event_ids)s, %(strategy)s,
        %(quality)s, %(pinned)s, %(created_at)s, %(edited_at)s, %(embedding)s::vector,
        CASE WHEN %(embedding)s::vector IS NULL THEN 0
             ELSE pg_current_xact_id()::text::bigint END)
ON CONFLICT (record_id) DO NOTHING
RETURNING record_id
"""

# An open turn whose session already has another open turn here arrives closed (at its
# last event): a session has one open turn, and its events must not be left turnless.
IMPORT_TURN = """
INSERT INTO turns (turn_id, namespace, session_id, opened_at, last_event_at, closed_at,
                   extracted_at, record_ids, skip_reason, repeat_of)
SELECT %(turn_id)s, %(namespace)s, %(session_id)s, %(opened_at)s, %(last_event_at)s,
       CASE WHEN %(closed_at)s::timestamptz IS NULL AND EXISTS (
                SELECT 1 FROM turns WHERE namespace = %(namespace)s
                   AND session_id = %(session_id)s AND closed_at IS NULL
                   AND turn_id <> %(turn_id)s)
            THEN %(last_event_at)s ELSE %(closed_at)s::timestamptz END,
       %(extracted_at)s, %(record_ids)s, %(skip_reason)s, %(repeat_of)s
ON CONFLICT (turn_id) DO NOTHING
"""

# move_namespace: the writers of the old namespace's events wait for the move to commit.
MOVING = f"SELECT pg_advisory_xact_lock({NAMESPACE_LOCK})"
# import_batch: as each writer of a namespace's rows, held off by a move out of it.
NOT_MOVING = f"SELECT pg_advisory_xact_lock_shared({NAMESPACE_LOCK})"

# move_namespace: all with %(old)s and %(new)s. A session may have one open turn per project.
OPEN_IN_BOTH = """
SELECT o.session_id FROM turns o JOIN turns n
    ON n.namespace = %(new)s AND n.session_id = o.session_id AND n.closed_at IS NULL
 WHERE o.namespace = %(old)s AND o.closed_at IS NULL
"""

# Besides the namespace: a moved vector takes this transaction's stamp, as migration
# 0003's trigger stamps a written one, or a vector cache of the new namespace, refreshed
# from its watermark, would never read it (the text stamp and the full-text row follow
# the namespace by trigger); a version's body holds its record.
_ALSO_SET = {
    "memory_records": ", embedded_xid = CASE WHEN embedding IS NULL THEN embedded_xid"
    " ELSE pg_current_xact_id()::text::bigint END",
    "record_history": ", body = jsonb_set(body, '{record,namespace}', to_jsonb(%(new)s::text))",
}
MOVE_ROWS = {
    kind: f"UPDATE {table} SET namespace = %(new)s{_ALSO_SET.get(table, '')}"
    " WHERE namespace = %(old)s"
    for kind, table in MOVED_TABLES.items()
}

# The per-project counts: an UPDATE of the namespace fires none of the triggers that keep
# them (migration 0013), so the old project's rows are added to the new one's, as their
# writes would have been, then dropped.
MERGE_COUNTS = (
    """INSERT INTO namespace_event_counts AS c
           (namespace, events, last_event_at, project_path, project_path_at)
    SELECT %(new)s, events, last_event_at, project_path, project_path_at
      FROM namespace_event_counts WHERE namespace = %(old)s
    ON CONFLICT (namespace) DO UPDATE SET
        events = c.events + excluded.events,
        last_event_at = greatest(c.last_event_at, excluded.last_event_at),
        project_path = CASE
            WHEN excluded.project_path_at >= coalesce(c.project_path_at, '-infinity')
            THEN excluded.project_path ELSE c.project_path END,
        project_path_at = greatest(c.project_path_at, excluded.project_path_at)""",
    """INSERT INTO namespace_record_counts AS c
           (namespace, memories, embedded, last_record_at, changes)
    SELECT %(new)s, memories, embedded, last_record_at, changes + 1 FROM namespace_record_counts
     WHERE namespace = %(old)s
    ON CONFLICT (namespace) DO UPDATE SET
        memories = c.memories + excluded.memories,
        embedded = c.embedded + excluded.embedded,
        last_record_at = greatest(c.last_record_at, excluded.last_record_at),
        changes = c.changes + excluded.changes""",
    """INSERT INTO retrieval_sessions AS s
    SELECT %(new)s, session_id, prompts, injected, records, bytes, latency_ms, first_at, last_at
      FROM retrieval_sessions WHERE namespace = %(old)s
    ON CONFLICT (namespace, session_id) DO UPDATE SET
        prompts = s.prompts + excluded.prompts,
        injected = s.injected + excluded.injected,
        records = s.records + excluded.records,
        bytes = s.bytes + excluded.bytes,
        latency_ms = s.latency_ms + excluded.latency_ms,
        first_at = least(s.first_at, excluded.first_at),
        last_at = greatest(s.last_at, excluded.last_at)""",
    "DELETE FROM namespace_event_counts WHERE namespace = %(old)s",
    "DELETE FROM namespace_record_counts WHERE namespace = %(old)s",
    "DELETE FROM retrieval_sessions WHERE namespace = %(old)s",
)

SET_PROJECT_PATH = """
INSERT INTO namespace_event_counts (namespace, events, project_path, project_path_at)
VALUES (%(new)s, 0, %(path)s, %(at)s)
ON CONFLICT (namespace) DO UPDATE SET
    project_path = excluded.project_path, project_path_at = excluded.project_path_at
"""

TRIMMABLE_TURNS = """
SELECT turn_id FROM turns
 WHERE extracted_at IS NOT NULL AND trimmed_at IS NULL AND extracted_at < %s
 ORDER BY extracted_at, turn_id
 LIMIT %s
"""

TRIM_EVENT_BODY = "UPDATE events SET body = %s WHERE event_id = %s AND turn_id = %s"

MARK_TRIMMED = "UPDATE turns SET trimmed_at = %s WHERE turn_id = %s"

EXPIRABLE_TURNS = """
SELECT turn_id FROM turns WHERE trimmed_at IS NOT NULL AND extracted_at < %s
ORDER BY extracted_at, turn_id LIMIT %s
FOR UPDATE SKIP LOCKED
"""

# Events first (they reference their turn); their retrieval rows go with them (CASCADE).
EXPIRE_EVENTS = "DELETE FROM events WHERE turn_id = ANY(%s)"

EXPIRE_TURNS = "DELETE FROM turns WHERE turn_id = ANY(%s)"

# wakemark's tables in the schema it runs in (the first of search_path), with the roles
# allowed to vacuum them: the owner (or a member of its role) and superusers.
DATABASE_BYTES = """
SELECT coalesce(sum(pg_total_relation_size(c.oid)), 0)::bigint FROM pg_class c
 WHERE c.relkind = 'r' AND c.relnamespace = current_schema()::regnamespace
"""

TABLE_SIZES = """
SELECT c.relname, pg_total_relation_size(c.oid), pg_has_role(c.relowner, 'USAGE')
  FROM pg_class c
 WHERE c.relkind = 'r' AND c.relnamespace = current_schema()::regnamespace
 ORDER BY 2 DESC
"""

EVENT_BYTES = "SELECT namespace, count(*), sum(octet_length(body)) FROM events GROUP BY namespace"

RECORD_BYTES = """
SELECT namespace, count(*),
       sum(octet_length(title) + octet_length(summary)
           + octet_length(array_to_string(facts, '')) + octet_length(array_to_string(concepts, ''))
           + octet_length(array_to_string(files_touched, ''))
           + coalesce(vector_dims(embedding) * 4, 0))
  FROM memory_records GROUP BY namespace
"""


class PostgresUpkeep(PostgresBase):
    def export_records(
        self, namespace: str | None, after: str | None, limit: int, vectors: bool
    ) -> list[tuple[MemoryRecord, np.ndarray | None]]:
        params = {
            "ns": lexical.namespace_pattern(namespace),
            "after": after or "",
            "limit": limit,
            "vectors": vectors,
        }
        with self._db.connection() as conn:
            rows = conn.execute(EXPORT_RECORDS, params).fetchall()
        return [(memory_record(r[:-1]), None if r[-1] is None else r[-1].to_numpy()) for r in rows]

    def export_turns(
        self, namespace: str | None, after: str | None, limit: int
    ) -> list[tuple[TurnRow, list[StoredEvent]]]:
        params = {"ns": lexical.namespace_pattern(namespace), "after": after or "", "limit": limit}
        with self._db.connection() as conn, conn.transaction():
            conn.execute(REPEATABLE_READ)  # the turns and their events from one snapshot
            rows = conn.execute(EXPORT_TURNS, params).fetchall()
            events = conn.execute(TURNS_EVENTS, ([r[0] for r in rows],)).fetchall()
        by_turn: dict[str, list[StoredEvent]] = {}
        for e in events:
            event = stored_event(e)
            by_turn.setdefault(str(event.turn_id), []).append(event)
        out = []
        for tid, ns, session, opened, last, closed, extracted, record_ids, skip, repeat in rows:
            row = TurnRow(
                tid, ns, session, opened, last, closed, extracted, list(record_ids), skip, repeat
            )
            out.append((row, by_turn.get(tid, [])))
        return out

    def import_batch(self, batch: ImportBatch, commit: bool = True) -> ImportCounts:
        changed: set[str] = set()
        with self._db.connection() as conn, conn.transaction():
            records = vectors = 0
            keep = True
            if any(vector is not None for _, vector in batch.records):
                # First, as every writer of vectors (the swap takes it, then the records'
                # lock): held shared until commit, so no swap commits meanwhile.
                stored = (conn.execute(MODELS_SHARED).fetchone() or (None,))[0]
                keep = kept_model(stored, batch.model)
            # Wait for a move out of a namespace the batch writes: it merges that
            # namespace's counts, then deletes them, and rows landing in between would
            # be left uncounted (or split, between its UPDATEs). Sorted, and before the
            # records' lock, as the move and the event writers take theirs: no deadlock.
            written = {r.namespace for r, _ in batch.records} | {t.namespace for t in batch.turns}
            written |= {a.namespace for a in batch.anchors.values()}
            for namespace in sorted(written | {e.namespace for e in batch.events}):
                conn.execute(NOT_MOVING, {"namespace": namespace})
            if batch.records:
                conn.execute(LOCK_RECORDS)  # as PostgresTxBase: records are added
            for record, vector in batch.records:
                embedding = None if vector is None or not keep else check_vector(vector)
                params = {
                    **record_fields(record),
                    "edited_at": record.edited_at,
                    "embedding": embedding,
                }
                if conn.execute(IMPORT_RECORD, params).fetchone():
                    records += 1
                    if record.record_id in batch.anchors:
                        anchors = batch.anchors[record.record_id]
                        conn.execute(anchors_sql.PUT_ANCHORS, anchors_sql.put_params(anchors))
                    if embedding is not None:
                        vectors += 1
                        changed.add(record.namespace)
            with conn.cursor() as cur:
                # executemany pipelines the statements; rowcount sums their rows.
                cur.executemany(IMPORT_TURN, [asdict(t) for t in batch.turns])
                turns_written = max(cur.rowcount, 0)
                events = insert_events(
                    cur,
                    [{**event_params(e, e.transaction_time), "turn_id": e.turn_id}
                     for e in batch.events],
                )  # fmt: skip
            counts = ImportCounts(records, vectors, turns_written, events)
            if not commit:
                raise psycopg.Rollback()  # leaves the block, rolled back, without raising
        if not commit:
            return counts
        if changed and self._on_change is not None:
            self._on_change(changed)
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
        params = {"old": old, "new": new}
        try:
            with self._db.connection() as conn, conn.transaction():
                # Writers into ``new`` are not held off (the agent works there, and would
                # wait the whole move): their counts add to the merged ones, and a turn
                # opened in both is refused below. Both locks first, in this order: a
                # writer of events takes the records' lock after its own, if at all.
                conn.execute(MOVING, {"namespace": old})
                conn.execute(LOCK_RECORDS)  # as PostgresTxBase: the records' index rows move
                clash = [r[0] for r in conn.execute(OPEN_IN_BOTH, params).fetchall()]
                if clash:
                    raise open_in_both(clash)
                moved = {
                    kind: conn.execute(sql, params).rowcount for kind, sql in MOVE_ROWS.items()
                }
                if not any(moved.values()):
                    raise NotFoundError(f"nothing stored under {old}")
                for sql in MERGE_COUNTS:
                    conn.execute(sql, params)
                if project_path is not None:
                    conn.execute(
                        SET_PROJECT_PATH, {"new": new, "path": project_path, "at": utcnow()}
                    )
                if audit is not None:
                    conn.execute(INSERT_AUDIT, audit.row())
                if not commit:
                    raise psycopg.Rollback()  # leaves the block, rolled back, without raising
        except psycopg.errors.UniqueViolation:
            # A turn opened in both since the check above.
            raise open_in_both([]) from None
        if commit and self._on_change is not None:
            self._on_change({old, new})
        return moved

    def trimmable_turns(self, extracted_before: datetime, limit: int) -> list[str]:
        with self._db.connection() as conn:
            rows = conn.execute(TRIMMABLE_TURNS, (extracted_before, limit)).fetchall()
        return [r[0] for r in rows]

    def trim_turns(self, bodies: Mapping[str, Mapping[str, str]]) -> int:
        now = utcnow()
        updates = [(b, e, t) for t, events in bodies.items() for e, b in events.items()]
        with self._db.connection() as conn, conn.transaction(), conn.cursor() as cur:
            changed = 0
            if updates:
                cur.executemany(TRIM_EVENT_BODY, updates)
                changed = max(cur.rowcount, 0)
            cur.executemany(MARK_TRIMMED, [(now, t) for t in bodies])
        return changed

    def expire_turns(self, extracted_before: datetime, limit: int) -> tuple[int, int]:
        with self._db.connection() as conn, conn.transaction():
            rows = conn.execute(EXPIRABLE_TURNS, (extracted_before, limit)).fetchall()
            ids = [r[0] for r in rows]
            events = conn.execute(EXPIRE_EVENTS, (ids,)).rowcount
            return conn.execute(EXPIRE_TURNS, (ids,)).rowcount, events

    def merge_indexes(self) -> None:
        return None  # GIN and trigram indexes drop dead entries when (auto)vacuum runs

    def compact(self) -> list[str]:
        lines: list[str] = []
        with self._db.connection() as conn:  # autocommit: VACUUM refuses a transaction
            allowed = {name: ok for name, _, ok in conn.execute(TABLE_SIZES).fetchall()}
            for table in BIG_TABLES:
                if table not in allowed:
                    continue
                if not allowed[table]:
                    lines.append(
                        f"not the owner of {table}: ask its owner (or a superuser) to run"
                        f" VACUUM (ANALYZE) {table}; autovacuum reuses the space meanwhile"
                    )
                    continue
                conn.execute(sql.SQL("VACUUM (ANALYZE) {}").format(sql.Identifier(table)))
                lines.append(f"VACUUM (ANALYZE) {table}")
        lines.append(
            "Postgres reuses the space VACUUM frees for new rows; VACUUM FULL returns it to"
            " the operating system but locks the table while it rewrites it"
        )
        return lines

    def disk_usage(self) -> DiskUsage:
        with self._db.connection() as conn:
            sizes = conn.execute(TABLE_SIZES).fetchall()
            events = conn.execute(EVENT_BYTES).fetchall()
            records = conn.execute(RECORD_BYTES).fetchall()
        tables = {name: int(size) for name, size, _ in sizes}
        return DiskUsage(sum(tables.values()), tables, columns.project_sizes(events, records))

    def database_bytes(self) -> int:
        with self._db.connection() as conn:
            row = conn.execute(DATABASE_BYTES).fetchone()
        return int(row[0]) if row else 0

    def stats(self, namespace: str | None = None) -> dict[str, int]:
        with self._db.connection() as conn:
            row = conn.execute(STATS, {"ns": lexical.namespace_pattern(namespace)}).fetchone()
        keys = ("events", "memories", "embedded", "pending_extraction", "pending_embedding")
        return dict(zip(keys, row or (0,) * len(keys), strict=True))

    def skipped_turns(self) -> dict[str, int]:
        with self._db.connection() as conn:
            return {reason: int(n) for reason, n in conn.execute(SKIPPED_TURNS).fetchall()}

    def projects(self) -> list[dict[str, Any]]:
        with self._db.connection() as conn:
            rows = conn.execute(PROJECTS).fetchall()
        projects = []
        for ns, path, events, memories, last in rows:
            project_id = ns.rstrip("/").rsplit("/", 1)[-1]
            projects.append(
                {
                    "namespace": ns,
                    "project_id": project_id,
                    "display_name": (_basename(path) if path else None) or project_id,
                    "project_path": path,
                    "event_count": events,
                    "memory_count": memories,
                    "last_activity": last,
                }
            )
        return projects


# The tables that grow (``compact`` vacuums them); the others hold a few rows each.
BIG_TABLES = ("events", "turns", "memory_records", "memory_fts", "lexeme_df")


def _basename(path: str) -> str | None:
    # Hooks on Windows send backslash paths; either separator ends a component.
    return path.replace("\\", "/").rstrip("/").rsplit("/", 1)[-1] or None

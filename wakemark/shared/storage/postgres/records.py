"""Memory records of the Postgres backend."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from wakemark.shared.models import NAMESPACE_RE, MemoryRecord, utcnow
from wakemark.shared.storage import lexical
from wakemark.shared.storage.errors import DuplicateRecordError, NotFoundError
from wakemark.shared.storage.fields import record_fields
from wakemark.shared.storage.ports.records import MemoryFilter, Page, PageKey
from wakemark.shared.storage.postgres.base import (
    LOCK_RECORDS,
    NS,
    PostgresBase,
    PostgresTxBase,
)
from wakemark.shared.storage.postgres.rows import memory_record

_WRITTEN_COLUMNS = (
    "record_id, namespace, title, summary, facts, concepts, files_touched, observation_type,"
    " source_event_ids, strategy, quality, pinned, created_at"
)

RECORD_COLUMNS = _WRITTEN_COLUMNS + ", edited_at"

# No edited_at: a record is written unedited; only EDIT_RECORD sets it.
INSERT_RECORD = f"""
INSERT INTO memory_records ({_WRITTEN_COLUMNS})
VALUES (%(record_id)s, %(namespace)s, %(title)s, %(summary)s, %(facts)s, %(concepts)s,
        %(files_touched)s, %(observation_type)s, %(source_event_ids)s, %(strategy)s,
        %(quality)s, %(pinned)s, %(created_at)s)
ON CONFLICT (record_id) DO NOTHING
RETURNING record_id
"""

REPLACE_RECORD_TEXT = """
UPDATE memory_records SET title = %(title)s, summary = %(summary)s, facts = %(facts)s,
       concepts = %(concepts)s, files_touched = %(files_touched)s, embedding = NULL,
       embedding_staged = NULL
 WHERE record_id = %(record_id)s
RETURNING namespace
"""

DELETE_RECORDS = """
DELETE FROM memory_records WHERE record_id = ANY(%s::text[]) RETURNING record_id, namespace
"""

GET_RECORD = f"SELECT {RECORD_COLUMNS} FROM memory_records WHERE record_id = %s"

GET_RECORDS = f"SELECT {RECORD_COLUMNS} FROM memory_records WHERE record_id = ANY(%s::text[])"

COUNT_RECORDS = f"""
SELECT coalesce(sum(memories), 0)::bigint FROM namespace_record_counts WHERE namespace {NS}
"""

# A page of records, keyed (pinned first, one full namespace, after a page key). For one
# namespace the order comes straight off memory_records_namespace_recent / _pinned_first
# (migration 0005) and a page key is a seek into it; a prefix spanning namespaces sorts
# what it matched.
_KEYS = {False: "created_at, record_id", True: "pinned, created_at, record_id"}

_AFTER = {
    False: "%(after_at)s, %(after_id)s",
    True: "%(after_pinned)s, %(after_at)s, %(after_id)s",
}

LIST_RECORDS = {
    (pinned, exact, keyset): f"""
SELECT {RECORD_COLUMNS} FROM memory_records
 WHERE {"namespace = %(exact)s" if exact else "namespace " + NS}
 {f"AND ({_KEYS[pinned]}) < ({_AFTER[pinned]})" if keyset else ""}
 ORDER BY {_KEYS[pinned].replace(",", " DESC,")} DESC
 LIMIT %(limit)s
"""
    for pinned in (False, True)
    for exact in (False, True)
    for keyset in (False, True)
}

SET_PINNED = f"""
UPDATE memory_records SET pinned = %s WHERE record_id = %s RETURNING {RECORD_COLUMNS}
"""

# A None field is left as it is; the trigger re-indexes the full-text entry.
EDIT_RECORD = f"""
UPDATE memory_records
   SET title = coalesce(%(title)s, title),
       summary = coalesce(%(summary)s, summary),
       facts = coalesce(%(facts)s::text[], facts),
       edited_at = %(now)s,
       embedding = NULL,
       embedding_staged = NULL
 WHERE record_id = %(record_id)s
RETURNING {RECORD_COLUMNS}
"""

FIND_RECORDS = f"""
SELECT r.record_id FROM memory_records r
 WHERE r.namespace {NS}
   AND (%(type)s::text IS NULL OR r.observation_type = %(type)s)
   AND (%(before)s::timestamptz IS NULL OR r.created_at < %(before)s)
   AND (%(after)s::timestamptz IS NULL OR r.created_at >= %(after)s)
   AND (%(pinned)s::boolean IS NULL OR r.pinned = %(pinned)s)
   AND (%(session_id)s::text IS NULL OR EXISTS (
         SELECT 1 FROM events e
          WHERE e.event_id = ANY(r.source_event_ids) AND e.session_id = %(session_id)s))
 ORDER BY r.created_at, r.record_id
"""

TIMELINE_BEFORE = f"""
SELECT {RECORD_COLUMNS} FROM memory_records
 WHERE namespace = %(namespace)s AND (created_at, record_id) < (%(created_at)s, %(record_id)s)
 ORDER BY created_at DESC, record_id DESC
 LIMIT %(n)s
"""

TIMELINE_AFTER = f"""
SELECT {RECORD_COLUMNS} FROM memory_records
 WHERE namespace = %(namespace)s AND (created_at, record_id) > (%(created_at)s, %(record_id)s)
 ORDER BY created_at, record_id
 LIMIT %(n)s
"""


class PostgresRecordsTx(PostgresTxBase):
    def put_memory_record(self, record: MemoryRecord) -> None:
        self._lock_records()
        # ON CONFLICT DO NOTHING rather than catching the unique violation: the
        # transaction stays usable if the caller handles the error.
        if self.conn.execute(INSERT_RECORD, record_fields(record)).fetchone() is None:
            raise DuplicateRecordError(f"memory record {record.record_id} already exists")

    def delete_memory_records(self, record_ids: Sequence[str]) -> list[str]:
        self._lock_records()
        rows = self.conn.execute(DELETE_RECORDS, (list(record_ids),)).fetchall()
        self.changed.update(ns for _, ns in rows)
        gone = {rid for rid, _ in rows}
        return [rid for rid in dict.fromkeys(record_ids) if rid in gone]

    def replace_record_text(self, record: MemoryRecord) -> None:
        self._lock_records()  # the FTS trigger updates lexeme_df: see PostgresTxBase
        row = self.conn.execute(REPLACE_RECORD_TEXT, record_fields(record)).fetchone()
        if row is None:
            raise NotFoundError(f"memory record {record.record_id} does not exist")
        self.changed.add(row[0])


class PostgresRecords(PostgresBase):
    def get_memory_record(self, record_id: str) -> MemoryRecord | None:
        with self._db.connection() as conn:
            row = conn.execute(GET_RECORD, (record_id,)).fetchone()
        return memory_record(row) if row else None

    def get_memory_records(self, record_ids: Sequence[str]) -> list[MemoryRecord]:
        with self._db.connection() as conn:
            rows = conn.execute(GET_RECORDS, (list(record_ids),)).fetchall()
        by_id = {r[0]: memory_record(r) for r in rows}
        return [by_id[rid] for rid in record_ids if rid in by_id]

    def list_memory_records(
        self,
        namespace: str,
        limit: int = 50,
        after: PageKey | None = None,
        pinned_first: bool = False,
        count: bool = True,
    ) -> Page:
        ns = lexical.namespace_pattern(namespace)
        exact = NAMESPACE_RE.fullmatch(namespace) is not None
        params: dict[str, Any] = {"ns": ns, "exact": namespace, "limit": limit}
        if after is not None:
            params.update(
                after_at=after.created_at, after_id=after.record_id, after_pinned=after.pinned
            )
        total: int | None = None
        # No transaction around the two: under READ COMMITTED each statement takes its
        # own snapshot anyway, and BEGIN and COMMIT cost a round trip each.
        with self._db.connection() as conn:
            sql = LIST_RECORDS[pinned_first, exact, after is not None]
            rows = conn.execute(sql, params).fetchall()
            if count:
                row = conn.execute(COUNT_RECORDS, {"ns": ns}).fetchone()
                total = row[0] if row else 0
        return Page.of([memory_record(r) for r in rows], total, limit)

    def set_pinned(self, record_id: str, pinned: bool) -> MemoryRecord:
        with self._db.connection() as conn:
            row = conn.execute(SET_PINNED, (pinned, record_id)).fetchone()
        if row is None:
            raise NotFoundError(f"memory record {record_id} does not exist")
        return memory_record(row)

    def edit_memory_record(
        self,
        record_id: str,
        title: str | None = None,
        summary: str | None = None,
        facts: Sequence[str] | None = None,
    ) -> MemoryRecord:
        params = {
            "record_id": record_id,
            "title": title,
            "summary": summary,
            "facts": None if facts is None else list(facts),
            "now": utcnow(),
        }
        with self._db.connection() as conn, conn.transaction():
            conn.execute(LOCK_RECORDS)  # the edit rewrites lexeme_df rows (PostgresTxBase)
            row = conn.execute(EDIT_RECORD, params).fetchone()
        if row is None:
            raise NotFoundError(f"memory record {record_id} does not exist")
        record = memory_record(row)
        if self._on_change is not None:  # its vector is gone: caches must drop it
            self._on_change({record.namespace})
        return record

    def find_memory_ids(self, where: MemoryFilter) -> list[str]:
        params = {
            "ns": lexical.namespace_pattern(where.namespace),
            "type": where.observation_type,
            "before": where.before,
            "after": where.after,
            "session_id": where.session_id,
            "pinned": where.pinned,
        }
        with self._db.connection() as conn:
            return [r[0] for r in conn.execute(FIND_RECORDS, params).fetchall()]

    def timeline(self, record_id: str, before: int, after: int) -> list[MemoryRecord]:
        with self._db.connection() as conn, conn.transaction():
            row = conn.execute(GET_RECORD, (record_id,)).fetchone()
            if row is None:
                raise NotFoundError(f"memory record {record_id} does not exist")
            center = memory_record(row)
            key = {"namespace": center.namespace, "created_at": center.created_at}
            key["record_id"] = record_id
            earlier = conn.execute(TIMELINE_BEFORE, {**key, "n": max(before, 0)}).fetchall()
            later = conn.execute(TIMELINE_AFTER, {**key, "n": max(after, 0)}).fetchall()
        return [*(memory_record(r) for r in reversed(earlier)), center, *map(memory_record, later)]

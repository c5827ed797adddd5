"""Memory records of the SQLite backend."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Sequence
from typing import Any

from wakemark.shared.models import NAMESPACE_RE, MemoryRecord, utcnow
from wakemark.shared.storage import lexical
from wakemark.shared.storage.errors import DuplicateRecordError, NotFoundError
from wakemark.shared.storage.ports.records import MemoryFilter, Page, PageKey
from wakemark.shared.storage.sqlite import codec
from wakemark.shared.storage.sqlite.base import NS, R_NS, SqliteBase, SqliteTxBase, snapshot

# Every column but the id and the embedding: what a MemoryRecord is built from.
RECORD_COLUMNS = """record_id, namespace, title, summary, facts, concepts, files_touched,
observation_type, source_event_ids, strategy, quality, pinned, created_at, edited_at"""

# No edited_at: a record is written unedited; only EDIT_RECORD sets it.
INSERT_RECORD = """
INSERT INTO memory_records (record_id, namespace, title, summary, facts, facts_text, concepts,
    files_touched, observation_type, source_event_ids, strategy, quality, pinned, created_at)
VALUES (:record_id, :namespace, :title, :summary, :facts, :facts_text, :concepts,
    :files_touched, :observation_type, :source_event_ids, :strategy, :quality, :pinned,
    :created_at)
"""

RECORD_EXISTS = "SELECT 1 FROM memory_records WHERE record_id = ?"

REPLACE_RECORD_TEXT = """
UPDATE memory_records SET title = :title, summary = :summary, facts = :facts,
    facts_text = :facts_text, concepts = :concepts, files_touched = :files_touched,
    embedding = NULL, embedding_staged = NULL
WHERE record_id = :record_id RETURNING namespace
"""

DELETE_RECORDS = """
DELETE FROM memory_records WHERE record_id IN (SELECT value FROM json_each(?))
RETURNING record_id, namespace
"""

GET_RECORD = "SELECT * FROM memory_records WHERE record_id = ?"

GET_RECORDS = "SELECT * FROM memory_records WHERE record_id IN (SELECT value FROM json_each(?))"

COUNT_RECORDS = f"SELECT coalesce(sum(memories), 0) FROM namespace_record_counts WHERE {NS}"

# A page of records, keyed (pinned first, one full namespace, after a page key). For one
# namespace the order comes straight off memory_by_namespace / memory_pinned_first
# (migration 0004) and a page key is a seek into it; a prefix spanning namespaces sorts
# what it matched.
_KEYS = {False: "created_at, record_id", True: "pinned, created_at, record_id"}

_AFTER = {False: ":after_at, :after_id", True: ":after_pinned, :after_at, :after_id"}

LIST_RECORDS = {
    (pinned, exact, keyset): f"""
SELECT * FROM memory_records WHERE {"namespace = :ns_lo" if exact else NS}
{f"AND ({_KEYS[pinned]}) < ({_AFTER[pinned]})" if keyset else ""}
ORDER BY {_KEYS[pinned].replace(",", " DESC,")} DESC LIMIT :limit
"""
    for pinned in (False, True)
    for exact in (False, True)
    for keyset in (False, True)
}

SET_PINNED = "UPDATE memory_records SET pinned = ? WHERE record_id = ? RETURNING *"

# A None field is left as it is; the update trigger re-indexes the full-text entry.
EDIT_RECORD = """
UPDATE memory_records SET
  title = coalesce(:title, title),
  summary = coalesce(:summary, summary),
  facts = coalesce(:facts, facts),
  facts_text = coalesce(:facts_text, facts_text),
  edited_at = :now,
  embedding = NULL,
  embedding_staged = NULL
WHERE record_id = :record_id RETURNING *
"""

FIND_RECORDS = f"""
SELECT r.record_id FROM memory_records r
WHERE {R_NS}
  AND (:observation_type IS NULL OR r.observation_type = :observation_type)
  AND (:before IS NULL OR r.created_at < :before)
  AND (:after IS NULL OR r.created_at >= :after)
  AND (:pinned IS NULL OR r.pinned = :pinned)
  AND (:session_id IS NULL OR EXISTS (
        SELECT 1 FROM json_each(r.source_event_ids) j JOIN events e ON e.event_id = j.value
        WHERE e.session_id = :session_id))
ORDER BY r.created_at, r.record_id
"""

TIMELINE_BEFORE = """
SELECT * FROM memory_records
WHERE namespace = :namespace AND (created_at, record_id) < (:created_at, :record_id)
ORDER BY created_at DESC, record_id DESC LIMIT :n
"""

TIMELINE_AFTER = """
SELECT * FROM memory_records
WHERE namespace = :namespace AND (created_at, record_id) > (:created_at, :record_id)
ORDER BY created_at, record_id LIMIT :n
"""


class SqliteRecordsTx(SqliteTxBase):
    def put_memory_record(self, record: MemoryRecord) -> None:
        try:
            self.conn.execute(INSERT_RECORD, codec.record_params(record))
        except sqlite3.IntegrityError as exc:
            if self.conn.execute(RECORD_EXISTS, (record.record_id,)).fetchone():
                raise DuplicateRecordError(f"record {record.record_id} already exists") from exc
            raise

    def delete_memory_records(self, record_ids: Sequence[str]) -> list[str]:
        rows = self.conn.execute(DELETE_RECORDS, (json.dumps(list(record_ids)),)).fetchall()
        self.changed.update(r["namespace"] for r in rows)
        deleted = {r["record_id"] for r in rows}
        return [rid for rid in dict.fromkeys(record_ids) if rid in deleted]

    def replace_record_text(self, record: MemoryRecord) -> None:
        row = self.conn.execute(REPLACE_RECORD_TEXT, codec.record_params(record)).fetchone()
        if row is None:
            raise NotFoundError(f"no memory record {record.record_id}")
        self.changed.add(row["namespace"])


class SqliteRecords(SqliteBase):
    def get_memory_record(self, record_id: str) -> MemoryRecord | None:
        rows = self._read(GET_RECORD, (record_id,))
        return codec.to_record(rows[0]) if rows else None

    def get_memory_records(self, record_ids: Sequence[str]) -> list[MemoryRecord]:
        rows = self._read(GET_RECORDS, (json.dumps(list(record_ids)),))
        by_id = {r["record_id"]: codec.to_record(r) for r in rows}
        return [by_id[rid] for rid in record_ids if rid in by_id]

    def list_memory_records(
        self,
        namespace: str,
        limit: int = 50,
        after: PageKey | None = None,
        pinned_first: bool = False,
        count: bool = True,
    ) -> Page:
        ns = lexical.namespace_range(namespace)
        exact = NAMESPACE_RE.fullmatch(ns["ns_lo"]) is not None
        sql = LIST_RECORDS[pinned_first, exact, after is not None]
        params: dict[str, Any] = {**ns, "limit": limit}
        if after is not None:
            params.update(
                after_at=codec.ts(after.created_at),
                after_id=after.record_id,
                after_pinned=int(after.pinned),
            )
        conn = self._conns.get()
        with snapshot(conn):  # the page and its total from one snapshot
            rows = conn.execute(sql, params).fetchall()
            total = conn.execute(COUNT_RECORDS, ns).fetchone()[0] if count else None
        return Page.of([codec.to_record(r) for r in rows], total, limit)

    def set_pinned(self, record_id: str, pinned: bool) -> MemoryRecord:
        with self._conns.write() as conn:
            row = conn.execute(SET_PINNED, (int(pinned), record_id)).fetchone()
        if row is None:
            raise NotFoundError(f"no memory record {record_id}")
        return codec.to_record(row)

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
            "facts": None if facts is None else json.dumps(list(facts)),
            "facts_text": None if facts is None else "\n".join(facts),
            "now": codec.ts(utcnow()),
        }
        with self._conns.write() as conn:
            row = conn.execute(EDIT_RECORD, params).fetchone()
        if row is None:
            raise NotFoundError(f"no memory record {record_id}")
        self._notify({row["namespace"]})  # its vector is gone: caches must drop it
        return codec.to_record(row)

    def find_memory_ids(self, where: MemoryFilter) -> list[str]:
        params = {
            **lexical.namespace_range(where.namespace),
            "observation_type": where.observation_type,
            "before": codec.ts(where.before) if where.before else None,
            "after": codec.ts(where.after) if where.after else None,
            "session_id": where.session_id,
            "pinned": None if where.pinned is None else int(where.pinned),
        }
        return [r[0] for r in self._read(FIND_RECORDS, params)]

    def timeline(self, record_id: str, before: int, after: int) -> list[MemoryRecord]:
        record = self.get_memory_record(record_id)
        if record is None:
            raise NotFoundError(f"no memory record {record_id}")
        params = {
            "namespace": record.namespace,
            "created_at": codec.ts(record.created_at),
            "record_id": record_id,
        }
        older = self._read(TIMELINE_BEFORE, {**params, "n": max(before, 0)})
        newer = self._read(TIMELINE_AFTER, {**params, "n": max(after, 0)})
        return [
            *(codec.to_record(r) for r in reversed(older)),
            record,
            *(codec.to_record(r) for r in newer),
        ]

"""Record history of the SQLite backend."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Sequence
from datetime import datetime

import numpy as np

from wakemark.shared.models import MemoryRecord
from wakemark.shared.storage import history_codec, lexical
from wakemark.shared.storage.errors import NotFoundError
from wakemark.shared.storage.ports.history import Version
from wakemark.shared.storage.sqlite import codec
from wakemark.shared.storage.sqlite.base import NS, SqliteBase, SqliteTxBase

NAMESPACE_EMBEDDINGS = """
SELECT record_id, embedding FROM memory_records
WHERE namespace = ? AND embedding IS NOT NULL
"""

GET_RECORDS = "SELECT * FROM memory_records WHERE record_id IN (SELECT value FROM json_each(?))"

SESSION_TURN_RECORDS = """
SELECT p.record_ids, p.repeat_of FROM turns t JOIN turns p
    ON p.session_id = t.session_id AND p.namespace = t.namespace
   AND (p.opened_at < t.opened_at OR (p.opened_at = t.opened_at AND p.turn_id < t.turn_id))
 WHERE t.turn_id = ? ORDER BY p.opened_at DESC, p.turn_id DESC LIMIT ?
"""

# Each record, or the current record of the chain it is a version of, in the order asked.
CURRENT_OF = """
SELECT m.* FROM json_each(?) j JOIN memory_records m ON m.record_id = coalesce(
       (SELECT current_id FROM record_history WHERE record_id = j.value), j.value)
 WHERE m.embedding IS NOT NULL ORDER BY j.key
"""

# The versions of one current record among the records asked, with a vector of the
# stored model.
VERSIONS_OF = """
SELECT record_id, body, embedding FROM record_history
 WHERE record_id IN (SELECT value FROM json_each(?)) AND current_id = ?
   AND embedding IS NOT NULL
   AND embedding_model = (SELECT model FROM embedding_model WHERE id = 1)
"""

# Before the record leaves memory_records: its version keeps its vector and its model.
KEEP_VECTOR = """
UPDATE record_history
   SET embedding = (SELECT embedding FROM memory_records WHERE record_id = ?),
       embedding_model = (SELECT model FROM embedding_model WHERE id = 1)
 WHERE record_id = ?
"""

GET_RECORD = "SELECT * FROM memory_records WHERE record_id = ?"

GET_ANCHORS = "SELECT body FROM code_anchors WHERE record_id = ?"

PUT_VERSION = """
INSERT INTO record_history (record_id, current_id, superseded_by, namespace, superseded_at, body)
VALUES (:record_id, :current_id, :superseded_by, :namespace, :superseded_at, :body)
ON CONFLICT (record_id) DO UPDATE SET current_id = excluded.current_id,
    superseded_by = excluded.superseded_by, namespace = excluded.namespace,
    superseded_at = excluded.superseded_at, body = excluded.body
"""

FOLLOW = "UPDATE record_history SET current_id = ? WHERE current_id = ?"

TAKE_VERSION = "DELETE FROM record_history WHERE record_id = ? RETURNING *"

MOVE_VERSIONS = """
UPDATE record_history SET current_id = ?
WHERE record_id IN (SELECT value FROM json_each(?))
"""

DELETE_RECORD = "DELETE FROM memory_records WHERE record_id = ?"

_COLUMNS = "record_id, current_id, superseded_by, namespace, superseded_at, body"

GET_HISTORY = f"""
SELECT {_COLUMNS} FROM record_history WHERE current_id = ?
ORDER BY superseded_at DESC, record_id DESC
"""

GET_VERSION = f"SELECT {_COLUMNS} FROM record_history WHERE record_id = ?"

LIST_VERSIONS = f"""
SELECT {_COLUMNS} FROM record_history
WHERE {NS} AND record_id > :after ORDER BY record_id LIMIT :limit
"""


class SqliteHistoryTx(SqliteTxBase):
    def lock_subjects(self, namespace: str) -> None:
        """Nothing to take: a write transaction holds the database's write lock from its
        BEGIN IMMEDIATE, so writers already take turns."""

    def subject_neighbours(
        self, namespace: str, vectors: np.ndarray, limit: int
    ) -> list[list[tuple[MemoryRecord, float]]]:
        # No vector index here: one exact scan of the namespace serves every vector.
        rows = self.conn.execute(NAMESPACE_EMBEDDINGS, (namespace,)).fetchall()
        ids = [r["record_id"] for r in rows]
        matrix = codec.decode_embeddings([r["embedding"] for r in rows], ids)
        best = history_codec.nearest(ids, matrix, vectors, limit)
        wanted = sorted({i for row in best for i, _ in row})
        found = self.conn.execute(GET_RECORDS, (json.dumps(wanted),))
        by_id = {r["record_id"]: codec.to_record(r) for r in found.fetchall()}
        return [[(by_id[i], cosine) for i, cosine in row if i in by_id] for row in best]

    def _recent_ids(self, turn_id: str, lookback: int) -> list[str]:
        turns = self.conn.execute(SESSION_TURN_RECORDS, (turn_id, lookback)).fetchall()
        return history_codec.recent_ids(
            [(json.loads(t["record_ids"]), t["repeat_of"]) for t in turns]
        )

    def session_recent(
        self, turn_id: str, vector: np.ndarray, lookback: int
    ) -> list[tuple[MemoryRecord, float]]:
        ids = self._recent_ids(turn_id, lookback)
        if not ids:
            return []
        found: dict[str, sqlite3.Row] = {}
        for row in self.conn.execute(CURRENT_OF, (json.dumps(ids),)).fetchall():
            found.setdefault(row["record_id"], row)
        if not found:
            return []
        rows = list(found.values())
        matrix = codec.decode_embeddings([r["embedding"] for r in rows], list(found))
        cosine = dict(history_codec.nearest(list(found), matrix, vector, len(rows))[0])
        return [(codec.to_record(r), cosine[r["record_id"]]) for r in rows]

    def session_versions(
        self, turn_id: str, current_id: str, vector: np.ndarray, lookback: int
    ) -> list[tuple[MemoryRecord, float]]:
        ids = self._recent_ids(turn_id, lookback)
        if not ids:
            return []
        rows = self.conn.execute(VERSIONS_OF, (json.dumps(ids), current_id)).fetchall()
        if not rows:
            return []
        found = [r["record_id"] for r in rows]
        matrix = codec.decode_embeddings([r["embedding"] for r in rows], found)
        near = history_codec.nearest(found, matrix, vector, len(rows))[0]
        versions = {
            r["record_id"]: MemoryRecord.model_validate(json.loads(r["body"])["record"])
            for r in rows
        }
        return history_codec.best_first([(versions[i], cosine) for i, cosine in near])

    def supersede(self, old_id: str, new_id: str, at: datetime) -> bool:
        row = self.conn.execute(GET_RECORD, (old_id,)).fetchone()
        if row is None or old_id == new_id:
            return False
        old = codec.to_record(row)
        found = self.conn.execute(GET_ANCHORS, (old_id,)).fetchone()
        anchors = None if found is None else json.loads(found[0])
        self.conn.execute(FOLLOW, (new_id, old_id))
        self.put_version(history_codec.superseded(old, anchors, new_id, at))
        self.conn.execute(KEEP_VECTOR, (old_id, old_id))
        self.conn.execute(DELETE_RECORD, (old_id,))
        self.changed.add(old.namespace)
        return True

    def put_version(self, version: Version) -> None:
        row = history_codec.row(version)
        params = {
            **row,
            "superseded_at": codec.ts(row["superseded_at"]),
            "body": json.dumps(row["body"]),
        }
        try:
            self.conn.execute(PUT_VERSION, params)
        except sqlite3.IntegrityError as exc:
            raise NotFoundError(f"no memory record {version.current_id}") from exc

    def take_version(self, record_id: str) -> Version | None:
        row = self.conn.execute(TAKE_VERSION, (record_id,)).fetchone()
        return None if row is None else _version(row)

    def move_versions(self, record_ids: Sequence[str], current_id: str) -> None:
        self.conn.execute(MOVE_VERSIONS, (current_id, json.dumps(list(record_ids))))


class SqliteHistory(SqliteBase):
    def get_history(self, record_id: str) -> list[Version]:
        return [_version(r) for r in self._read(GET_HISTORY, (record_id,))]

    def get_version(self, record_id: str) -> Version | None:
        rows = self._read(GET_VERSION, (record_id,))
        return _version(rows[0]) if rows else None

    def list_versions(
        self, namespace: str, limit: int = 500, after: str | None = None
    ) -> list[Version]:
        params = {**lexical.namespace_range(namespace), "after": after or "", "limit": limit}
        return [_version(r) for r in self._read(LIST_VERSIONS, params)]


def _version(row: sqlite3.Row) -> Version:
    return history_codec.from_row(
        row["current_id"],
        row["superseded_by"],
        codec.from_ts(row["superseded_at"]),
        json.loads(row["body"]),
    )

"""Record history of the Postgres backend."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

import numpy as np
import psycopg
from psycopg.types.json import Jsonb

from wakemark.shared.models import EMBEDDING_DIM, MemoryRecord
from wakemark.shared.storage import history_codec, lexical
from wakemark.shared.storage.errors import NotFoundError
from wakemark.shared.storage.ports.history import Version
from wakemark.shared.storage.postgres.base import NS, PostgresBase, PostgresTxBase
from wakemark.shared.storage.postgres.records import RECORD_COLUMNS
from wakemark.shared.storage.postgres.rows import check_vector, memory_record

# Exact: the MATERIALIZED scan of one namespace keeps the planner off the HNSW index, an
# approximate one that filters by namespace after it ranks and so can miss the nearest.
SUBJECT_NEIGHBOURS = f"""
WITH mine AS MATERIALIZED (
  SELECT {RECORD_COLUMNS}, 1 - (embedding <=> %(vector)s) AS cosine FROM memory_records
   WHERE namespace = %(namespace)s AND embedding IS NOT NULL)
SELECT * FROM mine ORDER BY cosine DESC, record_id LIMIT %(limit)s
"""

SESSION_TURN_RECORDS = """
SELECT p.record_ids, p.repeat_of FROM turns t JOIN turns p
    ON p.session_id = t.session_id AND p.namespace = t.namespace
   AND (p.opened_at, p.turn_id) < (t.opened_at, t.turn_id)
 WHERE t.turn_id = %s ORDER BY p.opened_at DESC, p.turn_id DESC LIMIT %s
"""

# Each record, or the current record of the chain it is a version of, in the order asked.
CURRENT_OF = f"""
SELECT {RECORD_COLUMNS}, 1 - (embedding <=> %(vector)s)
  FROM unnest(%(ids)s::text[]) WITH ORDINALITY AS asked (id, pos)
  JOIN memory_records ON record_id = coalesce(
       (SELECT current_id FROM record_history h WHERE h.record_id = asked.id), asked.id)
 WHERE embedding IS NOT NULL ORDER BY asked.pos
"""

# The versions of one current record among the records asked, with a vector of the
# stored model.
VERSIONS_OF = """
SELECT body, 1 - (embedding <=> %(vector)s) FROM record_history
 WHERE record_id = ANY(%(ids)s::text[]) AND current_id = %(current)s
   AND embedding IS NOT NULL
   AND embedding_model = (SELECT model FROM embedding_model WHERE id = 1)
"""

# Before the record leaves memory_records: its version keeps its vector and its model.
KEEP_VECTOR = """
UPDATE record_history
   SET embedding = (SELECT embedding FROM memory_records WHERE record_id = %s),
       embedding_model = (SELECT model FROM embedding_model WHERE id = 1)
 WHERE record_id = %s
"""

# The row lock: a split or a delete of the same record waits for this transaction.
GET_RECORD_FOR_UPDATE = (
    f"SELECT {RECORD_COLUMNS} FROM memory_records WHERE record_id = %s FOR UPDATE"
)

GET_ANCHORS = "SELECT body FROM code_anchors WHERE record_id = %s"

PUT_VERSION = """
INSERT INTO record_history (record_id, current_id, superseded_by, namespace, superseded_at, body)
VALUES (%(record_id)s, %(current_id)s, %(superseded_by)s, %(namespace)s, %(superseded_at)s,
        %(body)s)
ON CONFLICT (record_id) DO UPDATE SET current_id = excluded.current_id,
    superseded_by = excluded.superseded_by, namespace = excluded.namespace,
    superseded_at = excluded.superseded_at, body = excluded.body
"""

FOLLOW = "UPDATE record_history SET current_id = %s WHERE current_id = %s"

_COLUMNS = "current_id, superseded_by, superseded_at, body"

TAKE_VERSION = f"DELETE FROM record_history WHERE record_id = %s RETURNING {_COLUMNS}"

MOVE_VERSIONS = "UPDATE record_history SET current_id = %s WHERE record_id = ANY(%s::text[])"

DELETE_RECORD = "DELETE FROM memory_records WHERE record_id = %s"

GET_HISTORY = f"""
SELECT {_COLUMNS} FROM record_history WHERE current_id = %s
 ORDER BY superseded_at DESC, record_id DESC
"""

GET_VERSION = f"SELECT {_COLUMNS} FROM record_history WHERE record_id = %s"

LIST_VERSIONS = f"""
SELECT {_COLUMNS} FROM record_history
 WHERE namespace {NS} AND record_id > %(after)s ORDER BY record_id LIMIT %(limit)s
"""


class PostgresHistoryTx(PostgresTxBase):
    def lock_subjects(self, namespace: str) -> None:
        # Every transaction that adds or removes records takes this lock first
        # (PostgresTxBase): taken before the subjects are read, it also orders the reads.
        self._lock_records()

    def subject_neighbours(
        self, namespace: str, vectors: np.ndarray, limit: int
    ) -> list[list[tuple[MemoryRecord, float]]]:
        out = []
        for vector in np.asarray(vectors, dtype=np.float32).reshape(-1, EMBEDDING_DIM):
            params = {"vector": check_vector(vector), "namespace": namespace, "limit": limit}
            rows = self.conn.execute(SUBJECT_NEIGHBOURS, params).fetchall()
            out.append([(memory_record(r[:-1]), float(r[-1])) for r in rows])
        return out

    def _recent_ids(self, turn_id: str, lookback: int) -> list[str]:
        turns = self.conn.execute(SESSION_TURN_RECORDS, (turn_id, lookback)).fetchall()
        return history_codec.recent_ids([(list(rids), repeat_of) for rids, repeat_of in turns])

    def session_recent(
        self, turn_id: str, vector: np.ndarray, lookback: int
    ) -> list[tuple[MemoryRecord, float]]:
        ids = self._recent_ids(turn_id, lookback)
        if not ids:
            return []
        params = {"ids": ids, "vector": check_vector(vector)}
        found: dict[str, tuple[MemoryRecord, float]] = {}
        for row in self.conn.execute(CURRENT_OF, params).fetchall():
            record = memory_record(row[:-1])
            found.setdefault(record.record_id, (record, float(row[-1])))
        return list(found.values())

    def session_versions(
        self, turn_id: str, current_id: str, vector: np.ndarray, lookback: int
    ) -> list[tuple[MemoryRecord, float]]:
        ids = self._recent_ids(turn_id, lookback)
        if not ids:
            return []
        params = {"ids": ids, "current": current_id, "vector": check_vector(vector)}
        rows = self.conn.execute(VERSIONS_OF, params).fetchall()
        return history_codec.best_first(
            [(MemoryRecord.model_validate(body["record"]), float(c)) for body, c in rows]
        )

    def supersede(self, old_id: str, new_id: str, at: datetime) -> bool:
        self._lock_records()
        row = self.conn.execute(GET_RECORD_FOR_UPDATE, (old_id,)).fetchone()
        if row is None or old_id == new_id:
            return False
        old = memory_record(row)
        found = self.conn.execute(GET_ANCHORS, (old_id,)).fetchone()
        anchors = None if found is None else found[0]
        self.conn.execute(FOLLOW, (new_id, old_id))
        self.put_version(history_codec.superseded(old, anchors, new_id, at))
        self.conn.execute(KEEP_VECTOR, (old_id, old_id))
        self.conn.execute(DELETE_RECORD, (old_id,))
        self.changed.add(old.namespace)
        return True

    def put_version(self, version: Version) -> None:
        row = history_codec.row(version)
        params = {**row, "body": Jsonb(row["body"])}
        try:
            with self.conn.transaction():  # a savepoint: the caller's transaction survives
                self.conn.execute(PUT_VERSION, params)
        except psycopg.errors.ForeignKeyViolation as exc:
            raise NotFoundError(f"memory record {version.current_id} does not exist") from exc

    def take_version(self, record_id: str) -> Version | None:
        row = self.conn.execute(TAKE_VERSION, (record_id,)).fetchone()
        return None if row is None else _version(row)

    def move_versions(self, record_ids: Sequence[str], current_id: str) -> None:
        self.conn.execute(MOVE_VERSIONS, (current_id, list(record_ids)))


class PostgresHistory(PostgresBase):
    def get_history(self, record_id: str) -> list[Version]:
        with self._db.connection() as conn:
            return [_version(r) for r in conn.execute(GET_HISTORY, (record_id,)).fetchall()]

    def get_version(self, record_id: str) -> Version | None:
        with self._db.connection() as conn:
            row = conn.execute(GET_VERSION, (record_id,)).fetchone()
        return None if row is None else _version(row)

    def list_versions(
        self, namespace: str, limit: int = 500, after: str | None = None
    ) -> list[Version]:
        params = {"ns": lexical.namespace_pattern(namespace), "after": after or "", "limit": limit}
        with self._db.connection() as conn:
            return [_version(r) for r in conn.execute(LIST_VERSIONS, params).fetchall()]


def _version(row: tuple[Any, ...]) -> Version:
    current_id, superseded_by, superseded_at, body = row
    return history_codec.from_row(current_id, superseded_by, superseded_at, body)

"""Vectors of the Postgres backend: the records' embeddings."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from wakemark.shared.models import MemoryRecord
from wakemark.shared.storage import columns, lexical
from wakemark.shared.storage.errors import NotFoundError
from wakemark.shared.storage.ports.vectors import EmbeddingMatrix
from wakemark.shared.storage.postgres.base import (
    NS,
    PostgresBase,
    PostgresTxBase,
)
from wakemark.shared.storage.postgres.connection import REPEATABLE_READ
from wakemark.shared.storage.postgres.records import RECORD_COLUMNS
from wakemark.shared.storage.postgres.rows import (
    check_vector,
    decode_vectors,
    memory_record,
)

PUT_EMBEDDING = """
UPDATE memory_records SET embedding = %s WHERE record_id = %s RETURNING namespace
"""

HAS_EMBEDDING = "SELECT embedding IS NOT NULL FROM memory_records WHERE record_id = %s"

# The watermark is the snapshot's xmin: every transaction below it had ended before the
# snapshot, so rows stamped (embedded_xid) below it were already visible. since = -1: all.
EMBEDDINGS_SNAPSHOT = f"""
SELECT pg_snapshot_xmin(pg_current_snapshot())::text::bigint, count(*),
       count(*) FILTER (WHERE embedded_xid >= %(since)s)
  FROM memory_records WHERE namespace {NS} AND embedding IS NOT NULL
"""

# No ORDER BY: sorting the vectors would spill to disk; callers do not need an order.
LIST_EMBEDDINGS = f"""
SELECT record_id, extract(epoch FROM created_at)::float8, observation_type,
       vector_send(embedding)
  FROM memory_records
 WHERE namespace {NS} AND embedding IS NOT NULL AND embedded_xid >= %(since)s
"""

EMBEDDED_IDS = f"""
SELECT record_id FROM memory_records WHERE namespace {NS} AND embedding IS NOT NULL
"""

MISSING_EMBEDDING = f"""
SELECT {RECORD_COLUMNS} FROM memory_records
 WHERE embedding IS NULL AND namespace {NS}
 ORDER BY created_at, record_id
 LIMIT %(limit)s
"""

CLEAR_EMBEDDINGS = f"""
UPDATE memory_records SET embedding = NULL
 WHERE embedding IS NOT NULL AND namespace {NS}
RETURNING namespace
"""

COUNT_EMBEDDINGS = f"""
SELECT count(*) FROM memory_records WHERE namespace {NS} AND embedding IS NOT NULL
"""

VECTOR_COSINES = f"""
SELECT record_id, 1 - (embedding <=> %(vector)s) FROM memory_records
 WHERE record_id = ANY(%(ids)s) AND namespace {NS} AND embedding IS NOT NULL
"""


class PostgresVectorsTx(PostgresTxBase):
    def put_embedding(self, record_id: str, vector: np.ndarray) -> None:
        row = self.conn.execute(PUT_EMBEDDING, (check_vector(vector), record_id)).fetchone()
        if row is None:
            raise NotFoundError(f"memory record {record_id} does not exist")
        self.changed.add(row[0])


class PostgresVectors(PostgresBase):
    def has_embedding(self, record_id: str) -> bool:
        with self._db.connection() as conn:
            row = conn.execute(HAS_EMBEDDING, (record_id,)).fetchone()
        return bool(row and row[0])

    def list_embeddings(self, namespace: str, since: int | None = None) -> EmbeddingMatrix:
        params = {
            "ns": lexical.namespace_pattern(namespace),
            "since": -1 if since is None else since,
        }
        with self._db.connection() as conn, conn.transaction():
            # One snapshot for the watermark, the counts and the rows.
            conn.execute(REPEATABLE_READ)
            head = conn.execute(EMBEDDINGS_SNAPSHOT, params).fetchone()
            watermark, total, changed = head if head else (0, 0, 0)
            with conn.cursor(binary=True) as cur:
                cur.execute(LIST_EMBEDDINGS, params)
                return columns.collect(
                    columns.fetch_batches(cur),
                    changed,
                    decode_vectors,
                    float,
                    total=total,
                    watermark=watermark,
                )

    def embedded_ids(self, namespace: str) -> list[str]:
        with self._db.connection() as conn:
            rows = conn.execute(EMBEDDED_IDS, {"ns": lexical.namespace_pattern(namespace)})
            return [r[0] for r in rows]

    def count_embeddings(self, namespace: str) -> int:
        with self._db.connection() as conn:
            row = conn.execute(COUNT_EMBEDDINGS, {"ns": lexical.namespace_pattern(namespace)})
            return int(row.fetchone()[0])  # type: ignore[index]

    def vector_cosines(
        self, namespace: str, vector: np.ndarray, record_ids: Sequence[str]
    ) -> dict[str, float]:
        params = {
            "ns": lexical.namespace_pattern(namespace),
            "vector": check_vector(vector),
            "ids": list(record_ids),
        }
        with self._db.connection() as conn:
            return dict(conn.execute(VECTOR_COSINES, params).fetchall())

    def records_missing_embedding(
        self, limit: int, namespace: str | None = None
    ) -> list[MemoryRecord]:
        params = {"ns": lexical.namespace_pattern(namespace), "limit": limit}
        with self._db.connection() as conn:
            return [memory_record(r) for r in conn.execute(MISSING_EMBEDDING, params)]

    def clear_embeddings(self, namespace: str | None = None) -> int:
        with self._db.connection() as conn, conn.transaction():
            params = {"ns": lexical.namespace_pattern(namespace)}
            rows = conn.execute(CLEAR_EMBEDDINGS, params).fetchall()
        if rows and self._on_change is not None:
            self._on_change({r[0] for r in rows})
        return len(rows)

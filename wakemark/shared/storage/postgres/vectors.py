"""Vectors of the Postgres backend: the records' embeddings."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from wakemark.shared.models import MemoryRecord
from wakemark.shared.storage import columns, lexical
from wakemark.shared.storage.errors import NotFoundError
from wakemark.shared.storage.ports.vectors import EmbeddingMatrix, EmbeddingModels
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
from wakemark.shared.storage.postgres.search import MODEL_IS

PUT_EMBEDDING = """
UPDATE memory_records SET embedding = %s WHERE record_id = %s RETURNING namespace
"""

HAS_EMBEDDING = "SELECT embedding IS NOT NULL FROM memory_records WHERE record_id = %s"

# The watermark is the snapshot's xmin: every transaction below it had ended before the
# snapshot, so rows stamped (embedded_xid) below it were already visible. since = -1: all.
EMBEDDINGS_SNAPSHOT = f"""
SELECT pg_snapshot_xmin(pg_current_snapshot())::text::bigint, count(*),
       count(*) FILTER (WHERE embedded_xid >= %(since)s),
       (SELECT model FROM embedding_model WHERE id = 1)
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

MODELS = "SELECT model, staged FROM embedding_model WHERE id = 1"

# A writer of vectors holds the row shared until it commits; the swap updates it first.
MODELS_SHARED = MODELS + " FOR SHARE"

CLAIM_MODEL = """
UPDATE embedding_model SET model = %s WHERE id = 1 AND model IS NULL RETURNING model, staged
"""

PUT_STAGED = "UPDATE memory_records SET embedding_staged = %s WHERE record_id = %s RETURNING 1"

STAGE_MODEL = "UPDATE embedding_model SET staged = %s WHERE id = 1"

DROP_STAGED = """
UPDATE memory_records SET embedding_staged = NULL WHERE embedding_staged IS NOT NULL
"""

COUNT_UNSTAGED = "SELECT count(*) FROM memory_records WHERE embedding_staged IS NULL"

MISSING_STAGED = f"""
SELECT {RECORD_COLUMNS} FROM memory_records
 WHERE record_id > %s AND embedding_staged IS NULL
 ORDER BY record_id
 LIMIT %s
"""

SWAP_MODEL = """
UPDATE embedding_model SET model = staged, staged = NULL WHERE id = 1 AND staged = %s
RETURNING 1
"""

ANY_UNSTAGED = "SELECT EXISTS (SELECT 1 FROM memory_records WHERE embedding_staged IS NULL)"

# The stamp trigger (migration 0003) marks every row re-embedded: caches reload them.
SWAP_STAGED = """
UPDATE memory_records SET embedding = embedding_staged, embedding_staged = NULL
RETURNING namespace
"""

COUNT_EMBEDDINGS = f"""
SELECT count(*) FROM memory_records WHERE namespace {NS} AND embedding IS NOT NULL
"""

VECTOR_COSINES = f"""
SELECT record_id, 1 - (embedding <=> %(vector)s) FROM memory_records
 WHERE record_id = ANY(%(ids)s) AND namespace {NS} AND embedding IS NOT NULL AND {MODEL_IS}
"""


class PostgresVectorsTx(PostgresTxBase):
    def put_embedding(self, record_id: str, vector: np.ndarray) -> None:
        row = self.conn.execute(PUT_EMBEDDING, (check_vector(vector), record_id)).fetchone()
        if row is None:
            raise NotFoundError(f"memory record {record_id} does not exist")
        self.changed.add(row[0])

    def put_staged(self, record_id: str, vector: np.ndarray) -> None:
        if self.conn.execute(PUT_STAGED, (check_vector(vector), record_id)).fetchone() is None:
            raise NotFoundError(f"memory record {record_id} does not exist")

    def embedding_models(self) -> EmbeddingModels:
        return EmbeddingModels(*self.conn.execute(MODELS_SHARED).fetchone())  # type: ignore[misc]


class _NotYet(Exception):
    """Rolls the swap back."""


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
            watermark, total, changed, model = head if head else (0, 0, 0, None)
            with conn.cursor(binary=True) as cur:
                cur.execute(LIST_EMBEDDINGS, params)
                return columns.collect(
                    columns.fetch_batches(cur),
                    changed,
                    decode_vectors,
                    float,
                    total=total,
                    watermark=watermark,
                    model=model,
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
        self,
        namespace: str,
        vector: np.ndarray,
        record_ids: Sequence[str],
        model: str | None = None,
    ) -> dict[str, float]:
        params = {
            "model": model,
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

    def embedding_models(self) -> EmbeddingModels:
        with self._db.connection() as conn:
            return EmbeddingModels(*conn.execute(MODELS).fetchone())  # type: ignore[misc]

    def claim_model(self, model: str) -> EmbeddingModels:
        with self._db.connection() as conn, conn.transaction():
            row = conn.execute(CLAIM_MODEL, (model,)).fetchone()
        return EmbeddingModels(*row) if row else self.embedding_models()

    def start_rebuild(self, model: str) -> int:
        with self._db.connection() as conn, conn.transaction():
            staged = conn.execute(MODELS + " FOR UPDATE").fetchone()[1]  # type: ignore[index]
            if staged != model:
                conn.execute(DROP_STAGED)
                conn.execute(STAGE_MODEL, (model,))
            return int(conn.execute(COUNT_UNSTAGED).fetchone()[0])  # type: ignore[index]

    def records_missing_staged(self, limit: int, after: str = "") -> list[MemoryRecord]:
        with self._db.connection() as conn:
            return [memory_record(r) for r in conn.execute(MISSING_STAGED, (after, limit))]

    def swap_staged(self, model: str) -> bool:
        try:
            with self._db.connection() as conn, conn.transaction():
                # The models' row first: every writer of vectors reads it FOR SHARE before
                # its writes (``embedding_models``), so none writes an old model's vector
                # from here on. Other writers go on: a record added meanwhile without a
                # vector is left without one, for the new model's backfill.
                if conn.execute(SWAP_MODEL, (model,)).fetchone() is None:
                    return False
                if conn.execute(ANY_UNSTAGED).fetchone()[0]:  # type: ignore[index]
                    raise _NotYet
                changed = {r[0] for r in conn.execute(SWAP_STAGED)}
        except _NotYet:
            return False
        if changed and self._on_change is not None:
            self._on_change(changed)
        return True

"""Vectors of the SQLite backend: the records' embeddings."""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence

import numpy as np

from wakemark.shared.models import MemoryRecord
from wakemark.shared.storage import columns, lexical
from wakemark.shared.storage.errors import NotFoundError
from wakemark.shared.storage.ports.vectors import EmbeddingMatrix, EmbeddingModels
from wakemark.shared.storage.sqlite import codec
from wakemark.shared.storage.sqlite.base import NS, SqliteBase, SqliteTxBase, snapshot

# The process's vector cache searches the vectors (``Vectors.vector_index`` is False).
NO_VECTOR_INDEX = "sqlite has no vector index"

SET_EMBEDDING = "UPDATE memory_records SET embedding = ? WHERE record_id = ? RETURNING namespace"

HAS_EMBEDDING = "SELECT embedding IS NOT NULL FROM memory_records WHERE record_id = ?"

# :since is -1 for everything (rows embedded before migration 0003 are stamped 0).
EMBEDDINGS_SNAPSHOT = f"""
SELECT (SELECT value FROM embedding_seq WHERE id = 1) AS watermark, count(*) AS total,
       count(*) FILTER (WHERE embedded_seq > :since) AS changed,
       (SELECT model FROM embedding_model WHERE id = 1) AS model
FROM memory_records WHERE {NS} AND embedding IS NOT NULL
"""

LIST_EMBEDDINGS = f"""
SELECT record_id, created_at, observation_type, embedding FROM memory_records
WHERE {NS} AND embedding IS NOT NULL AND embedded_seq > :since ORDER BY created_at, record_id
"""

EMBEDDED_IDS = f"SELECT record_id FROM memory_records WHERE {NS} AND embedding IS NOT NULL"

# Both counters only grow (one with each vector written, one with each record written,
# edited or deleted), so their sum moves whenever either does.
CHANGE_STAMP = """
SELECT (SELECT value FROM embedding_seq WHERE id = 1) + (SELECT value FROM text_seq WHERE id = 1)
"""

MISSING_EMBEDDING = f"""
SELECT * FROM memory_records WHERE embedding IS NULL AND {NS}
ORDER BY created_at, record_id LIMIT :limit
"""

MODELS = "SELECT model, staged, path, staged_path FROM embedding_model WHERE id = 1"

CLAIM_MODEL = "UPDATE embedding_model SET model = ?, path = ? WHERE id = 1 AND model IS NULL"

SET_STAGED = "UPDATE memory_records SET embedding_staged = ? WHERE record_id = ? RETURNING 1"

STAGE_MODEL = "UPDATE embedding_model SET staged = ?, staged_path = ? WHERE id = 1"

DROP_STAGED = "UPDATE memory_records SET embedding_staged = NULL WHERE embedding_staged IS NOT NULL"

COUNT_UNSTAGED = "SELECT count(*) FROM memory_records WHERE embedding_staged IS NULL"

MISSING_STAGED = """
SELECT * FROM memory_records WHERE record_id > ? AND embedding_staged IS NULL
ORDER BY record_id LIMIT ?
"""

# The embedding_seq trigger stamps every row: caches reload the namespaces as re-embedded.
SWAP_STAGED = """
UPDATE memory_records SET embedding = embedding_staged, embedding_staged = NULL
RETURNING namespace
"""

SWAP_MODEL = """
UPDATE embedding_model SET model = staged, path = staged_path, staged = NULL, staged_path = NULL
 WHERE id = 1
"""


class SqliteVectorsTx(SqliteTxBase):
    def put_embedding(self, record_id: str, vector: np.ndarray) -> None:
        row = self.conn.execute(
            SET_EMBEDDING, (codec.encode_embedding(vector), record_id)
        ).fetchone()
        if row is None:
            raise NotFoundError(f"no memory record {record_id}")
        self.changed.add(row["namespace"])

    def put_staged(self, record_id: str, vector: np.ndarray) -> None:
        row = self.conn.execute(SET_STAGED, (codec.encode_embedding(vector), record_id)).fetchone()
        if row is None:
            raise NotFoundError(f"no memory record {record_id}")

    def embedding_models(self) -> EmbeddingModels:
        # A write transaction holds the database's one write lock: nothing swaps meanwhile.
        return _models(self.conn.execute(MODELS).fetchone())


def _models(row: sqlite3.Row) -> EmbeddingModels:
    return EmbeddingModels(row["model"], row["staged"], row["path"], row["staged_path"])


class SqliteVectors(SqliteBase):
    def has_embedding(self, record_id: str) -> bool:
        rows = self._read(HAS_EMBEDDING, (record_id,))
        return bool(rows and rows[0][0])

    def list_embeddings(self, namespace: str, since: int | None = None) -> EmbeddingMatrix:
        params = {
            **lexical.namespace_range(namespace),
            "since": -1 if since is None else since,
        }
        conn = self._conns.get()
        with snapshot(conn):  # watermark, counts and rows from one snapshot
            head = conn.execute(EMBEDDINGS_SNAPSHOT, params).fetchone()
            return columns.collect(
                columns.fetch_batches(conn.execute(LIST_EMBEDDINGS, params)),
                head["changed"],
                codec.decode_embeddings,
                codec.seconds,
                total=head["total"],
                watermark=head["watermark"],
                model=head["model"],
            )

    def embedded_ids(self, namespace: str) -> list[str]:
        rows = self._read(EMBEDDED_IDS, lexical.namespace_range(namespace))
        return [r[0] for r in rows]

    def change_stamp(self, namespace: str) -> int:
        return int(self._read(CHANGE_STAMP)[0][0])

    def count_embeddings(self, namespace: str) -> int:
        raise NotImplementedError(NO_VECTOR_INDEX)

    def vector_cosines(
        self,
        namespace: str,
        vector: np.ndarray,
        record_ids: Sequence[str],
        model: str | None = None,
    ) -> dict[str, float]:
        raise NotImplementedError(NO_VECTOR_INDEX)

    def records_missing_embedding(
        self, limit: int, namespace: str | None = None
    ) -> list[MemoryRecord]:
        params = {**lexical.namespace_range(namespace), "limit": limit}
        return [codec.to_record(r) for r in self._read(MISSING_EMBEDDING, params)]

    def embedding_models(self) -> EmbeddingModels:
        return _models(self._read(MODELS)[0])

    def claim_model(self, model: str, path: str | None = None) -> EmbeddingModels:
        with self._conns.write() as conn:
            conn.execute(CLAIM_MODEL, (model, path))
            return _models(conn.execute(MODELS).fetchone())

    def start_rebuild(self, model: str, path: str | None = None) -> int:
        with self._conns.write() as conn:
            if _models(conn.execute(MODELS).fetchone()).staged != model:
                conn.execute(DROP_STAGED)
            conn.execute(STAGE_MODEL, (model, path))
            return int(conn.execute(COUNT_UNSTAGED).fetchone()[0])

    def records_missing_staged(self, limit: int, after: str = "") -> list[MemoryRecord]:
        return [codec.to_record(r) for r in self._read(MISSING_STAGED, (after, limit))]

    def swap_staged(self, model: str) -> bool:
        with self._conns.write() as conn:
            if _models(conn.execute(MODELS).fetchone()).staged != model:
                return False
            if conn.execute(MISSING_STAGED, ("", 1)).fetchone() is not None:
                return False
            changed = {r["namespace"] for r in conn.execute(SWAP_STAGED)}
            conn.execute(SWAP_MODEL)
        self._notify(changed)
        return True

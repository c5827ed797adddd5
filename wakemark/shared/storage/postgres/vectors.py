"""Vectors of the Postgres backend: the records' embeddings."""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Sequence

import numpy as np
import psycopg

from wakemark.shared.models import MemoryRecord
from wakemark.shared.storage import columns, lexical
from wakemark.shared.storage.errors import NotFoundError, SwapBlockedError
from wakemark.shared.storage.ports.vectors import EmbeddingMatrix, EmbeddingModels
from wakemark.shared.storage.postgres.base import (
    NS,
    PostgresBase,
    PostgresTxBase,
)
from wakemark.shared.storage.postgres.connection import REPEATABLE_READ
from wakemark.shared.storage.postgres.records import RECORD_COLUMNS
from wakemark.shared.storage.postgres.rows import (
    EMBEDDING_DIM,
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

# Migration 0025's counter, summed over the namespaces of a prefix.
CHANGE_STAMP = f"""
SELECT coalesce(sum(changes), 0) FROM namespace_record_counts WHERE namespace {NS}
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

MODELS = "SELECT model, staged, path, staged_path FROM embedding_model WHERE id = 1"

# A writer of vectors holds the row shared until it commits; the swap updates it first.
MODELS_SHARED = MODELS + " FOR SHARE"

CLAIM_MODEL = """
UPDATE embedding_model SET model = %s, path = %s WHERE id = 1 AND model IS NULL
RETURNING model, staged, path, staged_path
"""

PUT_STAGED = "UPDATE memory_records SET embedding_staged = %s WHERE record_id = %s RETURNING 1"

STAGE_MODEL = "UPDATE embedding_model SET staged = %s, staged_path = %s WHERE id = 1"

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
UPDATE embedding_model SET model = staged, path = staged_path, staged = NULL, staged_path = NULL
 WHERE id = 1 AND staged = %s
RETURNING 1
"""

ANY_UNSTAGED = "SELECT EXISTS (SELECT 1 FROM memory_records WHERE embedding_staged IS NULL)"

# The objects on the records' vectors (migrations 0001, 0003, 0013): indexes, whose twins
# on the staged column the swap builds beforehand, and triggers, which it moves to the
# column it renames into place. Read from the catalog, so a later migration's are too.
DEPENDENTS = """
SELECT d.classid = 'pg_class'::regclass, coalesce(c.relname, t.tgname),
       coalesce(pg_get_indexdef(c.oid), pg_get_triggerdef(t.oid)),
       (SELECT i.indisvalid FROM pg_class s JOIN pg_index i ON i.indexrelid = s.oid
         WHERE s.relname = c.relname || '_staged' AND s.relnamespace = c.relnamespace)
  FROM pg_depend d
  LEFT JOIN pg_class c ON d.classid = 'pg_class'::regclass AND c.oid = d.objid
  LEFT JOIN pg_trigger t ON d.classid = 'pg_trigger'::regclass AND t.oid = d.objid
 WHERE d.refclassid = 'pg_class'::regclass AND d.refobjid = 'memory_records'::regclass
   AND d.refobjsubid = (SELECT attnum FROM pg_attribute
                         WHERE attrelid = 'memory_records'::regclass AND attname = 'embedding')
 GROUP BY 1, 2, 3, 4
"""

# Catalog changes only: no row is rewritten. The old vectors stay in the rows' tuples as
# a dropped column's, until each row is written again.
FLIP_COLUMNS = [
    "ALTER TABLE memory_records RENAME COLUMN embedding TO embedding_old",
    "ALTER TABLE memory_records RENAME COLUMN embedding_staged TO embedding",
    "ALTER TABLE memory_records DROP COLUMN embedding_old",  # and its indexes
    f"""ALTER TABLE memory_records ADD COLUMN embedding_staged vector({EMBEDDING_DIM}),
        ALTER COLUMN embedding_staged SET STORAGE PLAIN""",  # as migration 0022
]

# Every record has a vector now (the swap checked). The namespaces' caches reload.
COUNT_SWAPPED = "UPDATE namespace_record_counts SET embedded = memories RETURNING namespace"

# Who holds what the swap locks, for the message when it cannot.
HOLDERS = """
SELECT DISTINCT a.pid, a.xact_start, coalesce(a.state, ''), left(coalesce(a.query, ''), 60)
  FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
 WHERE l.relation IN ('memory_records'::regclass, 'embedding_model'::regclass)
   AND l.granted AND l.pid <> pg_backend_pid()
 ORDER BY a.xact_start
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


# The swap waits this long for each lock (then rolls back, pauses and tries again):
# what it waits for waits for it meanwhile. Longer than deadlock_timeout (1 s by default),
# after which a lock waiter cancels an autovacuum in its way.
SWAP_LOCK_TIMEOUT = "2s"
SWAP_ATTEMPTS = 10
SWAP_PAUSE_S = 1.0

log = logging.getLogger(__name__)


class _NotYet(Exception):
    """Rolls the swap back."""


class _Locked(Exception):
    """The swap waited ``SWAP_LOCK_TIMEOUT`` for a lock: rolled back."""


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

    def change_stamp(self, namespace: str) -> int:
        with self._db.connection() as conn:
            row = conn.execute(CHANGE_STAMP, {"ns": lexical.namespace_pattern(namespace)})
            return int(row.fetchone()[0])  # type: ignore[index]

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

    def claim_model(self, model: str, path: str | None = None) -> EmbeddingModels:
        with self._db.connection() as conn, conn.transaction():
            row = conn.execute(CLAIM_MODEL, (model, path)).fetchone()
        return EmbeddingModels(*row) if row else self.embedding_models()

    def start_rebuild(self, model: str, path: str | None = None) -> int:
        with self._db.connection() as conn:
            if conn.execute(MODELS).fetchone()[1] != model:  # type: ignore[index]
                # The staged indexes of another model's rebuild (one that did not swap)
                # would take each vector staged from now as an insert: built again, over
                # them all at once, before the swap.
                for is_index, name, _, valid in conn.execute(DEPENDENTS).fetchall():
                    if is_index and valid is not None:
                        conn.execute(f"DROP INDEX CONCURRENTLY {name}_staged")
            with conn.transaction():
                staged = conn.execute(MODELS + " FOR UPDATE").fetchone()[1]  # type: ignore[index]
                if staged != model:
                    conn.execute(DROP_STAGED)
                conn.execute(STAGE_MODEL, (model, path))
                return int(conn.execute(COUNT_UNSTAGED).fetchone()[0])  # type: ignore[index]

    def records_missing_staged(self, limit: int, after: str = "") -> list[MemoryRecord]:
        with self._db.connection() as conn:
            return [memory_record(r) for r in conn.execute(MISSING_STAGED, (after, limit))]

    def swap_staged(self, model: str) -> bool:
        """Builds the staged column's indexes first (``_build_staged_indexes``), then
        swaps the columns' names in one short transaction (``_swap``), which waits at
        most ``SWAP_LOCK_TIMEOUT`` for a lock and is tried ``SWAP_ATTEMPTS`` times."""
        with self._db.connection() as conn:
            if conn.execute(MODELS).fetchone()[1] != model:  # type: ignore[index]
                return False
            if conn.execute(ANY_UNSTAGED).fetchone()[0]:  # type: ignore[index]
                return False
            _build_staged_indexes(conn)
            # The renamed column keeps the staged one's statistics: from now, not from
            # before the staging (most rows without a vector), for the searches' plans.
            conn.execute("ANALYZE memory_records")
        for attempt in range(1, SWAP_ATTEMPTS + 1):
            try:
                changed = self._swap(model)
                break
            except _Locked:
                log.info("model swap: no lock within %s (try %d)", SWAP_LOCK_TIMEOUT, attempt)
                if attempt < SWAP_ATTEMPTS:
                    time.sleep(SWAP_PAUSE_S)
        else:
            with self._db.connection() as conn:
                holders = "; ".join(f"pid {p} {s} {q!r}" for p, _, s, q in conn.execute(HOLDERS))
            raise SwapBlockedError(
                f"the swap waited {SWAP_LOCK_TIMEOUT} for its locks {SWAP_ATTEMPTS} times in"
                " vain: other transactions held the records or the models' row"
                f" ({holders or 'none now'}); run `wakemark backfill --rebuild` again once"
                " they have ended (the staged vectors are kept)"
            )
        if changed is None:
            return False
        if changed and self._on_change is not None:
            self._on_change(changed)
        return True

    def _swap(self, model: str) -> set[str] | None:
        """The staged column and its indexes become the records' vectors; the namespaces
        whose vectors changed, or None when a record lacks a staged vector (written since
        the last pass) or another rebuild took over."""
        with self._db.connection() as conn:
            try:
                with conn.transaction():
                    return _swap_columns(conn, model)
            except psycopg.errors.LockNotAvailable:
                raise _Locked from None  # rolled back; the connection is fine
            except _NotYet:
                return None


def _swap_columns(conn: psycopg.Connection, model: str) -> set[str]:
    conn.execute(f"SET LOCAL lock_timeout = '{SWAP_LOCK_TIMEOUT}'")
    # The models' row first: every writer of vectors reads it FOR SHARE as its
    # transaction's first statement (``embedding_models``), so from here on none writes,
    # and none that holds the table waits for this row (which would deadlock with the
    # table's lock below).
    if conn.execute(SWAP_MODEL, (model,)).fetchone() is None:
        raise _NotYet
    conn.execute("LOCK TABLE memory_records IN ACCESS EXCLUSIVE MODE")
    # Through the staged twin of the partial index of unembedded records (empty), not
    # the table: statistics from before the staging say most rows lack a staged vector,
    # which makes a scan that stops at the first one look cheap, and it would read every
    # row with the table locked.
    conn.execute("SET LOCAL enable_seqscan = off")
    if conn.execute(ANY_UNSTAGED).fetchone()[0]:  # type: ignore[index]
        raise _NotYet
    # Off, a scan's cost makes the next statements look dear enough to compile (JIT).
    conn.execute("SET LOCAL enable_seqscan = on")
    dependents = conn.execute(DEPENDENTS).fetchall()
    if not all(valid for is_index, _, _, valid in dependents if is_index):
        raise _NotYet  # a staged index was dropped meanwhile: built again first
    triggers = [(name, ddl) for is_index, name, ddl, _ in dependents if not is_index]
    for name, _ in triggers:
        conn.execute(f"DROP TRIGGER {name} ON memory_records")
    for statement in FLIP_COLUMNS:
        conn.execute(statement)
    for is_index, name, _, _ in dependents:
        if is_index:
            conn.execute(f"ALTER INDEX {name}_staged RENAME TO {name}")
    for _, ddl in triggers:  # "embedding" names the new column now
        conn.execute(ddl)
    return {r[0] for r in conn.execute(COUNT_SWAPPED)}


def _build_staged_indexes(conn: psycopg.Connection) -> None:
    """A twin of each index of the records' vectors, on the staged column, built while
    writers go on (CONCURRENTLY; the records staged meanwhile enter it as they are
    written). One left valid by an interrupted run is kept; an invalid one (a build
    interrupted) is dropped and built again."""
    heard = conn.execute("SHOW client_min_messages").fetchone()[0]  # type: ignore[index]
    conn.execute("SET client_min_messages = notice")  # the pool's connections hear none
    conn.add_notice_handler(_say_notice)
    try:
        for is_index, name, ddl, valid in conn.execute(DEPENDENTS).fetchall():
            if not is_index or valid:
                continue
            if valid is False:
                conn.execute(f"DROP INDEX CONCURRENTLY {name}_staged")
            log.info("model swap: building index %s_staged", name)
            table_and_keys = re.sub(r"\bembedding\b", "embedding_staged", ddl.split(" ON ", 1)[1])
            conn.execute(f"CREATE INDEX CONCURRENTLY {name}_staged ON {table_and_keys}")
    finally:
        conn.execute(f"SET client_min_messages = {heard}")
        conn.remove_notice_handler(_say_notice)


def _say_notice(notice: psycopg.errors.Diagnostic) -> None:
    """pgvector tells the building session when the graph outgrows its
    ``maintenance_work_mem`` and the build goes on several times slower: the operator's
    cue, which the server's log does not carry at its default level."""
    if "maintenance_work_mem" not in (notice.message_primary or ""):
        return
    log.warning(
        "model swap: %s; this build goes on more slowly. Next time give the rebuild more"
        " memory, e.g. PGOPTIONS='-c maintenance_work_mem=1GB' wakemark backfill --rebuild",
        notice.message_primary,
    )

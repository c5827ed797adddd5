"""A rebuild's swap on Postgres (``PostgresVectors.swap_staged``): the staged column and
its indexes, built beforehand while writers go on, take the searched column's name in one
short transaction that writes no row. The swap's contract on both backends is in
tests/jobs/test_model_change.py."""

from __future__ import annotations

import logging
import threading
import uuid
from collections.abc import Iterator
from typing import Any
from urllib.parse import quote

import numpy as np
import psycopg
import pytest
from pgvector.psycopg import register_vector

from tests.storage.conftest import NS
from wakemark.shared.models import EMBEDDING_DIM, MemoryRecord
from wakemark.shared.storage import SearchQuery
from wakemark.shared.storage.errors import SwapBlockedError
from wakemark.shared.storage.postgres import PostgresStorage, migrate_postgres
from wakemark.shared.storage.postgres import records as pg_records
from wakemark.shared.storage.postgres import search as pg_search
from wakemark.shared.storage.postgres import vectors as pg_vectors

pytestmark = pytest.mark.postgres

OLD, NEW = "sha256:old", "sha256:new"
WAIT_S = 60  # for another thread to get somewhere: never reached unless it is stuck


def _vector(seed: int) -> np.ndarray:
    v = np.random.default_rng(seed).standard_normal(EMBEDDING_DIM).astype(np.float32)
    return v / np.linalg.norm(v)


@pytest.fixture
def changes() -> list[set[str]]:
    return []


@pytest.fixture
def store(pg_url: str, changes: list[set[str]]) -> Iterator[PostgresStorage]:
    """Records with the old model's vectors (seeds 0..5), each staged by the new one
    (seeds 100..105)."""
    migrate_postgres(pg_url)
    storage = PostgresStorage(pg_url, on_change=changes.append)
    _stage(storage, 6)
    changes.clear()
    yield storage
    storage.close()


def _stage(storage: PostgresStorage, n: int) -> None:
    """``n`` records with the old model's vectors (seeds 0..n-1), each staged by the new
    one (seeds 100..)."""
    storage.claim_model(OLD)
    records = [MemoryRecord(namespace=NS, title=f"note {i}") for i in range(n)]
    with storage.transaction() as tx:
        for i, record in enumerate(records):
            tx.put_memory_record(record)
            tx.put_embedding(record.record_id, _vector(i))
    assert storage.start_rebuild(NEW) == n
    with storage.transaction() as tx:
        for i, record in enumerate(records):
            tx.put_staged(record.record_id, _vector(100 + i))


@pytest.fixture
def sql(pg_url: str) -> Iterator[psycopg.Connection]:
    with psycopg.connect(pg_url, autocommit=True) as conn:
        register_vector(conn)
        yield conn


def _column(store: PostgresStorage) -> dict[str, np.ndarray]:
    rows = store.list_embeddings(NS)
    return dict(zip(rows.record_ids, rows.vectors, strict=True))


def _schema(conn: psycopg.Connection) -> dict[str, Any]:
    """What the records' table is made of, as a fresh schema's can be compared with it
    (the column order aside)."""

    def rows(query: str) -> list[Any]:
        return sorted(conn.execute(query).fetchall())

    schema = conn.execute("SELECT current_schema()").fetchone()[0]  # type: ignore[index]
    return {
        "columns": rows(
            "SELECT attname, format_type(atttypid, atttypmod), attstorage, attnotnull"
            " FROM pg_attribute WHERE attrelid = 'memory_records'::regclass AND attnum > 0"
            " AND NOT attisdropped"
        ),
        "indexes": [
            (name, ddl.replace(schema + ".", ""), valid)
            for name, ddl, valid in rows(
                "SELECT c.relname, pg_get_indexdef(c.oid), i.indisvalid FROM pg_index i"
                " JOIN pg_class c ON c.oid = i.indexrelid"
                " WHERE i.indrelid = 'memory_records'::regclass"
            )
        ],
        "triggers": [
            ddl.replace(schema + ".", "")
            for (ddl,) in rows(
                "SELECT pg_get_triggerdef(oid) FROM pg_trigger"
                " WHERE tgrelid = 'memory_records'::regclass AND NOT tgisinternal"
            )
        ],
    }


def _nearest_by_index(conn: psycopg.Connection, vector: np.ndarray) -> str:
    """The record nearest ``vector`` as the HNSW index finds it."""
    with conn.transaction():
        conn.execute("SET LOCAL enable_seqscan = off")
        conn.execute("SET LOCAL enable_sort = off")
        query = "SELECT record_id FROM memory_records ORDER BY embedding <=> %s LIMIT 1"
        plan = "\n".join(r[0] for r in conn.execute("EXPLAIN " + query, (vector,)))
        assert "memory_records_embedding" in plan
        return conn.execute(query, (vector,)).fetchone()[0]  # type: ignore[index]


def test_the_swap_renames_the_columns_and_writes_no_row(
    store: PostgresStorage, sql: psycopg.Connection, pg_base_url: str, changes: list[set[str]]
) -> None:
    ROWS = "SELECT record_id, ctid::text, xmin::text FROM memory_records ORDER BY record_id"
    before = sql.execute(ROWS).fetchall()
    staged = {
        rid: v for rid, v in sql.execute("SELECT record_id, embedding_staged FROM memory_records")
    }
    assert store.swap_staged(NEW)

    assert sql.execute(ROWS).fetchall() == before  # the same row versions, where they were
    column = _column(store)
    assert column.keys() == staged.keys()
    assert all(np.allclose(column[rid], staged[rid].to_numpy()) for rid in staged)
    assert store.embedding_models().model == NEW and store.embedding_models().staged is None
    assert changes == [{NS}]  # every process's caches of the namespace reload
    assert store.stats(NS)["pending_embedding"] == 0
    some = next(iter(staged))
    assert _nearest_by_index(sql, staged[some].to_numpy()) == some

    # The table is as a freshly migrated one (column order aside): its indexes, its
    # triggers (moved to the renamed column), both vector columns inline.
    other = "t_" + uuid.uuid4().hex[:12]
    with psycopg.connect(pg_base_url, autocommit=True) as fresh:
        fresh.execute(f"CREATE SCHEMA {other}")
        try:
            fresh.execute(f"SET search_path = {other}, public")
            sep = "&" if "?" in pg_base_url else "?"
            migrate_postgres(f"{pg_base_url}{sep}options={quote(f'-csearch_path={other},public')}")
            assert _schema(sql) == _schema(fresh)
        finally:
            fresh.execute(f"DROP SCHEMA {other} CASCADE")

    # The moved triggers fire: a vector written stamps its row, a vector cleared counts.
    record = MemoryRecord(namespace=NS, title="written after the swap")
    store.put_memory_record(record)
    watermark = store.list_embeddings(NS).watermark
    with store.transaction() as tx:
        assert tx.embedding_models().model == NEW
        tx.put_embedding(record.record_id, _vector(7))
    # (Possibly a few more: the watermark is the oldest transaction still running.)
    assert record.record_id in store.list_embeddings(NS, since=watermark).record_ids
    assert store.stats(NS)["pending_embedding"] == 0


def test_a_second_model_change_swaps_again(store: PostgresStorage, sql: psycopg.Connection) -> None:
    DROPPED = "SELECT count(*) FROM pg_attribute WHERE attrelid = 'memory_records'::regclass"
    (dropped,) = sql.execute(DROPPED + " AND attisdropped").fetchone()  # type: ignore[misc]
    assert store.swap_staged(NEW)
    third = "sha256:third"
    assert store.start_rebuild(third) == 6
    ids = sorted(store.list_embeddings(NS).record_ids)
    with store.transaction() as tx:
        for i, rid in enumerate(ids):
            tx.put_staged(rid, _vector(200 + i))
    assert store.swap_staged(third)
    column = _column(store)
    assert all(np.allclose(column[rid], _vector(200 + i)) for i, rid in enumerate(ids))
    assert _nearest_by_index(sql, _vector(201)) == ids[1]
    # Each swap leaves its old column in the catalog, dropped.
    assert sql.execute(DROPPED + " AND attisdropped").fetchone() == (dropped + 2,)


def test_a_rebuild_of_another_model_drops_the_staged_indexes_left_behind(
    store: PostgresStorage, sql: psycopg.Connection
) -> None:
    # This test's schema only: other tests' rebuilds run beside it in schemas of their own.
    STAGED = (
        "SELECT count(*) FROM pg_class WHERE relname LIKE 'memory_records%_staged'"
        " AND relnamespace = current_schema()::regnamespace"
    )
    _indexes_built(store)
    assert sql.execute(STAGED).fetchone() == (3,)
    assert store.start_rebuild(NEW) == 0  # the same rebuild goes on: they are kept
    assert sql.execute(STAGED).fetchone() == (3,)
    assert store.start_rebuild("sha256:third") == 6
    assert sql.execute(STAGED).fetchone() == (0,)


def test_a_record_staged_after_the_index_build_is_found_through_the_index(
    store: PostgresStorage, sql: psycopg.Connection
) -> None:
    with store._db.connection() as conn:
        pg_vectors._build_staged_indexes(conn)
    # Written by the service with the old model's vector, then staged by the rebuild's
    # last pass: into the index built before it.
    late = MemoryRecord(namespace=NS, title="late")
    with store.transaction() as tx:
        assert tx.embedding_models().model == OLD
        tx.put_memory_record(late)
        tx.put_embedding(late.record_id, _vector(50))
    assert not store.swap_staged(NEW)  # it lacks a staged vector
    with store.transaction() as tx:
        tx.put_staged(late.record_id, _vector(150))
    assert store.swap_staged(NEW)
    assert _nearest_by_index(sql, _vector(150)) == late.record_id
    hits = store.search_vector(SearchQuery(NS, 1), _vector(150), model=NEW)
    assert [h.record_id for h in hits] == [late.record_id]


def test_an_interrupted_index_build_is_built_again_and_a_finished_one_kept(
    store: PostgresStorage, sql: psycopg.Connection, pg_url: str
) -> None:
    # Interrupted: a build that could not wait out a transaction holding the table is
    # left in the catalog, invalid.
    with psycopg.connect(pg_url) as holder:
        holder.execute("LOCK TABLE memory_records IN ROW EXCLUSIVE MODE")
        sql.execute("SET lock_timeout = '100ms'")
        with pytest.raises(psycopg.errors.LockNotAvailable):
            sql.execute(
                "CREATE INDEX CONCURRENTLY memory_records_embedding_staged"
                " ON memory_records USING hnsw (embedding_staged vector_cosine_ops)"
            )
        sql.execute("RESET lock_timeout")
    VALID = "SELECT indisvalid FROM pg_index WHERE indexrelid = %s::regclass"
    assert sql.execute(VALID, ("memory_records_embedding_staged",)).fetchone() == (False,)
    # Finished: kept as it is (the same index becomes the searched column's).
    sql.execute(
        "CREATE INDEX memory_records_embedded_staged ON memory_records"
        " (namespace, embedded_xid, record_id) WHERE embedding_staged IS NOT NULL"
    )
    kept = sql.execute("SELECT 'memory_records_embedded_staged'::regclass::oid").fetchone()

    assert store.swap_staged(NEW)
    assert sql.execute("SELECT 'memory_records_embedded'::regclass::oid").fetchone() == kept
    assert sql.execute(VALID, ("memory_records_embedding",)).fetchone() == (True,)
    some, vector = sql.execute("SELECT record_id, embedding FROM memory_records").fetchone()  # type: ignore[misc]
    assert _nearest_by_index(sql, vector.to_numpy()) == some


class _Retries(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.seen = threading.Event()

    def emit(self, record: logging.LogRecord) -> None:
        if "no lock within" in record.getMessage():
            self.seen.set()


@pytest.fixture
def retries(monkeypatch: pytest.MonkeyPatch) -> Iterator[_Retries]:
    """Short waits for the lock, so these tests do not sit out the real ones."""
    monkeypatch.setattr(pg_vectors, "SWAP_LOCK_TIMEOUT", "50ms")
    monkeypatch.setattr(pg_vectors, "SWAP_PAUSE_S", 0.01)
    handler = _Retries()
    logger = logging.getLogger(pg_vectors.__name__)
    logger.addHandler(handler)
    old_level = logger.level
    logger.setLevel(logging.INFO)
    yield handler
    logger.removeHandler(handler)
    logger.setLevel(old_level)


def _indexes_built(store: PostgresStorage) -> None:
    """The staged column's indexes, as the swap builds them first: CREATE INDEX
    CONCURRENTLY waits for the transactions that hold the table, as a swap does."""
    with store._db.connection() as conn:
        pg_vectors._build_staged_indexes(conn)


def test_a_writer_of_vectors_holding_its_transaction_delays_the_swap(
    store: PostgresStorage,
    sql: psycopg.Connection,
    retries: _Retries,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(pg_vectors, "SWAP_ATTEMPTS", 1_000_000)  # until the writer ends
    _indexes_built(store)
    done: list[bool] = []
    some, staged = sql.execute(
        "SELECT record_id, embedding_staged FROM memory_records LIMIT 1"
    ).fetchone()  # type: ignore[misc]
    with store.transaction() as tx:
        assert tx.embedding_models().model == OLD
        tx.put_embedding(some, _vector(60))  # the service re-embeds a record
        swap = threading.Thread(target=lambda: done.append(store.swap_staged(NEW)))
        swap.start()
        assert retries.seen.wait(WAIT_S)  # it gave up the lock at least once, and retries
        assert not done
    swap.join(WAIT_S)
    assert done == [True]
    assert store.embedding_models().model == NEW
    assert np.allclose(_column(store)[some], staged.to_numpy())  # the staged one won


def test_a_swap_that_never_gets_the_lock_says_who_holds_it_and_changes_nothing(
    store: PostgresStorage, retries: _Retries, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(pg_vectors, "SWAP_ATTEMPTS", 3)
    _indexes_built(store)
    before = _column(store)
    with store.transaction() as tx:
        assert tx.embedding_models().model == OLD
        with pytest.raises(SwapBlockedError, match=r"waited 50ms for its locks 3 times.*pid \d+"):
            store.swap_staged(NEW)
    models = store.embedding_models()
    assert (models.model, models.staged) == (OLD, NEW)
    after = _column(store)
    assert all(np.array_equal(before[rid], after[rid]) for rid in before)
    assert store.swap_staged(NEW)  # once the writer has ended


def test_statements_prepared_before_the_swap_run_after_it(
    store: PostgresStorage, pg_url: str
) -> None:
    """The pool prepares nothing (``prepare_threshold=None``); a connection that prepares
    every statement runs the ones reading the records before and after the swap (a plan
    whose result changed shape would fail: "cached plan must not change result type")."""
    columns = {"ns": f"{NS}%", "since": -1, "limit": 10}
    search = {
        **columns,
        "since": None,
        "vector": _vector(100),
        "ids": [],
        "model": None,
        "type": None,
        "exact": None,
        "scan": 100,
        "patterns": ["%note%"],
    }
    statements = [
        (pg_vectors.LIST_EMBEDDINGS, columns),
        (pg_vectors.EMBEDDINGS_SNAPSHOT, columns),
        (pg_vectors.MISSING_EMBEDDING, columns),
        (pg_vectors.VECTOR_COSINES, search),
        (pg_search.SEARCH_VECTOR_HNSW, search),
        (pg_search.SEARCH_VECTOR_EXACT, search),
        (pg_search.SEARCH_SUBSTRING, search),
        (f"SELECT {pg_records.RECORD_COLUMNS} FROM memory_records", columns),
    ]
    with psycopg.connect(pg_url, autocommit=True, prepare_threshold=0) as conn:
        register_vector(conn)

        def run_all() -> list[int]:
            return [len(conn.execute(s, p).fetchall()) for s, p in statements]

        before = run_all()
        assert conn.execute("SELECT count(*) FROM pg_prepared_statements").fetchone()[0] > 0  # type: ignore[index]
        assert store.swap_staged(NEW)
        assert run_all() == before
        found = conn.execute(pg_search.SEARCH_VECTOR_EXACT, search).fetchone()
        assert found is not None and found[2] == pytest.approx(1.0)  # the new vectors


def test_an_index_build_short_of_memory_says_so(
    pg_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Past ``maintenance_work_mem`` pgvector builds the graph on disk, several times
    slower, and says so only to the building session: the rebuild passes it on, with
    how to give it more. 1 MB holds the graph of a few hundred of these records."""
    migrate_postgres(pg_url)
    storage = PostgresStorage(pg_url + quote(" -cmaintenance_work_mem=1MB"))
    try:
        _stage(storage, 1200)
        with caplog.at_level(logging.WARNING, logger=pg_vectors.__name__):
            assert storage.swap_staged(NEW)
    finally:
        storage.close()
    said = [r.getMessage() for r in caplog.records if "maintenance_work_mem" in r.getMessage()]
    assert said and "PGOPTIONS='-c maintenance_work_mem=" in said[0]

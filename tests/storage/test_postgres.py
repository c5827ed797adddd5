"""Postgres-only behaviour: schema details, HNSW iterative scan, pool recovery, migrations."""

from __future__ import annotations

import functools
import threading
import time
from datetime import UTC, datetime, timedelta

import numpy as np
import psycopg
import pytest

from tests.threads import race
from wakemark.shared.models import MemoryRecord
from wakemark.shared.retrieval.lexical import search_lexical
from wakemark.shared.storage import SearchQuery, TransientStorageError
from wakemark.shared.storage.migrator import default_directory, discover
from wakemark.shared.storage.postgres import PostgresStorage, connection, migrate_postgres

pytestmark = pytest.mark.postgres

NS = "/actor/a/project/a/"
T0 = datetime(2024, 5, 1, 12, 0, tzinfo=UTC)


def rec(title: str, ns: str = NS, minutes: int = 0, **extra: object) -> MemoryRecord:
    return MemoryRecord(
        namespace=ns, title=title, created_at=T0 + timedelta(minutes=minutes), **extra
    )


def test_schema_has_hnsw_gin_and_plain_vector_storage(store: PostgresStorage, pg_url: str) -> None:
    with psycopg.connect(pg_url) as conn:
        indexes = dict(
            conn.execute(
                "SELECT indexname, indexdef FROM pg_indexes"
                " WHERE tablename IN ('memory_records', 'memory_fts')"
                " AND schemaname = current_schema()"
            ).fetchall()
        )
        storage = conn.execute(
            "SELECT attstorage FROM pg_attribute"
            " WHERE attrelid = 'memory_records'::regclass AND attname = 'embedding'"
        ).fetchone()
    assert "USING hnsw (embedding vector_cosine_ops)" in indexes["memory_records_embedding"]
    assert "USING gin (namespace, tsv)" in indexes["memory_fts_namespace_tsv"]
    assert storage == ("p",)


def test_filtered_hnsw_scan_returns_every_row(store: PostgresStorage, pg_url: str) -> None:
    # 40 'bugfix' rows among 1,000: an HNSW scan without iterative mode stops after
    # ef_search (40) candidates and keeps only the ~4 % that pass the filter.
    rng = np.random.default_rng(7)
    with store.transaction() as tx:
        for i in range(1000):
            kind = "bugfix" if i % 25 == 0 else "note"
            r = rec(f"r{i}", minutes=i, observation_type=kind)
            tx.put_memory_record(r)
            tx.put_embedding(r.record_id, rng.standard_normal(384).astype(np.float32))
    query = rng.standard_normal(384).astype(np.float32)
    sql = (
        "SELECT record_id FROM memory_records WHERE observation_type = 'bugfix'"
        " ORDER BY embedding <=> %s LIMIT 40"
    )

    def run(conn: psycopg.Connection) -> tuple[int, str]:
        with conn.transaction():
            conn.execute("SET LOCAL enable_seqscan = off")  # the plan under test: HNSW
            plan = "\n".join(r[0] for r in conn.execute("EXPLAIN " + sql, (query,)))
            return len(conn.execute(sql, (query,)).fetchall()), plan

    with store._db.connection() as conn:  # a pooled connection, configured by the backend
        found, plan = run(conn)
    assert "memory_records_embedding" in plan
    assert found == 40

    from pgvector.psycopg import register_vector

    with psycopg.connect(pg_url, autocommit=True) as bare:  # no iterative scan: the trap
        register_vector(bare)
        assert run(bare)[0] < 40


def test_search_vector_filters_by_namespace(store: PostgresStorage) -> None:
    rng = np.random.default_rng(3)
    mine = set()
    with store.transaction() as tx:
        for i in range(300):
            r = rec(f"r{i}", ns=NS if i % 6 == 0 else "/actor/b/project/b/", minutes=i)
            tx.put_memory_record(r)
            tx.put_embedding(r.record_id, rng.standard_normal(384).astype(np.float32))
            if r.namespace == NS:
                mine.add(r.record_id)
    listed = store.list_embeddings(NS)
    target, target_id = listed.vectors[0], listed.record_ids[0]
    for exact in (False, True):
        hits = store.search_vector(SearchQuery(NS, 40), target, exact=exact)
        assert len(hits) == 40 and {h.record_id for h in hits} <= mine
        assert hits[0].record_id == target_id and abs(hits[0].cosine - 1.0) < 1e-5
        assert len(store.search_vector(SearchQuery("/actor/", 40), target, exact=exact)) == 40


def test_pool_survives_terminated_backend(store: PostgresStorage, pg_url: str) -> None:
    store.ping()
    with store._db.connection() as conn:
        pid = conn.execute("SELECT pg_backend_pid()").fetchone()
    with psycopg.connect(pg_url, autocommit=True) as admin:
        assert admin.execute("SELECT pg_terminate_backend(%s)", pid).fetchone() == (True,)
    # A connection back in the pool less than CHECK_IDLE_S ago is handed out unchecked:
    # the call that meets the dead one fails once (transient), whichever call that is.
    failed = 0
    for _ in range(3):
        try:
            store.stats()
        except TransientStorageError:
            failed += 1
    assert failed <= 1
    assert store.stats()["memories"] == 0
    with store._db.connection() as conn:
        assert conn.execute("SELECT pg_backend_pid()").fetchone() != pid


def test_idle_connection_is_checked_before_use(
    store: PostgresStorage, pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Idle CHECK_IDLE_S or more (here: any time at all), a pooled connection is checked
    # before it is handed out, so one whose server process died is replaced unseen.
    monkeypatch.setattr(connection, "CHECK_IDLE_S", 0.0)
    store.ping()
    with store._db.connection() as conn:
        pid = conn.execute("SELECT pg_backend_pid()").fetchone()
    with psycopg.connect(pg_url, autocommit=True) as admin:
        assert admin.execute("SELECT pg_terminate_backend(%s)", pid).fetchone() == (True,)
    assert store.stats()["memories"] == 0
    with store._db.connection() as conn:
        assert conn.execute("SELECT pg_backend_pid()").fetchone() != pid


def test_connection_goes_back_to_the_pool_in_the_callers_thread(store: PostgresStorage) -> None:
    # Not through a task on the pool's worker thread (as with a reset callback), which
    # would wake it to take the GIL after every statement: the connection is available
    # again the moment the block ends, its return time noted for the idle check.
    store.ping()
    with store._db.connection() as conn:
        conn.execute("SELECT 1")
    pool = store._db._pool
    assert pool is not None
    assert conn in pool._pool  # the pool's idle connections
    assert time.monotonic() - connection._returned[conn] < connection.CHECK_IDLE_S


def test_unreachable_database_is_transient() -> None:
    store = PostgresStorage("postgresql://wakemark@127.0.0.1:1/wakemark_test", timeout=1)
    with pytest.raises(TransientStorageError):
        store.ping()
    store.close()
    with pytest.raises(TransientStorageError):
        migrate_postgres("postgresql://wakemark@127.0.0.1:1/wakemark_test?connect_timeout=1")


def test_concurrent_migrations_apply_once(pg_url: str) -> None:
    results: list[list[str]] = []
    assert race([lambda: results.append(migrate_postgres(pg_url))] * 4) == []
    shipped = discover(default_directory("postgres"))
    # Each migration applied exactly once, by whichever runner got to it first.
    assert sorted(label for r in results for label in r) == [m.label for m in shipped]
    with psycopg.connect(pg_url) as conn:
        rows = conn.execute("SELECT id, name FROM _migrations ORDER BY id").fetchall()
        assert rows == [(m.id, m.name) for m in shipped]


def test_lexeme_df_matches_the_index(store: PostgresStorage, pg_url: str) -> None:
    records = [
        rec("Crème brûlée recipe", summary="burnt sugar on custard", facts=["torch it"]),
        rec("sugar rush", summary="custard again", minutes=1),
        rec("unrelated", facts=["sugar", "src/app/config.py"], minutes=2),
    ]
    for r in records:
        store.put_memory_record(r)
    store.delete_memory_records([records[1].record_id])
    with store.transaction() as tx:
        tx.put_memory_record(rec("late sugar", minutes=3))
    with psycopg.connect(pg_url) as conn:
        conn.execute("UPDATE memory_records SET title = 'renamed' WHERE title = 'unrelated'")
        kept = conn.execute("SELECT lexeme, df FROM lexeme_df WHERE df > 0 ORDER BY 1").fetchall()
        truth = conn.execute(
            "SELECT word, ndoc FROM ts_stat('SELECT tsv FROM memory_fts') ORDER BY 1"
        ).fetchall()
    assert kept == truth
    assert ("sugar", 3) in kept and ("creme", 1) in kept and ("config", 1) in kept


def test_idf_cap_keeps_the_rare_term(store: PostgresStorage) -> None:
    common = [f"word{i}" for i in range(40)]
    for i in range(3):
        store.put_memory_record(rec("common", summary=" ".join(common), minutes=i))
    rare = rec("zyzzyva sighting", minutes=9)
    store.put_memory_record(rare)
    hits = search_lexical(store, NS, " ".join([*common, "zyzzyva"]), 10)
    assert rare.record_id in [h.record.record_id for h in hits]
    # Over the cap without the rare word, only the common records match.
    hits = search_lexical(store, NS, " ".join([*common, "nosuchword"]), 10)
    assert len(hits) == 3 and rare.record_id not in [h.record.record_id for h in hits]


def test_accents_fold_in_documents_and_queries(store: PostgresStorage) -> None:
    r = rec("Crème brûlée", summary="naïve café")
    store.put_memory_record(r)
    for query in ("creme", "BRULEE", "cafe", "naïve"):
        assert [h.record.record_id for h in search_lexical(store, NS, query, 5)] == [r.record_id]


def test_search_survives_lone_surrogates(store: PostgresStorage) -> None:
    r = rec("walrus facts")
    store.put_memory_record(r)
    assert [h.record.record_id for h in search_lexical(store, NS, "walrus \ud800", 5)] == [
        r.record_id
    ]
    assert search_lexical(store, NS, "\udfff", 5) == []


def test_concurrent_writers_share_one_open_turn(store: PostgresStorage) -> None:
    # With no open turn, every first tool_use would open one; the per-session lock makes
    # them queue, so all of them join the same turn (a unique index forbids a second).
    from wakemark.shared.models import Event, new_ulid

    def tool_use(session: str) -> Event:
        return Event(
            event_id=new_ulid(),
            session_id=session,
            actor_id="a",
            namespace=NS,
            kind="tool_use",
            body={"type": "text", "content": "ran"},
            valid_time=T0,
            source={"surface": "test"},
        )

    def post(session: str, turns: list[str | None]) -> None:
        turns.extend(r.turn_id for r in store.put_events([tool_use(session)]))

    for session in ("s1", "s2", "s3"):
        turns: list[str | None] = []
        errors = race([functools.partial(post, session, turns)] * 6)
        assert errors == [] and len(turns) == 6 and len(set(turns)) == 1, (errors, turns)


@pytest.mark.parametrize("pinned_first", [False, True])
def test_one_namespace_lists_in_index_order(
    store: PostgresStorage, pg_url: str, pinned_first: bool
) -> None:
    from wakemark.shared.storage import lexical
    from wakemark.shared.storage.postgres import records as q

    for i in range(5):
        store.put_memory_record(rec(f"r{i}", minutes=i))
    params = {"ns": lexical.namespace_pattern(NS), "exact": NS, "limit": 10,
              "after_at": T0, "after_id": "m", "after_pinned": False}  # fmt: skip
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute("SET enable_sort = off")  # a sort is then chosen only if no index fits
        conn.execute("ANALYZE memory_records")
        for keyset in (False, True):
            sql = q.LIST_RECORDS[pinned_first, True, keyset]
            text = "\n".join(r[0] for r in conn.execute("EXPLAIN " + sql, params).fetchall())
            assert "Sort" not in text, text
            if keyset:  # a deep page seeks past its key: an index condition, not a filter
                conds = [line for line in text.splitlines() if "Index Cond" in line]
                assert any("created_at" in line for line in conds), text
    listed = store.list_memory_records(NS, pinned_first=pinned_first).items
    assert [r.title for r in listed] == [f"r{i}" for i in reversed(range(5))]


def test_pending_extraction_counts_from_the_unextracted_turns(
    store: PostgresStorage, pg_url: str
) -> None:
    # Counting from the events read every event of the namespace on each /v1/stats
    # (18 ms at 20k events, polled by clients waiting for the pipeline to catch up).
    from wakemark.shared.storage import lexical
    from wakemark.shared.storage.postgres import upkeep as q

    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute("SET enable_seqscan = off")  # a scan is then chosen only if no index fits
        plan = conn.execute("EXPLAIN " + q.STATS, {"ns": lexical.namespace_pattern(NS)})
        text = "\n".join(r[0] for r in plan.fetchall())
    assert "turns_pending" in text and "turns_open_session" in text, text
    assert "events_turn" in text, text


def test_transactions_of_many_records_do_not_deadlock(store: PostgresStorage, pg_url: str) -> None:
    # Two extraction jobs, each writing records in one transaction, in crossed word
    # order. Each record's trigger locks its lexeme_df rows, then fts_doc_count: without
    # the records lock, the second job held "beta" and waited for fts_doc_count while
    # the first, holding fts_doc_count, waited for "beta", and Postgres aborted one.
    first_wrote = threading.Event()
    second_wrote = threading.Event()
    errors: list[BaseException] = []

    def job(words: tuple[str, str], wrote: threading.Event, after: threading.Event) -> None:
        try:
            with store.transaction() as tx:
                tx.put_memory_record(rec(words[0]))
                wrote.set()
                after.wait(0.5)  # the other job may be waiting for us: go on regardless
                tx.put_memory_record(rec(words[1]))
        except BaseException as exc:
            errors.append(exc)

    first = threading.Thread(target=job, args=(("alpha", "beta"), first_wrote, second_wrote))
    second = threading.Thread(target=job, args=(("beta", "alpha"), second_wrote, first_wrote))
    first.start()
    assert first_wrote.wait(10)
    second.start()
    first.join(30)
    second.join(30)
    assert errors == []
    with psycopg.connect(pg_url) as conn:
        df = dict(conn.execute("SELECT lexeme, df FROM lexeme_df").fetchall())
        count = conn.execute("SELECT n FROM fts_doc_count").fetchone()
    assert (df["alpha"], df["beta"], count) == (2, 2, (4,))


def test_after_one_wait_for_an_unreachable_database_calls_fail_at_once() -> None:
    store = PostgresStorage("postgresql://wakemark@127.0.0.1:1/wakemark_test", timeout=0.5)
    with pytest.raises(TransientStorageError):
        store.ping()  # waits out the pool timeout once
    for _ in range(5):  # a request's further calls fail without waiting again
        with pytest.raises(TransientStorageError, match="a moment ago"):
            store.stats()
    time.sleep(0.5)
    with pytest.raises(TransientStorageError, match="couldn't get a connection"):
        store.ping()  # the hold is over: it tries again
    store.close()


def test_pool_size_setting_caps_the_connections_held_at_once(pg_url: str) -> None:
    from wakemark.shared.config import Settings
    from wakemark.shared.storage import open_storage

    # The timeout also bounds opening each of the two held connections: on a busy CI box
    # a new Postgres backend can take longer than a fraction of a second to start.
    store = open_storage(Settings(database_url=pg_url, db_pool_size=2, db_timeout_s=2.0))
    assert isinstance(store, PostgresStorage)
    try:
        with store._db.connection() as a, store._db.connection() as b:
            pids = {a.info.backend_pid, b.info.backend_pid}
            with pytest.raises(TransientStorageError), store._db.connection():
                pass  # a third connection waits past the timeout: the pool holds two
        assert len(pids) == 2
    finally:
        store.close()

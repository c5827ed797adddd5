"""Postgres' full-text index held in the process (``postgres.lexicon``) answers as SQLite
does on the same records, and is never used when it is not current: writes through other
connections and transactions (other processes), in any commit order, reach the next
search; past its size, while it is built, the database answers."""

from __future__ import annotations

import random
import threading
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

from tests.storage.conftest import NS, T0
from tests.storage.test_lexicon import _record, _text, random_searches
from wakemark.shared.config import Settings, prepare_home
from wakemark.shared.models import MemoryRecord
from wakemark.shared.retrieval.lexical import search_lexical
from wakemark.shared.storage import Match, SearchQuery, lexicon, migrate, open_storage
from wakemark.shared.storage.postgres import PostgresStorage
from wakemark.shared.storage.postgres import lexicon as pg_lexicon
from wakemark.shared.storage.postgres import search as pg_search
from wakemark.shared.storage.sqlite import fts
from wakemark.shared.storage.sqlite.storage import SqliteStorage

pytestmark = pytest.mark.postgres

OTHER = "/actor/b/project/a/"


@pytest.fixture
def sqlite_plain(settings: Settings) -> Iterator[SqliteStorage]:
    """SQLite through FTS5 alone: the ranking the index reproduces."""
    prepare_home(settings)
    migrate(settings)
    storage = SqliteStorage(settings.sqlite_path, lexicon=False)
    yield storage
    storage.close()


def _ids(found: list[Match] | list[MemoryRecord] | None) -> list[str] | None:
    return None if found is None else [r.record_id for r in found]


def _search(storage: Any, terms: list[str], namespace: str = NS) -> list[str] | None:
    stats = storage.term_stats(terms)
    return _ids(storage.search_terms(SearchQuery(namespace, 10), terms, stats=stats))


def _both(pg: PostgresStorage, sqlite: SqliteStorage, write: Any) -> None:
    for storage in (pg, sqlite):
        with storage.transaction() as tx:
            write(tx)


def _same_answers(pg: PostgresStorage, sqlite: SqliteStorage, rng: random.Random) -> None:
    index = pg.memory_index(wait_s=30)
    assert index is not None
    sqlite._doc_freqs = fts.DocFreqs()  # FTS5's frequencies are cached; count them afresh
    for terms, query in random_searches(rng, T0.replace(hour=20)):
        stats = pg.term_stats(terms)
        assert stats is not None
        assert stats == sqlite.term_stats(terms), terms
        assert pg.memory_index() is index  # still current: what follows is the index's
        found = pg.search_terms(query, terms, stats=stats)
        expected = sqlite.search_terms(query, terms, stats=stats)
        assert _ids(found) == _ids(expected), (query, terms)
        if found is None or expected is None:
            continue
        assert [m.created_ts for m in found] == [m.created_ts for m in expected]
        # Reading only the first few records leaves the ranking and the times as they were.
        read = rng.randint(0, len(found))
        partial = pg.search_terms(query, terms, stats=stats, read=read)
        assert partial is not None
        assert [(m.record_id, m.created_ts) for m in partial] == [
            (m.record_id, m.created_ts) for m in found
        ]
        assert [m.record for m in partial] == [m.record for m in found[:read]] + [None] * (
            len(found) - read
        )


def test_the_index_answers_as_sqlite_as_records_come_change_and_go(
    store: PostgresStorage, sqlite_plain: SqliteStorage, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Every phrase of three stems recounted: Postgres asks its own ranking for the broad
    # ones (test_a_phrase_too_broad_to_recount_is_left_to_the_database).
    monkeypatch.setattr(lexicon, "RECOUNT_MAX", 10_000)
    rng = random.Random(3)
    # In order of creation: Postgres numbers the build's slots by age, SQLite by insertion.
    records = sorted((_record(rng) for _ in range(300)), key=lambda r: r.created_at)
    _both(store, sqlite_plain, lambda tx: [tx.put_memory_record(r) for r in records])
    _same_answers(store, sqlite_plain, rng)

    more = [
        _record(rng).model_copy(update={"created_at": T0.replace(year=2025)}) for _ in range(40)
    ]
    _both(store, sqlite_plain, lambda tx: [tx.put_memory_record(r) for r in more])
    _same_answers(store, sqlite_plain, rng)

    edits = [r.model_copy(update={"title": _text(rng, 4)}) for r in rng.sample(records, 20)]
    _both(store, sqlite_plain, lambda tx: [tx.replace_record_text(r) for r in edits])
    _same_answers(store, sqlite_plain, rng)

    gone = [r.record_id for r in records[:30]]
    _both(store, sqlite_plain, lambda tx: tx.delete_memory_records(gone))
    _same_answers(store, sqlite_plain, rng)


def _elsewhere(pg_url: str, sql: str, *params: Any) -> None:
    """A statement committed by another connection (another process's)."""
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute(sql, params)


def test_writes_through_other_connections_reach_the_next_search(
    store: PostgresStorage, pg_url: str
) -> None:
    first = MemoryRecord(namespace=NS, title="walrus tusks", created_at=T0)
    store.put_memory_record(first)
    assert store.memory_index(wait_s=30) is not None
    assert _search(store, ["walrus"]) == [first.record_id]

    other = PostgresStorage(pg_url)  # another process's storage
    try:
        added = MemoryRecord(namespace=NS, title="zebra crossing", created_at=T0)
        other.put_memory_record(added)
        assert _search(store, ["zebra"]) == [added.record_id]

        other.edit_memory_record(first.record_id, title="narwhal horn")
        assert _search(store, ["walrus"]) == []
        assert _search(store, ["narwhal"]) == [first.record_id]
    finally:
        other.close()

    _elsewhere(pg_url, "UPDATE memory_records SET namespace = %s WHERE record_id = %s",
               OTHER, added.record_id)  # fmt: skip
    assert _search(store, ["zebra"]) == []
    assert _search(store, ["zebra"], OTHER) == [added.record_id]

    _elsewhere(pg_url, "DELETE FROM memory_records WHERE record_id = %s", first.record_id)
    assert _search(store, ["narwhal"]) == []
    assert store.memory_index(wait_s=30) is not None  # current again, not dropped


def test_a_record_deleted_elsewhere_is_never_found_through_the_prepared_check(
    store: PostgresStorage, pg_url: str
) -> None:
    """The check and the records' read are one statement, prepared once per connection:
    a delete committed elsewhere after it was prepared (and its generic plan made) still
    keeps the record out of the next search. A session that lost the statement prepares
    it again."""
    kept, doomed = (MemoryRecord(namespace=NS, title=f"walrus {t}", created_at=T0) for t in "ab")
    for r in (kept, doomed):
        store.put_memory_record(r)
    assert store.memory_index(wait_s=30) is not None

    def unread() -> list[str]:  # no record read: the check alone vouches for the ids
        stats = store.term_stats(["walrus"])
        assert stats is not None
        found = store.search_terms(SearchQuery(NS, 10), ["walrus"], stats=stats, read=0)
        return sorted(_ids(found) or [])

    for _ in range(3):  # prepared on the pooled connections the searches take
        assert unread() == sorted([kept.record_id, doomed.record_id])
    _elsewhere(pg_url, "DELETE FROM memory_records WHERE record_id = %s", doomed.record_id)
    for _ in range(3):
        assert unread() == [kept.record_id]
    snap = store.memory_index(wait_s=30)
    assert snap is not None  # refreshed, and used again
    params = {**snap.check_params, "ids": [kept.record_id], "ns": NS}
    with psycopg.connect(pg_url, autocommit=True) as conn:
        rows = pg_search._checked_records(conn, params, None)
        assert [r[2] for r in rows] == [kept.record_id] and snap.holds(*rows[0][:2])
        conn.execute("DEALLOCATE ALL")
        with pytest.raises(psycopg.Error):
            pg_search._checked_records(conn, params, None)
        assert pg_search._checked_records(conn, params, None) == rows


def test_a_transaction_that_commits_after_a_later_one_is_seen(
    store: PostgresStorage, pg_url: str
) -> None:
    """A sequence stamped at the write would miss it: the later transaction's stamps are
    higher, and read first."""
    early = MemoryRecord(namespace=NS, title="walrus", created_at=T0)
    late = MemoryRecord(namespace=NS, title="zebra", created_at=T0)
    for r in (early, late):
        store.put_memory_record(r)
    assert store.memory_index(wait_s=30) is not None
    edit = "UPDATE memory_records SET title = %s WHERE record_id = %s"
    with psycopg.connect(pg_url) as first, psycopg.connect(pg_url) as second:
        first.execute(edit, ("narwhal", early.record_id))  # its transaction id comes first
        second.execute(edit, ("okapi", late.record_id))
        second.commit()
        assert _search(store, ["okapi"]) == [late.record_id]
        assert store.memory_index(wait_s=30) is not None  # refreshed while the first is open
        assert _search(store, ["narwhal"]) == []
        first.commit()
    assert _search(store, ["narwhal"]) == [early.record_id]
    assert _search(store, ["walrus"]) == []


@pytest.fixture
def two_store(pg_url: str, sql_store: PostgresStorage) -> Iterator[PostgresStorage]:
    """As ``store``, holding the index of two records at most (``text_index_records``)."""
    storage = open_storage(Settings(database_url=pg_url, text_index_records=2))
    assert isinstance(storage, PostgresStorage)
    yield storage
    storage.close()


def test_past_its_size_the_database_answers(
    two_store: PostgresStorage, sql_store: PostgresStorage, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = two_store
    memory = store._memory
    assert memory is not None
    records = [MemoryRecord(namespace=NS, title=f"walrus {i}", created_at=T0) for i in range(3)]
    for r in records:
        store.put_memory_record(r)
    assert store.memory_index(wait_s=30) is None
    assert store.memory_index(wait_s=30) is None  # not tried again within RETRY_S
    assert _search(store, ["walrus"]) == _search(sql_store, ["walrus"])

    monkeypatch.setattr(pg_lexicon, "RETRY_S", 0.0)
    memory.lexicon._retry_s = 0.0
    store.delete_memory_records([records[0].record_id])
    assert store.memory_index(wait_s=30) is not None
    store.put_memory_record(records[0])  # grown past it again: the index is dropped
    assert store.memory_index(wait_s=30) is None
    assert _search(store, ["walrus"]) == _search(sql_store, ["walrus"])


def test_while_the_index_is_built_the_database_answers(
    store: PostgresStorage, sql_store: PostgresStorage, monkeypatch: pytest.MonkeyPatch
) -> None:
    memory = store._memory
    assert memory is not None
    records = [MemoryRecord(namespace=NS, title=f"walrus {i}", created_at=T0) for i in range(3)]
    for r in records:
        store.put_memory_record(r)
    release = threading.Event()
    build = memory._build

    def slow_build() -> pg_lexicon.Snapshot | None:
        release.wait(30)
        return build()

    monkeypatch.setattr(memory.lexicon, "_build", slow_build)
    store.warm_up()
    assert store.memory_index() is None
    assert search_lexical(store, NS, "walrus", 10) == search_lexical(sql_store, NS, "walrus", 10)
    release.set()
    assert store.memory_index(wait_s=30) is not None
    assert _search(store, ["walrus"]) == _search(sql_store, ["walrus"])


def test_a_process_that_never_warms_up_never_builds_the_index(
    store: PostgresStorage, sql_store: PostgresStorage
) -> None:
    """A one-shot process (the CLI, a Celery worker) searches through Postgres and pays
    for no build; a server's warm-up builds it."""
    memory = store._memory
    assert memory is not None
    for i in range(3):
        store.put_memory_record(MemoryRecord(namespace=NS, title=f"walrus {i}", created_at=T0))
    for _ in range(3):
        assert search_lexical(store, NS, "walrus", 10) == search_lexical(
            sql_store, NS, "walrus", 10
        )
    assert memory.latest is None
    assert memory.lexicon._job is None  # no build was ever started
    store.warm_up()
    assert store.memory_index(wait_s=30) is not None
    assert _search(store, ["walrus"]) == _search(sql_store, ["walrus"])


def test_a_phrase_too_broad_to_recount_is_left_to_the_database(
    store: PostgresStorage, sql_store: PostgresStorage, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(lexicon, "RECOUNT_MAX", 2)
    for i, title in enumerate(("foo bar baz", "foo bar baz foo", "bar baz foo bar", "qux")):
        store.put_memory_record(
            MemoryRecord(namespace=NS, title=title, created_at=T0.replace(minute=i))
        )
    assert store.memory_index(wait_s=30) is not None
    stats = sql_store.term_stats(["foo_bar_baz"])
    assert stats is not None
    query = SearchQuery(NS, 10)
    found = store.search_terms(query, ["foo_bar_baz"], stats=stats)
    assert _ids(found) == _ids(sql_store.search_terms(query, ["foo_bar_baz"], stats=stats))
    assert _search(store, ["qux"]) == _search(sql_store, ["qux"])


def test_an_index_that_fails_leaves_the_search_to_the_database(
    store: PostgresStorage, sql_store: PostgresStorage, monkeypatch: pytest.MonkeyPatch
) -> None:
    for i in range(3):
        store.put_memory_record(MemoryRecord(namespace=NS, title=f"walrus {i}", created_at=T0))
    assert store.memory_index(wait_s=30) is not None

    def broken(*_: Any) -> None:
        raise RuntimeError("a fault in the index")

    monkeypatch.setattr(pg_lexicon.Snapshot, "ranked", broken)
    expected = _search(sql_store, ["walrus"])
    assert expected is not None and len(expected) == 3
    assert _search(store, ["walrus"]) == expected

"""Postgres full-text search: the memory_fts table (migration 0004) and the ranking window."""

from __future__ import annotations

import shutil
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest

from wakemark.shared.models import MemoryRecord
from wakemark.shared.retrieval.lexical import search_lexical
from wakemark.shared.storage import SearchQuery
from wakemark.shared.storage.migrator import default_directory
from wakemark.shared.storage.postgres import PostgresStorage, migrate_postgres
from wakemark.shared.storage.postgres import storage as pg

pytestmark = pytest.mark.postgres

NS = "/actor/a/project/a/"
T0 = datetime(2024, 5, 1, 12, 0, tzinfo=UTC)

# memory_fts as it should be: one row per record, its tsv the indexed document.
EXPECTED_FTS = """
SELECT record_id, namespace, created_at, observation_type,
       wakemark_fts_doc(title, summary, facts)::text
  FROM memory_records ORDER BY record_id
"""
ACTUAL_FTS = """
SELECT record_id, namespace, created_at, observation_type, tsv::text
  FROM memory_fts ORDER BY record_id
"""
LEXEMES = "SELECT lexeme, df FROM lexeme_df WHERE df > 0 ORDER BY 1"
TRUTH = "SELECT word, ndoc FROM ts_stat('SELECT tsv FROM memory_fts') ORDER BY 1"


def rec(title: str, minutes: int = 0, **extra: Any) -> MemoryRecord:
    return MemoryRecord(
        namespace=NS, title=title, created_at=T0 + timedelta(minutes=minutes), **extra
    )


def ids(hits: list[Any]) -> list[str]:
    return [h.record.record_id for h in hits]


def query(url: str, sql: str) -> list[tuple[Any, ...]]:
    with psycopg.connect(url) as conn:
        return [tuple(r) for r in conn.execute(sql).fetchall()]


def test_memory_fts_follows_every_write(store: PostgresStorage, pg_url: str) -> None:
    records = [rec(f"walrus {i}", minutes=i, summary="tusks") for i in range(4)]
    for r in records:
        store.put_memory_record(r)
    store.delete_memory_records([records[0].record_id])
    store.set_pinned(records[1].record_id, True)
    with psycopg.connect(pg_url) as conn:
        conn.execute(
            "UPDATE memory_records SET title = 'narwhal', observation_type = 'decision'"
            " WHERE record_id = %s",
            (records[2].record_id,),
        )
        # Text unchanged (a project moved, a type corrected): the row follows, its tsv
        # and the lexemes' counts stay (migration 0026).
        conn.execute(
            "UPDATE memory_records SET namespace = '/actor/a/project/b/' WHERE record_id = %s",
            (records[3].record_id,),
        )
        conn.execute(
            "UPDATE memory_records SET observation_type = 'bugfix' WHERE record_id = %s",
            (records[1].record_id,),
        )
    assert len(query(pg_url, ACTUAL_FTS)) == 3
    assert query(pg_url, ACTUAL_FTS) == query(pg_url, EXPECTED_FTS)
    assert query(pg_url, LEXEMES) == query(pg_url, TRUTH)
    assert query(pg_url, "SELECT n FROM fts_doc_count") == [(3,)]
    assert ids(search_lexical(store, NS, "narwhal", 5, observation_type="decision")) == [
        records[2].record_id
    ]


def test_migration_moves_existing_records_to_memory_fts(pg_url: str, tmp_path: Path) -> None:
    before = tmp_path / "0001-0003"
    before.mkdir()
    for path in sorted(default_directory("postgres").glob("000[123]_*.sql")):
        shutil.copy(path, before)
    migrate_postgres(pg_url, before)
    store = PostgresStorage(pg_url)
    try:
        old = [rec("legacy parser", minutes=i, facts=["src/app/cli.py"]) for i in range(3)]
        for r in old:
            store.put_memory_record(r)
        store.delete_memory_records([old[0].record_id])
        assert "0004_memory_fts" in migrate_postgres(pg_url)
        assert query(pg_url, ACTUAL_FTS) == query(pg_url, EXPECTED_FTS)
        assert query(pg_url, LEXEMES) == query(pg_url, TRUTH)
        assert ("parser", 2) in query(pg_url, LEXEMES)
        assert query(pg_url, "SELECT n FROM fts_doc_count") == [(2,)]
        tsv = "SELECT table_name FROM information_schema.columns"
        tsv += " WHERE column_name = 'tsv' AND table_schema = current_schema()"
        assert query(pg_url, tsv) == [("memory_fts",)]
        new = rec("legacy parser again", minutes=9)
        store.put_memory_record(new)
        expected = [old[2].record_id, old[1].record_id, new.record_id]  # cli ranks them up
        assert ids(search_lexical(store, NS, "parser cli", 10)) == expected
        assert query(pg_url, "SELECT n FROM fts_doc_count") == [(3,)]
    finally:
        store.close()


def test_ranking_window_holds_the_newest_matches(
    sql_store: PostgresStorage, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = sql_store
    best = rec("walrus walrus", minutes=0)  # the best match, and the oldest
    weak = [rec("note", minutes=i, facts=["walrus"]) for i in range(1, 4)]
    rare = rec("zebra", minutes=4)
    others = [rec(f"unrelated {i}", minutes=i) for i in range(5, 12)]
    for r in (best, *weak, rare, *others):
        store.put_memory_record(r)
    assert ids(search_lexical(store, NS, "walrus", 1)) == [best.record_id]
    monkeypatch.setattr(pg.PostgresStorage, "fts_window", 2)
    # Only the two newest matches are ranked; the best one is older than both.
    assert ids(search_lexical(store, NS, "walrus", 1)) == [weak[2].record_id]
    # The window never holds fewer rows than asked for.
    assert ids(search_lexical(store, NS, "walrus", 4))[0] == best.record_id
    # It counts matches, not records: newer records without the term take no room.
    assert ids(search_lexical(store, NS, "zebra", 1)) == [rare.record_id]
    assert ids(search_lexical(store, "/actor/a/", "walrus", 1)) == [weak[2].record_id]


def test_one_namespace_takes_its_matches_from_the_namespace_word_index(
    store: PostgresStorage, pg_url: str
) -> None:
    from wakemark.shared.storage.postgres import search as q

    for i in range(6):
        store.put_memory_record(rec(f"walrus {i}", minutes=i))
    params = {**q._search_params(SearchQuery(NS, 10)), "tsquery": "walrus", "window": 2000}
    with psycopg.connect(pg_url, autocommit=True) as conn:
        # The bitmap path only, as the planner takes it for a rare term in a big project.
        for setting in ("enable_seqscan", "enable_indexscan"):
            conn.execute(f"SET {setting} = off")
        conn.execute("ANALYZE memory_fts")
        plan = [r[0] for r in conn.execute("EXPLAIN " + q.SEARCH_FTS[True], params).fetchall()]
        conds = [line for line in plan if "Index Cond" in line]
        assert any("namespace =" in c and "@@" in c for c in conds), "\n".join(plan)
        # The statement of one namespace has its equality only: the planner's estimate
        # then counts the project's rows once.
        assert "~~" not in "\n".join(plan)
    assert len(search_lexical(store, NS, "walrus", 10)) == 6
    assert search_lexical(store, "/actor/a/", "walrus", 10)[0].record.namespace == NS


def test_one_namespace_takes_its_fragments_from_the_namespace_trigram_index(
    store: PostgresStorage, pg_url: str
) -> None:
    from wakemark.shared.storage.postgres import search as q

    other = "/actor/a/project/b/"
    for i in range(6):
        store.put_memory_record(rec(f"fix in cache_deadlock {i}", minutes=i))
        store.put_memory_record(rec(f"fix in cache_deadlock {i}", minutes=i).model_copy(
            update={"record_id": f"mr_{'B' * 25}{i}", "namespace": other}
        ))  # fmt: skip
    params = {**q._search_params(SearchQuery(NS, 10)), "pattern": "%deadlock%", "candidates": 800}
    with psycopg.connect(pg_url, autocommit=True) as conn:
        indexdef = conn.execute(
            "SELECT indexdef FROM pg_indexes WHERE indexname = 'memory_records_namespace_trgm'"
            " AND schemaname = current_schema()"
        ).fetchone()
        assert indexdef and "gin (namespace, wakemark_trgm_text(" in indexdef[0]
        conn.execute("ANALYZE memory_records")
        with conn.transaction(force_rollback=True):
            # The plan of a big project, whose btree range the planner would not read
            # whole: with those indexes gone and no sequential scan, only the trigram one.
            for index in ("pinned_first", "namespace_recent", "embedded"):
                conn.execute(f"DROP INDEX memory_records_{index}")
            conn.execute("SET LOCAL enable_seqscan = off")
            plan = "\n".join(
                r[0] for r in conn.execute("EXPLAIN " + q.SEARCH_TRIGRAM[True], params)
            )
        conds = [line for line in plan.splitlines() if "Index Cond" in line]
        assert any("namespace =" in c and "~~*" in c for c in conds), plan
    found = store.search_fragments(SearchQuery(NS, 10), ["deadlock"])
    assert len(found) == 6 and {r.namespace for r in found} == {NS}
    assert {
        r.namespace for r in store.search_fragments(SearchQuery("/actor/a/", 20), ["deadlock"])
    } == {NS, other}

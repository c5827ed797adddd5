"""The trigram leg: CJK words and identifier parts the word index cannot see, on each
backend, through the whole search (fusion, hydration, the relevance gate)."""

from __future__ import annotations

import logging
import time

import psycopg
import pytest

from tests.retrieval.conftest import NS, make_record, put
from wakemark.shared.config import Settings
from wakemark.shared.retrieval.legs import TrigramLeg, fragments
from wakemark.shared.retrieval.lexical import search_lexical
from wakemark.shared.runtime import Runtime
from wakemark.shared.storage import SearchQuery, migrate

CHINESE = make_record(NS, "数据库连接池的配置", 0, summary="连接池大小设为二十")
JAPANESE = make_record(NS, "記憶の管理について", 1, summary="セッションごとに記憶を保存する")
LOADER = make_record(
    NS, "Slow first search after restart", 2,
    facts=["warm_vector_cache_loader reads every embedding before the first query"],
)  # fmt: skip
ENGLISH = make_record(NS, "Redis timeout in the webhook worker", 3, summary="raised to 5 s")


def _hits(runtime: Runtime, query: str) -> list[tuple[str, str]]:
    return [(h.record.record_id, h.match_source) for h in runtime.retriever.search(NS, query).items]


def test_fragments_of_cjk_runs_and_long_identifiers() -> None:
    assert fragments("连接池") == ["连接", "接池"]
    assert fragments("記憶の管理") == ["記憶", "憶の", "の管", "管理"]
    assert fragments("把 池 配好") == ["把", "池", "配好"]  # a one-character run is itself
    assert fragments("VectorCache misses") == ["VectorCache", "Vector", "Cache"]
    assert fragments("see warm_vector_cache_loader") == [
        "warm_vector_cache_loader", "warm", "vector", "cache", "loader",
    ]  # fmt: skip
    # Ordinary prose and short identifiers are the lexical leg's alone.
    assert fragments("why does the webhook worker time out") == []
    assert fragments("fix os.path and getId") == []


def test_a_two_character_query_finds_chinese_and_japanese_notes(runtime: Runtime) -> None:
    put(runtime, [CHINESE, JAPANESE, LOADER, ENGLISH])
    assert _hits(runtime, "连接") == [(CHINESE.record_id, "trigram")]
    assert _hits(runtime, "記憶") == [(JAPANESE.record_id, "trigram")]
    # The word index alone never matched them: a CJK run is one token to it.
    assert search_lexical(runtime.storage, NS, "连接", 10) == []


def test_a_part_of_a_long_identifier_is_found(runtime: Runtime) -> None:
    headers = make_record(NS, "Cache headers on the static files", 4)
    put(runtime, [CHINESE, LOADER, ENGLISH, headers])
    # Every part, or the whole: "cache" alone is a common word, not the identifier.
    assert _hits(runtime, "VectorCache") == [(LOADER.record_id, "trigram")]
    # Found by both legs when the query names the whole identifier.
    assert _hits(runtime, "warm_vector_cache_loader") == [(LOADER.record_id, "hybrid")]


def test_an_identifier_is_left_to_the_lexical_leg_when_it_has_enough_candidates(
    runtime: Runtime,
) -> None:
    # 40 records (the lexical leg's depth for 10 hits) hold a word of the query: its list
    # is full, and substring hits of the identifier's parts would only push them down.
    misses = [make_record(NS, f"Cache misses in worker {i}", 10 + i) for i in range(40)]
    put(runtime, [LOADER, *misses])
    ids = [rid for rid, _ in _hits(runtime, "VectorCache misses")]
    assert len(ids) == 10 and LOADER.record_id not in ids
    assert {source for _, source in _hits(runtime, "VectorCache misses")} == {"fts"}
    # Short of candidates ("restart" is in one record), the trigram leg runs: "hybrid" is
    # the lexical leg's hit found again by the identifier's parts.
    assert _hits(runtime, "VectorCache restart") == [(LOADER.record_id, "hybrid")]


def test_an_english_query_is_left_to_the_other_legs(runtime: Runtime) -> None:
    put(runtime, [CHINESE, JAPANESE, LOADER, ENGLISH])
    query = "redis timeout webhook"
    assert TrigramLeg(runtime.storage).search(SearchQuery(NS, 20), query) == []
    lexical = search_lexical(runtime.storage, NS, query, 20)
    assert _hits(runtime, query) == [(h.record.record_id, "fts") for h in lexical]
    assert _hits(runtime, query) == [(ENGLISH.record_id, "fts")]


def test_trigram_only_hits_pass_through_the_relevance_gate(runtime: Runtime) -> None:
    put(runtime, [CHINESE, JAPANESE])
    [hit] = runtime.retriever.search(NS, "连接池").items
    # The trigram hit is the prompt's lexical evidence (the word index has none), its CJK
    # pieces the terms it covers.
    assert hit.evidence is not None and hit.evidence.lexical_rank == 0
    assert hit.evidence.coverage == 1.0 and 0.0 <= hit.relevance <= 1.0
    # "How should the database connection pool size be configured?"
    block = runtime.retriever.for_prompt(NS, "数据库连接池的大小怎么配置")
    assert block.records == [CHINESE.record_id] and "数据库连接池的配置" in block.context
    assert runtime.retriever.for_prompt(NS, "天气怎么样").records == []  # "how's the weather"
    assert runtime.retriever.metrics()["errors"] == 0


# The text the trigram index's matches are checked against, a second per row: the trigram
# statement, and only it, becomes as slow as on a namespace of a million records.
SLOW_TRGM_TEXT = """
CREATE OR REPLACE FUNCTION wakemark_trgm_text(title text, summary text, facts text[])
RETURNS text LANGUAGE plpgsql IMMUTABLE AS $$
BEGIN
  PERFORM pg_sleep(1);
  RETURN coalesce(title, '') || ' ' || coalesce(summary, '') || ' '
         || coalesce(array_to_string(facts, ' '), '');
END $$
"""
RUNNING_TRGM = """
SELECT count(*) FROM pg_stat_activity
 WHERE state = 'active' AND pid <> pg_backend_pid() AND query LIKE '%%wakemark_trgm_text%%'
"""


@pytest.mark.postgres
def test_a_slow_trigram_statement_is_cancelled_and_the_search_answers_without_it(
    settings: Settings, pg_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    settings = settings.replace(database_url=pg_url, retrieval_budget_ms=500)
    migrate(settings)
    rt = Runtime.build(settings)
    try:
        put(rt, [LOADER, ENGLISH])
        with psycopg.connect(pg_url, autocommit=True) as conn:
            conn.execute(SLOW_TRGM_TEXT)
            began = time.perf_counter()
            assert rt.storage.search_fragments(SearchQuery(NS, 10), ["loader"]) == [LOADER]
            assert time.perf_counter() - began >= 1.0  # unbounded, it runs its course
            with caplog.at_level(logging.WARNING, logger="wakemark.shared.retrieval"):
                # One lexical hit ("restart"): the trigram leg runs, for five fragments.
                result = rt.retriever.search(NS, "warm_vector_cache_loader restart")
            # Answered by the lexical leg before the deadline, the trigram leg cancelled
            # (a statement that ran its course would have taken a second or more).
            assert [(h.record.record_id, h.match_source) for h in result.items] == [
                (LOADER.record_id, "fts")
            ]
            assert result.degraded and result.latency_ms < 1000
            assert any("trigram: fragment search past" in r.getMessage() for r in caplog.records)
            assert conn.execute(RUNNING_TRGM).fetchone() == (0,)  # nothing left running
        metrics = rt.retriever.metrics()
        assert metrics["timeouts"] == 0 and metrics["degraded_rate"] == 1.0
    finally:
        rt.close()

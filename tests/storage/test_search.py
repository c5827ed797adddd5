"""Search, the storage contract: each test runs on each backend (``storage``)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from hypothesis import HealthCheck, given
from hypothesis import settings as hsettings
from hypothesis import strategies as st

from tests.storage.conftest import NS, T0, event, record, vec
from wakemark.shared.retrieval.lexical import search_lexical
from wakemark.shared.storage import SearchQuery, Storage


def ids_of(hits: list[Any]) -> list[str]:
    return [h.record.record_id for h in hits]


def test_search_ranks_title_above_summary_above_facts(storage: Storage) -> None:
    in_facts = record("one", facts=["the walrus detail"], minutes=3)
    in_summary = record("two", summary="a walrus here", minutes=2)
    in_title = record("walrus three", minutes=1)
    for r in (in_facts, in_summary, in_title):
        storage.put_memory_record(r)
    hits = search_lexical(storage, NS, "Walrus?", 10)
    assert ids_of(hits) == [in_title.record_id, in_summary.record_id, in_facts.record_id]
    assert [h.rank for h in hits] == [0, 1, 2]


def test_search_weighs_a_rare_word_above_common_ones(storage: Storage) -> None:
    # BM25 on both backends: the record holding the query's rarest word comes first, before
    # those holding only its two common words (weighing each word alike, Postgres' ts_rank
    # alone puts two matched words above one).
    common = [record(f"template loader fix number {i}", minutes=i) for i in range(5)]
    others = [record(f"unrelated chore {i}", minutes=20 + i) for i in range(18)]
    rare = record("sandbox escape", minutes=1)
    for r in [*common, *others, rare]:
        storage.put_memory_record(r)
    hits = search_lexical(storage, NS, "template loader sandbox", 10)
    assert ids_of(hits) == [rare.record_id, *(r.record_id for r in reversed(common))]


def test_search_ties_break_by_recency_then_id(storage: Storage) -> None:
    same = [record("identical walrus", minutes=1) for _ in range(2)]
    newer = record("identical walrus", minutes=2)
    for r in [*same, newer]:
        storage.put_memory_record(r)
    expected = [newer.record_id, *sorted(r.record_id for r in same)]
    assert ids_of(search_lexical(storage, NS, "walrus", 10)) == expected


def test_search_ties_at_the_limit_break_by_recency_then_id(storage: Storage) -> None:
    # Inserted out of creation order, more tied rows than the limit: the cut keeps the
    # newest by created_at, then the lowest ids, whatever order the index holds them in.
    minutes = [3, 9, 1, 7, 5, 9, 2, 8, 4, 6, 0]
    same = [record("identical walrus", minutes=m) for m in minutes]
    for r in same:
        storage.put_memory_record(r)
    expected = [
        r.record_id for r in sorted(same, key=lambda r: (-r.created_at.timestamp(), r.record_id))
    ]
    for limit in (1, 2, 3, 5, 11):
        assert ids_of(search_lexical(storage, NS, "walrus", limit)) == expected[:limit], limit


def test_search_filters_and_limit(storage: Storage) -> None:
    old = record("walrus old", observation_type="bugfix", minutes=1)
    new = record("walrus new", observation_type="decision", minutes=10)
    for r in (old, new):
        storage.put_memory_record(r)
    assert ids_of(search_lexical(storage, NS, "walrus", 10, observation_type="bugfix")) == [
        old.record_id
    ]
    assert ids_of(search_lexical(storage, NS, "walrus", 10, since=T0 + timedelta(minutes=5))) == [
        new.record_id
    ]
    assert len(search_lexical(storage, NS, "walrus", 1)) == 1
    # The substring fallback honours the same filters.
    assert ids_of(search_lexical(storage, NS, "w", 10, observation_type="bugfix")) == [
        old.record_id
    ]
    assert ids_of(search_lexical(storage, NS, "w", 10, since=T0 + timedelta(minutes=5))) == [
        new.record_id
    ]


def test_search_identifiers_and_operators_are_plain_words(storage: Storage) -> None:
    rec = record("fixed parse_args in cli.py", summary="NOT a NEAR miss")
    storage.put_memory_record(rec)
    for query in ("parse_args", "cli.py", "NOT", "near(", '"parse_args', "title:fixed", "fix*"):
        assert ids_of(search_lexical(storage, NS, query, 5)) == [rec.record_id], query


def test_search_falls_back_to_escaped_substring(storage: Storage) -> None:
    cpp = record("C++ templates", minutes=1)
    pct = record("coverage at 100% now", minutes=2)
    under = record("snake a_b case", minutes=3)
    plain = record("axb plain", minutes=4)
    for r in (cpp, pct, under, plain):
        storage.put_memory_record(r)
    assert ids_of(search_lexical(storage, NS, "C++", 10)) == [cpp.record_id]
    assert ids_of(search_lexical(storage, NS, "%", 10)) == [pct.record_id]
    assert ids_of(search_lexical(storage, NS, "_", 10)) == [under.record_id]
    assert ids_of(search_lexical(storage, NS, "\\", 10)) == []
    assert search_lexical(storage, NS, "", 10) == []
    assert search_lexical(storage, NS, "   ", 10) == []


def test_long_query_keeps_the_rarest_terms(storage: Storage) -> None:
    common = " ".join(f"common{i}" for i in range(40))
    # The oldest record: it comes first only if "zebra" survives the 32-term cap.
    rare = record("entry", summary=f"{common} zebra", minutes=0)
    others = [record("entry", summary=common, minutes=i) for i in range(1, 4)]
    for r in (rare, *others):
        storage.put_memory_record(r)
    hits = search_lexical(storage, NS, f"{common} zebra", 10)
    assert ids_of(hits)[0] == rare.record_id and len(hits) == 4


HOSTILE = st.text(
    alphabet=st.one_of(
        st.sampled_from(list("ANDORNOTNEAR*^:()\"'%_\\\x00-+{}[]~ \ud800\udfff")),
        st.characters(),
    ),
    max_size=80,
)


@hsettings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(query=HOSTILE)
def test_search_never_raises(storage: Storage, query: str) -> None:
    if not storage.list_memory_records(NS, limit=1).total:
        storage.put_memory_record(record('weird AND "quoted" 100% a_b \\ NEAR(x) col:on'))
    hits = search_lexical(storage, NS, query, 5)
    assert all(h.record.namespace == NS for h in hits)


NAMESPACES = [
    "/actor/a/project/a/",
    "/actor/a/project/ab/",
    "/actor/a/project/xa/",
    "/actor/b/project/a/",
]


def test_namespace_isolation(storage: Storage) -> None:
    by_ns = {}
    for i, ns in enumerate(NAMESPACES):
        rec = record(f"shared walrus {i}", ns=ns, minutes=i)
        storage.put_memory_record(rec)
        storage.put_embedding(rec.record_id, vec(i))
        storage.put_event(event("note", ns=ns))
        by_ns[ns] = rec.record_id

    def found(ns: str) -> set[str]:
        lexical = ids_of(search_lexical(storage, ns, "walrus", 10))
        assert set(ids_of(search_lexical(storage, ns, "shared walrus", 10))) == set(lexical)
        assert set(ids_of(search_lexical(storage, ns, "d w", 10))) == set(lexical)  # fallback
        listed = [r.record_id for r in storage.list_memory_records(ns).items]
        embedded = storage.list_embeddings(ns).record_ids
        assert set(storage.embedded_ids(ns)) == set(embedded)
        assert set(lexical) == set(listed) == set(embedded)
        assert storage.stats(ns)["memories"] == len(listed)
        assert storage.stats(ns)["events"] == len(listed)
        assert {e.namespace for e in storage.list_events(namespace=ns)} <= {
            storage.get_memory_record(i).namespace  # type: ignore[union-attr]
            for i in listed
        }
        return set(lexical)

    assert found("/actor/a/project/a/") == {by_ns["/actor/a/project/a/"]}
    assert found("/actor/a/project/a_/") == set()
    assert found("/actor/a/project/%/") == set()
    assert found("/actor/a/project/_/") == set()
    assert found("/actor/a/") == {by_ns[n] for n in NAMESPACES[:3]}
    assert found("/actor/%/") == set()
    with pytest.raises(ValueError):
        search_lexical(storage, "/actor/a", "walrus", 10)
    with pytest.raises(ValueError):
        storage.list_memory_records("/actor/a/project/a")


def test_a_full_text_search_reads_the_records_asked_for(storage: Storage) -> None:
    records = [record(f"walrus tusk {i}") for i in range(12)]
    with storage.transaction() as tx:
        for rec in records:
            tx.put_memory_record(rec)
    stats = storage.term_stats(["walrus"])
    assert stats is not None
    where = SearchQuery(NS, 10)
    full = storage.search_terms(where, ["walrus"], stats=stats)
    part = storage.search_terms(where, ["walrus"], stats=stats, read=3)
    assert full is not None and part is not None and len(full) == 10
    created = {r.record_id: r.created_at.timestamp() for r in records}
    assert [(m.record_id, m.created_ts) for m in part] == [
        (m.record_id, created[m.record_id]) for m in full
    ]
    assert all(m.record is not None for m in full)
    assert [m.record for m in part[:3]] == [m.record for m in full[:3]]
    assert all(m.record in (None, f.record) for m, f in zip(part, full, strict=True))


def test_lexical_primitives(storage: Storage) -> None:
    rec = record("walrus tusk")
    storage.put_memory_record(rec)
    stats = storage.term_stats(["walrus", "nosuchword"])
    assert stats is not None and stats.total is not None and stats.total >= 1
    assert stats.doc_freq.get("walrus") == 1 and stats.doc_freq.get("nosuchword", 0) == 0
    where = SearchQuery(NS, 10)
    found = storage.search_terms(where, ["nosuchword", "walrus"], stats=stats)
    assert found is not None and [r.record_id for r in found] == [rec.record_id]
    assert storage.search_terms(where, ["nosuchword"], stats=stats) == []
    # A term term_stats was not asked about is searched all the same.
    found = storage.search_terms(where, ["tusk"], stats=stats)
    assert found is not None and [r.record_id for r in found] == [rec.record_id]
    assert storage.search_terms(where, [], stats=stats) is None  # nothing to search for
    assert [r.record_id for r in storage.search_substring(where, "RUS TU")] == [rec.record_id]
    assert storage.search_substring(where, "  ") == []


def test_search_fragments_ranks_by_fragments_held_then_newest(storage: Storage) -> None:
    pool = record("数据库连接池的配置", summary="连接池大小设为二十", minutes=0)
    timeout = record("连接超时", minutes=1, observation_type="bugfix")
    loader = record("cold start", facts=["warm_vector_cache_loader reads 50% of rows"], minutes=2)
    elsewhere = record("连接池", ns="/actor/b/project/b/", minutes=3)
    for rec in (pool, timeout, loader, elsewhere):
        storage.put_memory_record(rec)

    def ids(ns: str, fragments: list[str], limit: int, **filters: Any) -> list[str]:
        found = storage.search_fragments(SearchQuery(ns, limit, **filters), fragments)
        return [r.record_id for r in found]

    # Two-character fragments scan the rows; the record holding both comes first.
    assert ids(NS, ["连接", "接池"], 10) == [pool.record_id, timeout.record_id]
    assert ids(NS, ["连接"], 10) == [timeout.record_id, pool.record_id]  # newest first
    assert ids(NS, ["连接"], 1) == [timeout.record_id]
    assert ids(NS, ["连接"], 10, observation_type="bugfix") == [timeout.record_id]
    assert ids(NS, ["连接"], 10, since=T0 + timedelta(seconds=30)) == [timeout.record_id]
    # Three or more go through the trigram index, case-insensitive, facts included.
    assert ids(NS, ["连接池的", "VECTOR_CACHE"], 10) == [loader.record_id, pool.record_id]
    # An actor prefix reaches its other projects; another actor's records never show.
    assert ids("/actor/a/", ["接池"], 10) == [pool.record_id]
    assert ids("/actor/b/", ["接池"], 10) == [elsewhere.record_id]
    # Taken literally: LIKE wildcards and FTS5 syntax match only themselves.
    assert ids(NS, ["0%"], 10) == [loader.record_id]
    assert ids(NS, ["%_%", '"OR'], 10) == []
    assert ids(NS, [], 10) == [] and ids(NS, ["  "], 10) == []

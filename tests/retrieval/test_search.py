"""Hybrid search on real backends: degradation, determinism, isolation, budget, coherence."""

from __future__ import annotations

import itertools
import logging
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.retrieval.conftest import NS, OTHER, STRANGER, make_record, put
from wakemark.shared.config import Settings
from wakemark.shared.embedding import Embedder, EmbedderUnavailable
from wakemark.shared.retrieval import gate
from wakemark.shared.retrieval.lexical import search_lexical
from wakemark.shared.runtime import Runtime

WORDS = ["cache", "login", "token", "stripe", "webhook", "parser", "migration", "redis", "timeout"]
_ns_counter = itertools.count()
FAST = settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)


def _fresh_ns(actor: str = "alice") -> str:
    return f"/actor/{actor}/project/h{next(_ns_counter)}/"


def _ids(result) -> list[str]:  # type: ignore[no-untyped-def]
    return [h.record.record_id for h in result.items]


text_st = st.lists(st.sampled_from(WORDS), min_size=1, max_size=5).map(" ".join)


@FAST
@given(corpus=st.lists(st.tuples(text_st, text_st), min_size=1, max_size=12), query=text_st)
def test_dead_embedder_gives_exactly_the_lexical_list(
    runtime: Runtime, corpus: list[tuple[str, str]], query: str
) -> None:
    ns = _fresh_ns()
    put(runtime, [make_record(ns, t, i, summary=s) for i, (t, s) in enumerate(corpus)])
    # Both searches from the index: while it is built Postgres' SQL leg answers, in an
    # order of its own (SQLite's FTS5 answers as its index does).
    assert runtime.storage.memory_index(wait_s=30) is not None
    result = runtime.retriever.search(ns, query, limit=5)
    lexical = search_lexical(runtime.storage, ns, query, 5 * 4)[:5]
    assert _ids(result) == [h.record.record_id for h in lexical]
    assert all(h.match_source == "fts" for h in result.items)
    assert result.degraded
    assert _ids(runtime.retriever.search(ns, query, limit=5)) == _ids(result)  # deterministic


def test_lexical_hits_past_the_records_the_leg_reads_come_back_whole(runtime: Runtime) -> None:
    # More matches than the lexical leg reads in full (the gate's pool): the page keeps
    # some past it, and hydration reads those.
    ns, wanted = _fresh_ns(), 2 * gate.POOL
    records = [
        make_record(ns, f"parser crash {i}", i, summary=f"the parser failed on input {i}")
        for i in range(3 * gate.POOL)
    ]
    put(runtime, records)
    assert runtime.storage.memory_index(wait_s=30) is not None
    result = runtime.retriever.search(ns, "parser crash", limit=wanted)
    lexical = search_lexical(runtime.storage, ns, "parser crash", wanted * 4)[:wanted]
    assert _ids(result) == [h.record_id for h in lexical]
    by_id = {r.record_id: r for r in records}
    assert [(h.record.title, h.record.summary) for h in result.items] == [
        (by_id[i].title, by_id[i].summary) for i in _ids(result)
    ]


@FAST
@given(query=st.text(max_size=80))
def test_any_user_text_searches_without_raising(runtime: Runtime, query: str) -> None:
    put(runtime, [make_record(_fresh_ns(), "parser crash on input", 0)])
    result = runtime.retriever.search("/actor/alice/", query, limit=10)
    assert isinstance(result.items, list)
    assert runtime.retriever.metrics()["errors"] == 0


def test_no_hit_from_outside_the_namespace_or_prefix(hybrid: Runtime) -> None:
    records = [
        make_record(NS, "redis timeout in the cache layer", 0),
        make_record(OTHER, "redis timeout in the webhook", 1),
        make_record(STRANGER, "redis timeout for bob", 2),
    ]
    put(hybrid, records, embed=True)
    r = hybrid.retriever
    for ns, allowed in [(NS, {NS}), ("/actor/alice/", {NS, OTHER}), (STRANGER, {STRANGER})]:
        result = r.search(ns, "redis timeout", limit=10)
        assert {h.record.namespace for h in result.items} == allowed
        assert not result.degraded
    # A prefix must end at a path boundary: /project/p never matches /project/p1/.
    assert r.search("/actor/alice/project/p/", "redis timeout").items == []


def test_semantic_hit_found_without_shared_words(hybrid: Runtime) -> None:
    records = [
        make_record(NS, "Customers were charged twice on double click", 0),
        make_record(NS, "Sitemap generation split into pages", 1),
    ]
    put(hybrid, records, embed=True)
    result = hybrid.retriever.search(NS, "people billed two times when pressing pay", limit=1)
    assert _ids(result) == [records[0].record_id]
    assert result.items[0].match_source == "semantic"
    hit = hybrid.retriever.search(NS, "charged twice", limit=2).items[0]
    assert hit.match_source == "hybrid" and hit.record.record_id == records[0].record_id


def test_a_second_worker_sees_the_first_ones_writes_without_redis(
    onnx_settings: Settings,
) -> None:
    """Two gunicorn workers over one database and no Redis: each process keeps its
    epochs to itself, so only the database's change stamp tells one's vector cache of
    the records another wrote or deleted."""
    writer, reader = Runtime.build(onnx_settings), Runtime.build(onnx_settings)
    try:
        for rt in (writer, reader):
            rt.embedder.warm()
        query = "people billed two times when pressing pay"  # no word of the record's
        put(writer, [make_record(NS, "Sitemap generation split into pages", 0)], embed=True)
        reader.retriever.search(NS, query, limit=5)  # the reader's cache now holds one row
        charged = make_record(NS, "Customers were charged twice on double click", 1)
        put(writer, [charged], embed=True)
        first = reader.retriever.search(NS, query, limit=5).items[0]
        assert first.record.record_id == charged.record_id
        assert first.match_source == "semantic"
        writer.storage.delete_memory_records([charged.record_id])
        assert charged.record_id not in _ids(reader.retriever.search(NS, query, limit=5))
    finally:
        writer.close()
        reader.close()


def test_the_change_stamp_moves_with_every_write_of_a_record(storage: Any) -> None:
    stamps = [storage.change_stamp(NS)]
    record = make_record(NS, "Sitemap generation split into pages", 0)
    storage.put_memory_record(record)
    stamps.append(storage.change_stamp(NS))
    for vector in (np.ones(384, dtype=np.float32), np.arange(384, dtype=np.float32)):
        storage.put_embedding(record.record_id, vector)  # a vector rewritten counts too
        stamps.append(storage.change_stamp(NS))
    storage.edit_memory_record(record.record_id, title="Sitemaps come in pages")
    stamps.append(storage.change_stamp(NS))
    storage.delete_memory_records([record.record_id])
    stamps.append(storage.change_stamp(NS))
    assert stamps == sorted(set(stamps)), stamps  # strictly growing
    assert storage.change_stamp("/actor/alice/") == stamps[-1]  # a prefix sums its projects


def test_filters_apply_to_both_legs(hybrid: Runtime) -> None:
    old = make_record(NS, "redis cache eviction bug", 0, observation_type="bugfix")
    new_fix = make_record(NS, "redis cache eviction decision", 1, observation_type="decision")
    new_fix = new_fix.model_copy(
        update={"created_at": new_fix.created_at.now(new_fix.created_at.tzinfo)}
    )
    put(hybrid, [old, new_fix], embed=True)
    r = hybrid.retriever
    assert _ids(r.search(NS, "redis cache", observation_type="bugfix")) == [old.record_id]
    assert _ids(r.search(NS, "redis cache", days=7)) == [new_fix.record_id]
    assert r.search(NS, "redis cache", observation_type="note").items == []


class _Failing(Embedder):
    """A model loaded, whose query embedding fails."""

    identity = "sha256:0123456789abcdef"
    path = Path("/nonexistent")

    @property
    def state(self) -> str:
        return "ready"

    def model(self) -> Any:
        return self

    def embed_query(self, text: str) -> np.ndarray:
        raise EmbedderUnavailable("model file vanished")


class _Slow(_Failing):
    SECONDS = 0.5  # past the tests' 100 ms budget

    def embed_query(self, text: str) -> np.ndarray:
        time.sleep(self.SECONDS)
        return np.ones(384, dtype=np.float32)


def _with_embedder(settings: Settings, embedder: Embedder) -> Runtime:
    rt = Runtime.build(settings.replace(embedder="onnx"))
    rt.__dict__["embedder"] = embedder  # the runtime's part, swapped before first use
    return rt


def test_failing_query_embed_degrades_to_lexical(
    hybrid: Runtime, caplog: pytest.LogCaptureFixture
) -> None:
    records = [make_record(NS, f"webhook token {i}", i) for i in range(3)]
    put(hybrid, records, embed=True)
    rt = _with_embedder(hybrid.settings, _Failing(Path("/nonexistent")))
    try:
        with caplog.at_level(logging.WARNING, logger="wakemark.shared.retrieval"):
            result = rt.retriever.search(NS, "webhook token", limit=10)
            rt.retriever.search(NS, "webhook token", limit=10)
        lexical = search_lexical(rt.storage, NS, "webhook token", 40)
        assert _ids(result) == [h.record.record_id for h in lexical]
        assert result.degraded
        warnings = [r for r in caplog.records if "degraded" in r.getMessage()]
        assert len(warnings) == 1  # rate-limited: one per reason, not one per search
    finally:
        rt.close()


def test_a_slow_vector_leg_is_left_out_and_the_lexical_hits_come_back_in_time(
    backend_settings: Settings,
) -> None:
    settings = backend_settings.replace(retrieval_budget_ms=100)
    rt = _with_embedder(settings, _Slow(Path("/nonexistent")))
    try:
        put(rt, [make_record(NS, "webhook token", 0)])
        rt.storage.put_embedding(
            rt.storage.list_memory_records(NS).items[0].record_id, np.ones(384, np.float32)
        )
        # The full-text index built first (as a server's warm-up does): its build thread
        # would share the search's time, and this is about the slow leg's share of it.
        assert rt.storage.memory_index(wait_s=30) is not None
        result = rt.retriever.search(NS, "webhook token")
        assert [h.record.title for h in result.items] == ["webhook token"] and result.degraded
        assert result.items[0].match_source == "fts"
        # Answered at the legs' share of the budget (80 ms), not after the slow leg's
        # 500 ms; not a timeout, which would have answered nothing. A busy box may wake
        # the caller a few milliseconds late: the bound is the slow leg, not the budget.
        assert 80 <= result.latency_ms < _Slow.SECONDS * 1000 / 2
        assert rt.retriever.metrics()["timeouts"] == 0
        time.sleep(_Slow.SECONDS)  # the leg left out ends before its storage is closed
    finally:
        rt.close()


def test_a_search_given_up_on_while_queued_never_runs(
    backend_settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    rt = Runtime.build(backend_settings.replace(retrieval_budget_ms=100, embedder="off"))
    try:
        put(rt, [make_record(NS, "webhook token", 0)])
        retriever = rt.retriever
        started: list[str] = []
        search = retriever._search

        def counted(namespace: str, text: str, *args: Any) -> Any:
            started.append(text)
            return search(namespace, text, *args)

        monkeypatch.setattr(retriever, "_search", counted)
        # Every thread of the pool busy for longer than the budget: the next search waits
        # in its queue until its deadline, then must not run when a thread frees up.
        for _ in range(4):
            retriever._outer.submit(time.sleep, 0.3)
        result = retriever.search(NS, "webhook token")
        assert result.items == [] and result.degraded
        assert retriever.metrics()["timeouts"] == 1
        time.sleep(0.5)  # the pool's threads free again
        assert started == []
        assert [h.record.title for h in retriever.search(NS, "webhook token").items] == [
            "webhook token"
        ]
        assert started == ["webhook token"]
    finally:
        rt.close()


def test_a_search_thread_that_starts_past_its_deadline_answers_as_timed_out(
    backend_settings: Settings, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A loaded box can wake the caller after the search thread has seen the deadline
    pass: the caller then reads the thread's answer, which must be the timeout's."""
    rt = Runtime.build(backend_settings.replace(embedder="off"))
    try:
        put(rt, [make_record(NS, "webhook token", 0)])
        retriever = rt.retriever
        search = retriever._search

        def late(*args: Any) -> Any:
            return search(*args[:-1], 0.0)  # its deadline long past when the thread starts

        monkeypatch.setattr(retriever, "_search", late)
        with caplog.at_level(logging.WARNING, logger="wakemark.shared.retrieval"):
            result = retriever.search(NS, "webhook token")
        assert result.items == [] and result.degraded
        assert retriever.metrics()["timeouts"] == 1
        assert any("search exceeded the" in m for m in caplog.messages), caplog.messages
    finally:
        rt.close()


def test_cold_model_never_blocks_a_search(onnx_settings: Settings) -> None:
    rt = Runtime.build(onnx_settings)
    try:
        put(rt, [make_record(NS, "webhook token", 0)])
        assert rt.embedder.state == "not_loaded"
        result = rt.retriever.search(NS, "webhook token")
        assert result.degraded and len(result.items) == 1  # lexical while warming up
        for _ in range(200):  # the background warm-up finishes on its own
            if rt.embedder.state == "ready":
                break
            time.sleep(0.05)
        assert rt.embedder.state == "ready"
    finally:
        rt.close()


def test_for_prompt_and_session_index(runtime: Runtime) -> None:
    records = [
        make_record(NS, f"login token fix {i}", i, summary="Refreshed é token.") for i in range(5)
    ]
    pinned = make_record(NS, "Pinned architecture note", 99, pinned=True)
    put(runtime, [*records, pinned])
    event = {"type": "message", "turns": [{"role": "user", "content": "login token"}]}
    out = runtime.retriever.for_prompt(NS, event)
    assert out.context.startswith("## Prior observations\n\n### login token fix")
    # The relevance gate decides how many (it once was always 5): here the first, whose
    # evidence is strongest, at least.
    assert 1 <= len(out.records) <= 5 and "mr_" not in out.context
    empty = runtime.retriever.for_prompt(NS, {"type": "text", "content": ""})
    assert empty.context == "" and empty.records == []
    index = runtime.retriever.session_index(NS, 200)
    lines = index.context.splitlines()
    assert lines[1].startswith("- Pinned architecture note")
    assert index.used_bytes == len(index.context.encode()) <= 200


def test_session_index_pages_through_every_record_that_fits(runtime: Runtime) -> None:
    # 100 records a page, read until a page comes back short: 200 is two full pages
    # then an empty one, 230 ends on a short page. Lines are "- rNNN\n" (7 bytes).
    put(runtime, [make_record(NS, f"r{i:03d}", i) for i in range(200)])
    index = runtime.retriever.session_index(NS, 9000)
    assert index.context.count("\n- r") == 200
    put(runtime, [make_record(NS, f"r{i:03d}", i) for i in range(200, 230)])
    lines = runtime.retriever.session_index(NS, 9000).context.splitlines()
    assert [x for x in lines if x.startswith("- r")][:2] == ["- r229", "- r228"]
    assert sum(x.startswith("- r") for x in lines) == 230


def test_search_works_in_a_forked_child(backend_settings: Settings) -> None:
    """gunicorn forks workers: a child must not inherit dead pool threads."""
    import os

    # A budget that a busy machine's first search in a new process stays well within: a
    # lock or thread the child inherited dead still leaves its search empty.
    runtime = Runtime.build(backend_settings.replace(retrieval_budget_ms=10_000))
    try:
        put(runtime, [make_record(NS, "webhook token", 0)])
        assert len(runtime.retriever.search(NS, "webhook").items) == 1  # pool threads started
        if runtime.storage.backend == "sqlite":
            # That search started the full-text index's build on a thread. A fork while a
            # thread is inside SQLite leaves the child SQLite's own mutex held, which no
            # fork handler can release (servers fork before any search): built first.
            assert runtime.storage.memory_index(wait_s=30) is not None  # type: ignore[attr-defined]
        pid = os.fork()
        if pid == 0:  # the child: exit code says whether the search found the record
            ok = False
            try:
                runtime.after_fork()  # what gunicorn's post_fork and Celery's process init call
                ok = len(runtime.retriever.search(NS, "webhook").items) == 1
            finally:
                os._exit(0 if ok else 1)
        _, status = os.waitpid(pid, 0)
    finally:
        runtime.close()
    assert os.waitstatus_to_exitcode(status) == 0


def test_a_slow_first_vector_load_never_blocks_a_search(
    hybrid: Runtime, monkeypatch: pytest.MonkeyPatch
) -> None:
    records = [make_record(NS, f"webhook token {i}", i) for i in range(3)]
    put(hybrid, records, embed=True)
    gate = threading.Event()
    load = hybrid.storage.list_embeddings

    def slow_load(namespace: str, since: int | None = None) -> Any:
        gate.wait(10)  # a namespace too big to load inside one search
        return load(namespace, since)

    monkeypatch.setattr(hybrid.storage, "list_embeddings", slow_load)
    first = hybrid.retriever.search(NS, "webhook token", limit=10)
    assert len(first.items) == 3
    if hybrid.storage.vector_index:  # the database answers while the vectors load
        assert not first.degraded and {h.match_source for h in first.items} == {"hybrid"}
        assert hybrid.retriever.metrics()["vector_cache"]["database_searches"] == 1
    else:  # lexical only meanwhile
        assert first.degraded and {h.match_source for h in first.items} == {"fts"}
    gate.set()
    for _ in range(200):
        if not (later := hybrid.retriever.search(NS, "webhook token", limit=10)).degraded:
            break
        time.sleep(0.05)
    assert not later.degraded and {h.match_source for h in later.items} == {"hybrid"}


def test_a_slow_refresh_answers_from_the_vectors_as_last_read(
    hybrid: Runtime, monkeypatch: pytest.MonkeyPatch
) -> None:
    records = [make_record(NS, f"webhook token {i}", i) for i in range(3)]
    put(hybrid, records, embed=True)
    for _ in range(200):
        if not hybrid.retriever.search(NS, "webhook token").degraded:
            break
        time.sleep(0.05)
    gate = threading.Event()
    load = hybrid.storage.list_embeddings

    def slow_load(namespace: str, since: int | None = None) -> Any:
        gate.wait(10)  # a refresh outlasting the search's wait (a busy machine)
        return load(namespace, since)

    monkeypatch.setattr(hybrid.storage, "list_embeddings", slow_load)
    hybrid.storage.delete_memory_records([records[0].record_id])
    result = hybrid.retriever.search(NS, "webhook token", limit=10)
    ids = {h.record.record_id for h in result.items}
    assert ids == {r.record_id for r in records[1:]}  # never the deleted one
    # The semantic leg still answers: from the database, or from the vectors as last read.
    assert {h.match_source for h in result.items} == {"hybrid"}
    assert result.degraded is not hybrid.storage.vector_index
    gate.set()
    for _ in range(200):
        if not (later := hybrid.retriever.search(NS, "webhook token", limit=10)).degraded:
            break
        time.sleep(0.05)
    assert not later.degraded and {h.record.record_id for h in later.items} == ids


def test_session_start_warms_the_namespace_vectors(hybrid: Runtime) -> None:
    put(hybrid, [make_record(NS, "webhook token", 0)], embed=True)
    assert hybrid.retriever.metrics()["vector_cache"]["loads"] == 0
    assert "webhook token" in hybrid.retriever.session_index(NS).context
    for _ in range(200):
        if hybrid.retriever.metrics()["vector_cache"]["loads"] == 1:
            break
        time.sleep(0.05)
    assert hybrid.retriever.metrics()["vector_cache"]["loads"] == 1
    assert not hybrid.retriever.search(NS, "webhook token").degraded


def test_a_search_with_no_vectors_to_search_is_not_degraded(hybrid: Runtime) -> None:
    # Records not embedded yet (a fresh install's first turns): the vector leg has nothing
    # it could search, so lexical hits are the whole answer, not a fallback.
    put(hybrid, [make_record(NS, "webhook token", 0)], embed=False)
    result = hybrid.retriever.search(NS, "webhook token", limit=10)
    assert [h.record.title for h in result.items] == ["webhook token"]
    assert not result.degraded
    assert hybrid.retriever.metrics()["degraded_rate"] == 0.0

"""SQLite's full-text index held in the process answers as FTS5 does: the same records in
the same order, and the same term statistics, as the data changes under it."""

from __future__ import annotations

import random
from collections.abc import Iterator
from datetime import datetime, timedelta

import pytest

from tests.storage.conftest import NS, T0
from wakemark.shared.config import Settings, prepare_home
from wakemark.shared.models import OBSERVATION_TYPES, MemoryRecord
from wakemark.shared.storage import SearchQuery, lexicon, migrate
from wakemark.shared.storage.lexical import tokenize
from wakemark.shared.storage.sqlite import fts
from wakemark.shared.storage.sqlite.storage import SqliteStorage

# Stems shared by inflections, identifiers split into phrases of two and three stems,
# diacritics, CJK and a superscript: what the tokenizer folds, splits and stems.
WORDS = [
    "parse_args",
    "cache",
    "redis",
    "token",
    "login",
    "naïve",
    "café",
    "running",
    "runs",
    "ran",
    "retry",
    "worker",
    "celery",
    "x²",
    "foo_bar_baz",
    "Übermäßig",
    "über",
    "東京",
    "tests",
    "tested",
    "testing",
    "a",
    "an",
    "the",
    "of",
]
NAMESPACES = [NS, "/actor/a/project/b/", "/actor/b/project/a/"]
PREFIXES = [*NAMESPACES, "/actor/a/", "/", "/actor/a/project/"]


def _text(rng: random.Random, n: int) -> str:
    ends = ["", ",", ".", "-x", "/y.py", "_z"]
    return " ".join(rng.choice(WORDS) + rng.choice(ends) for _ in range(n))


def _record(rng: random.Random) -> MemoryRecord:
    return MemoryRecord(
        namespace=rng.choice(NAMESPACES),
        title=_text(rng, 5),
        summary=_text(rng, 20),
        facts=[_text(rng, 6)],
        observation_type=rng.choice(OBSERVATION_TYPES),
        created_at=T0 + timedelta(minutes=rng.randint(0, 10_000)),
    )


@pytest.fixture
def pair(settings: Settings) -> Iterator[tuple[SqliteStorage, SqliteStorage]]:
    """The same database through the index and through FTS5 alone."""
    prepare_home(settings)
    migrate(settings)
    indexed = SqliteStorage(settings.sqlite_path)
    plain = SqliteStorage(settings.sqlite_path, lexicon=False)
    yield indexed, plain
    indexed.close()
    plain.close()


def random_searches(
    rng: random.Random, since: datetime, n: int = 60
) -> Iterator[tuple[list[str], SearchQuery]]:
    """``n`` searches of one to four words over the prefixes, limits and filters the
    index must answer as FTS5 does."""
    for _ in range(n):
        terms = tokenize(_text(rng, rng.randint(1, 4)))
        yield (
            terms,
            SearchQuery(
                rng.choice(PREFIXES),
                rng.choice([1, 3, 10, 40]),
                rng.choice([None, None, rng.choice(OBSERVATION_TYPES)]),
                rng.choice([None, since]),
            ),
        )


def _same_answers(pair: tuple[SqliteStorage, SqliteStorage], rng: random.Random) -> None:
    indexed, plain = pair
    assert indexed.memory_index(wait_s=30) is not None
    plain._doc_freqs = fts.DocFreqs()  # FTS5's frequencies are cached; count them afresh
    for terms, query in random_searches(rng, T0 + timedelta(minutes=5_000)):
        found = indexed.search_terms(query, terms, stats=None)  # type: ignore[arg-type]
        expected = plain.search_terms(query, terms, stats=None)  # type: ignore[arg-type]
        assert _ids(found) == _ids(expected), (query, terms)
        assert indexed.term_stats(terms) == plain.term_stats(terms), terms


def _ids(records: list[MemoryRecord] | None) -> list[str] | None:
    return None if records is None else [r.record_id for r in records]


@pytest.mark.parametrize(
    ("window", "segment"), [(fts.WINDOW, lexicon.SEGMENT), (20, lexicon.SEGMENT), (fts.WINDOW, 7)]
)
def test_the_index_answers_as_fts5_as_records_come_change_and_go(
    pair: tuple[SqliteStorage, SqliteStorage],
    window: int,
    segment: int,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(fts, "WINDOW", window)  # 20: most searches rank only the newest
    # 7: the records, the rows changed since the build, the edits and the deletes each
    # span many segments.
    monkeypatch.setattr(lexicon, "SEGMENT", segment)
    rng = random.Random(window + segment)
    indexed, _ = pair
    records = [_record(rng) for _ in range(300)]
    with indexed.transaction() as tx:
        for r in records:
            tx.put_memory_record(r)
    _same_answers(pair, rng)

    with indexed.transaction() as tx:
        for r in [_record(rng) for _ in range(40)]:
            tx.put_memory_record(r)
    _same_answers(pair, rng)

    for r in rng.sample(records, 20):
        with indexed.transaction() as tx:
            tx.replace_record_text(r.model_copy(update={"title": _text(rng, 4)}))
    _same_answers(pair, rng)

    with indexed.transaction() as tx:
        tx.delete_memory_records([r.record_id for r in records[:30]])
    _same_answers(pair, rng)

    newer = _record(rng).model_copy(update={"namespace": records[40].namespace})
    with indexed.transaction() as tx:
        tx.put_memory_record(newer)
        assert tx.supersede(records[40].record_id, newer.record_id, T0)
    _same_answers(pair, rng)


def test_a_search_right_after_a_write_finds_it_through_the_index(
    pair: tuple[SqliteStorage, SqliteStorage],
) -> None:
    indexed, _ = pair
    with indexed.transaction() as tx:
        tx.put_memory_record(MemoryRecord(namespace=NS, title="first", created_at=T0))
    assert indexed.memory_index(wait_s=30) is not None
    fresh = MemoryRecord(namespace=NS, title="zebra_crossing appears", created_at=T0)
    with indexed.transaction() as tx:
        tx.put_memory_record(fresh)
    assert indexed.memory_index(wait_s=30) is not None  # refreshed, not rebuilt
    found = indexed.search_terms(SearchQuery(NS, 5), ["zebra_crossing"], stats=None)  # type: ignore[arg-type]
    assert [r.record_id for r in found or []] == [fresh.record_id]
    with indexed.transaction() as tx:
        tx.delete_memory_records([fresh.record_id])
    assert indexed.search_terms(SearchQuery(NS, 5), ["zebra_crossing"], stats=None) == []  # type: ignore[arg-type]


def test_the_filters_hold_in_the_index(pair: tuple[SqliteStorage, SqliteStorage]) -> None:
    indexed, _ = pair
    old = MemoryRecord(namespace=NS, title="retry budget", observation_type="bugfix",
                       created_at=T0)  # fmt: skip
    new = MemoryRecord(namespace=NS, title="retry budget", observation_type="decision",
                       created_at=T0 + timedelta(days=1))  # fmt: skip
    other = MemoryRecord(namespace="/actor/b/project/a/", title="retry", created_at=T0)
    with indexed.transaction() as tx:
        for r in (old, new, other):
            tx.put_memory_record(r)
    assert indexed.memory_index(wait_s=30) is not None

    def ids(query: SearchQuery) -> list[str]:
        found = indexed.search_terms(query, ["retry"], stats=None)  # type: ignore[arg-type]
        return [r.record_id for r in found or []]

    assert ids(SearchQuery(NS, 10)) == [new.record_id, old.record_id]
    assert ids(SearchQuery(NS, 10, observation_type="bugfix")) == [old.record_id]
    assert ids(SearchQuery(NS, 10, since=T0 + timedelta(hours=1))) == [new.record_id]
    assert set(ids(SearchQuery("/", 10))) == {old.record_id, new.record_id, other.record_id}


def test_a_limit_of_zero_finds_nothing_in_the_index(
    pair: tuple[SqliteStorage, SqliteStorage],
) -> None:
    indexed, plain = pair
    with indexed.transaction() as tx:
        for i in range(5):
            tx.put_memory_record(MemoryRecord(namespace=NS, title=f"retry {i}", created_at=T0))
    assert indexed.memory_index(wait_s=30) is not None
    query = SearchQuery(NS, 0)
    assert indexed.search_terms(query, ["retry"], stats=None) == []  # type: ignore[arg-type]
    assert plain.search_terms(query, ["retry"], stats=None) == []  # type: ignore[arg-type]


def _put(storage: SqliteStorage, *titles: str) -> list[MemoryRecord]:
    records = [
        MemoryRecord(namespace=NS, title=t, summary=f"note {i}", created_at=T0 + timedelta(i))
        for i, t in enumerate(titles)
    ]
    with storage.transaction() as tx:
        for r in records:
            tx.put_memory_record(r)
    return records


def _search(storage: SqliteStorage, terms: list[str]) -> list[str]:
    found = storage.search_terms(SearchQuery(NS, 10), terms, stats=None)  # type: ignore[arg-type]
    return [r.record_id for r in found or []]


def test_a_phrase_of_three_stems_is_counted_in_the_text_across_segments(
    pair: tuple[SqliteStorage, SqliteStorage], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(lexicon, "SEGMENT", 2)
    indexed, plain = pair
    held = _put(
        indexed,
        "foo bar baz",  # the phrase
        "foo bar, then bar baz",  # each adjacent pair, not the phrase
        "retry retry retry retry",  # two overlapping instances of retry_retry_retry
        "x foo_bar_baz y foo-bar-baz",  # twice
        "foo bar",  # the phrase split across two fields: not an instance
        "retry retry",
    )
    with indexed.transaction() as tx:
        tx.replace_record_text(held[4].model_copy(update={"summary": "baz"}))
    assert indexed.memory_index(wait_s=30) is not None
    for terms in (["foo_bar_baz"], ["retry_retry_retry"], ["foo_bar_baz", "retry"], ["bar_baz"]):
        assert _search(indexed, terms) == _search(plain, terms), terms
    assert set(_search(indexed, ["foo_bar_baz"])) == {held[0].record_id, held[3].record_id}

    with indexed.transaction() as tx:  # deleted in one segment, edited in another
        tx.delete_memory_records([held[0].record_id])
        tx.replace_record_text(held[1].model_copy(update={"title": "foo bar baz"}))
    assert indexed.memory_index(wait_s=30) is not None
    assert set(_search(indexed, ["foo_bar_baz"])) == {held[1].record_id, held[3].record_id}
    assert _search(indexed, ["foo_bar_baz"]) == _search(plain, ["foo_bar_baz"])


def test_a_phrase_in_too_many_records_to_recount_is_left_to_fts5(
    pair: tuple[SqliteStorage, SqliteStorage], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(lexicon, "RECOUNT_MAX", 2)
    indexed, plain = pair
    _put(indexed, "foo bar baz", "foo bar baz foo", "bar baz foo bar", "foo bar baz", "qux")
    index = indexed.memory_index(wait_s=30)
    assert index is not None
    conn = indexed._conns.get()
    with pytest.raises(lexicon.TooBroad):
        index.ranked(conn, [("foo", "bar", "baz")], lexicon.Ranking(NS, 10, None, None), 100)
    assert len(index.ranked(conn, [("qux",)], lexicon.Ranking(NS, 10, None, None), 100).slot) == 1
    found = _search(indexed, ["foo_bar_baz"])
    assert len(found) == 3  # not the one holding each pair only
    assert found == _search(plain, ["foo_bar_baz"])


def test_a_frequency_too_large_for_a_byte_ranks_as_fts5_ranks_it(
    pair: tuple[SqliteStorage, SqliteStorage],
) -> None:
    indexed, plain = pair
    # Weighted frequencies of a summary term: 2 per instance, so 260 and 256 do not fit a
    # byte, 252 does.
    with indexed.transaction() as tx:
        for i, n in enumerate((130, 128, 126, 1)):
            tx.put_memory_record(
                MemoryRecord(namespace=NS, title=f"note {i}", summary="cache " * n,
                             created_at=T0 + timedelta(i))
            )  # fmt: skip
    index = indexed.memory_index(wait_s=30)
    assert index is not None
    assert any(len(s.terms.over) for s in index.base.segments)
    assert _search(indexed, ["cache"]) == _search(plain, ["cache"])
    assert indexed.term_stats(["cache"]) == plain.term_stats(["cache"])


def test_one_phrase_in_more_records_than_the_window_scores_the_window_alone(
    pair: tuple[SqliteStorage, SqliteStorage], monkeypatch: pytest.MonkeyPatch
) -> None:
    # The phrase's newest postings, read to find where the window begins, are all of the
    # window: its older matches are never scored.
    monkeypatch.setattr(fts, "WINDOW", 20)
    indexed, plain = pair
    with indexed.transaction() as tx:
        for i in range(30):
            tx.put_memory_record(
                MemoryRecord(namespace=NS, title="cache " + "x " * (i % 7),
                             created_at=T0 + timedelta(minutes=i))
            )  # fmt: skip
    index = indexed.memory_index(wait_s=30)
    assert index is not None
    scored: list[int] = []
    scores = index.scores

    def counted(*args: object) -> object:
        found = scores(*args)  # type: ignore[arg-type]
        scored.append(len(found))
        return found

    monkeypatch.setattr(index, "scores", counted)
    assert _search(indexed, ["cache"]) == _search(plain, ["cache"])
    assert scored == [20]


def test_warming_up_builds_the_index_before_any_search(
    pair: tuple[SqliteStorage, SqliteStorage],
) -> None:
    indexed, _ = pair
    _put(indexed, "retry budget")
    indexed.warm_up()
    lexicon_ = indexed._lexicon
    assert lexicon_ is not None
    job = lexicon_._job
    if job is not None:  # still building
        job.wait(30)
    assert lexicon_._index is not None


def test_a_forked_child_builds_its_index_while_a_parent_thread_holds_the_lock() -> None:
    """gunicorn may fork while a build thread of the parent is inside the index's lock:
    the child, which has no such thread, must not wait for it."""
    import os
    import threading
    import time

    index = lexicon.Lexicon(build=lambda: "built", refresh=lambda old: old)
    inside, release = threading.Event(), threading.Event()

    def hold() -> None:  # the parent's build thread, ending its job when the fork comes
        with index._lock:
            inside.set()
            release.wait(30)

    holder = threading.Thread(target=hold)
    holder.start()
    inside.wait(30)
    pid = os.fork()
    if pid == 0:  # the child: exit code 0 if it built its own index in time
        ok = False
        try:
            ok = index.current(lambda built: built == "built", wait_s=10) == "built"
        finally:
            os._exit(0 if ok else 1)
    release.set()
    holder.join()
    deadline = time.monotonic() + 20
    while (done := os.waitpid(pid, os.WNOHANG))[0] == 0 and time.monotonic() < deadline:
        time.sleep(0.02)
    if done[0] == 0:
        os.kill(pid, 9)
        os.waitpid(pid, 0)
        pytest.fail("the child waited for a lock its parent's thread held")
    assert os.waitstatus_to_exitcode(done[1]) == 0

"""A query's relative date favours the records of its time; the best hit's session
neighbours join the results; a query naming someone is also searched for its topic. On
each backend, lexical-only (the embedder is off) but for the topic query, a semantic one."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest

from tests.retrieval.conftest import NS, make_record, put
from wakemark.shared.config import Settings
from wakemark.shared.runtime import Runtime

NOW = datetime(2024, 1, 10, 15, 0, tzinfo=UTC)


def _runtime(settings: Settings, **changes: object) -> Iterator[Runtime]:
    # A deadline no busy test machine misses: these tests are about order, not time.
    rt = Runtime.build(settings.replace(retrieval_budget_ms=10_000, **changes))
    yield rt
    rt.close()


@pytest.fixture
def plain(backend_settings: Settings) -> Iterator[Runtime]:
    """Neither relative dates nor session neighbours."""
    yield from _runtime(backend_settings, dates="off", session_neighbours=0)


@pytest.fixture
def conversational(backend_settings: Settings) -> Iterator[Runtime]:
    yield from _runtime(backend_settings, dates="on", session_neighbours=1)


def _titles(rt: Runtime, query: str, limit: int = 10) -> list[str]:
    return [h.record.title for h in rt.retriever.search(NS, query, limit, now=NOW).items]


def test_a_relative_date_favours_the_records_of_that_day(
    plain: Runtime, conversational: Runtime
) -> None:
    put(
        plain,
        [
            make_record(title="rolled back the deploy: today", created_at=NOW - timedelta(hours=1)),
            make_record(title="rolled back the deploy: one", created_at=NOW - timedelta(days=1)),
            make_record(title="rolled back the deploy: two", created_at=NOW - timedelta(days=30)),
        ],
    )
    query = "why was the deploy rolled back yesterday"
    assert _titles(plain, query)[0] == "rolled back the deploy: today"  # newest wins the tie
    assert _titles(conversational, query)[0] == "rolled back the deploy: one"
    assert _titles(conversational, "the deploy rolled back in December")[0] == (
        "rolled back the deploy: two"
    )
    # A window is a preference, not a filter: the other days' hits are still there.
    assert len(_titles(conversational, query)) == 3


def test_the_best_hits_session_neighbours_join_the_results(
    plain: Runtime, conversational: Runtime
) -> None:
    t = NOW - timedelta(days=3)
    put(
        plain,
        [
            make_record(title="Anna: my sister moved to Lisbon", created_at=t),
            make_record(title="Ben: what does she do there?", created_at=t + timedelta(minutes=2)),
            make_record(title="Anna: she teaches surfing", created_at=t + timedelta(minutes=4)),
            # The next day: another session, however close in the namespace's order.
            make_record(title="Ben: a quiet day at work", created_at=t + timedelta(days=1)),
        ],
    )
    query = "which city did the sister move to, Lisbon?"
    assert _titles(plain, query) == ["Anna: my sister moved to Lisbon"]
    hits = conversational.retriever.search(NS, query, 10, now=NOW).items
    assert [h.record.title for h in hits] == [
        "Anna: my sister moved to Lisbon",
        "Ben: what does she do there?",
    ]
    assert [h.match_source for h in hits] == ["fts", "session"]
    assert hits[1].score < hits[0].score
    with_two = Runtime.build(conversational.settings.replace(session_neighbours=2))
    try:
        titles = [h.record.title for h in with_two.retriever.search(NS, query, 10, now=NOW).items]
    finally:
        with_two.close()
    assert titles == [
        "Anna: my sister moved to Lisbon",
        "Ben: what does she do there?",
        "Anna: she teaches surfing",
    ]


def test_a_query_that_is_only_a_date_still_searches(conversational: Runtime) -> None:
    put(conversational, [make_record(title="yesterday", created_at=NOW - timedelta(days=1))])
    assert _titles(conversational, "yesterday") == ["yesterday"]


def test_a_query_naming_someone_also_searches_for_its_topic_alone(onnx_settings: Settings) -> None:
    """Named in the query, a speaker pulls its embedding towards the turns that name them;
    the topic query finds the turn that answers, which says neither the name's words nor
    the query's."""
    records = [
        make_record(title="Ben: Paola, what did you do today?", created_at=NOW),
        make_record(title="Ben: how was your evening, Paola?", created_at=NOW),
        make_record(title="Ben: Paola, are you still there?", created_at=NOW),
        make_record(title="Ben: what about you Paola?", created_at=NOW),
        make_record(title="Ben: did you hear me, Paola?", created_at=NOW),
        make_record(title="Ben: Paola, what did you do at the weekend?", created_at=NOW),
        make_record(title="Paola: I saw Up again, the film with the flying house", created_at=NOW),
        make_record(title="Paola: my brother helps me bake chocolate cakes", created_at=NOW),
    ]
    answer = records[6].title
    query = "What movies did Paola watch?"
    found = {}
    for topic in ("off", "on"):
        rt = Runtime.build(onnx_settings.replace(retrieval_budget_ms=10_000, topic_query=topic))
        try:
            rt.embedder.warm()
            if topic == "off":
                put(rt, records, embed=True)
            found[topic] = _titles(rt, query, limit=3)
        finally:
            rt.close()
    assert answer not in found["off"]
    assert answer in found["on"]

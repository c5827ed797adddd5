"""Cache coherence: writes through another process's storage reach the next search."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

from tests.retrieval.conftest import NS, OTHER, make_record, put
from wakemark.shared.config import Settings
from wakemark.shared.runtime import Runtime

pytestmark = pytest.mark.redis

LOAD_TRIES = 200  # searches, each waiting a while for the vectors to load
LOAD_WAIT_S = 30.0  # for a namespace's vectors to load on a busy machine


@pytest.fixture
def two_runtimes(onnx_settings: Settings, redis_url: str) -> Iterator[tuple[Runtime, Runtime]]:
    """An API-like reader and a worker-like writer sharing the database and Redis epochs."""
    settings = onnx_settings.replace(redis_url=redis_url)
    reader, writer = Runtime.build(settings), Runtime.build(settings)
    reader.embedder.warm()
    yield reader, writer
    reader.close()
    writer.close()


def test_write_and_delete_elsewhere_are_seen_by_the_next_search(
    two_runtimes: tuple[Runtime, Runtime],
) -> None:
    reader, writer = two_runtimes
    first = make_record(NS, "Sitemap split into paginated pages", 0)
    put(writer, [first], embed=True)
    query = "people billed two times when pressing pay"
    # The namespace's vectors load in the background; on a busy machine the first searches
    # answer before they are in (SQLite: degraded, no semantic leg; Postgres: from its own
    # vector search), and count no load yet.
    end = time.monotonic() + LOAD_WAIT_S
    while True:
        result = reader.retriever.search(NS, query)
        loaded = reader.retriever.metrics()["vector_cache"]["loads"]
        if (not result.degraded and loaded) or time.monotonic() > end:
            break
        time.sleep(0.02)
    assert not result.degraded
    assert result.items[0].record.record_id == first.record_id
    loads = reader.retriever.metrics()["vector_cache"]["loads"]
    reader.retriever.search(NS, query)
    assert reader.retriever.metrics()["vector_cache"]["loads"] == loads  # cached

    charged = make_record(NS, "Customers were charged twice on double click", 1)
    put(writer, [charged], embed=True)  # as a worker would: another storage, same Redis
    hits = reader.retriever.search(NS, query).items
    assert hits[0].record.record_id == charged.record_id
    assert hits[0].match_source == "semantic"
    # The actor prefix is bumped too.
    assert reader.retriever.search("/actor/alice/", query).items[0].record.record_id == (
        charged.record_id
    )

    writer.storage.delete_memory_records([charged.record_id])
    for ns in (NS, "/actor/alice/"):
        # The very next search never shows the deleted record; on a busy machine it may
        # answer while the namespace's vectors are still being refreshed (degraded), so
        # the full answer is read from the first search that has them.
        result = reader.retriever.search(ns, query)
        assert charged.record_id not in [h.record.record_id for h in result.items]
        for _ in range(LOAD_TRIES):
            if not result.degraded:
                break
            result = reader.retriever.search(ns, query)
        ids = [h.record.record_id for h in result.items]
        assert not result.degraded and ids == [first.record_id]


def test_text_written_elsewhere_reaches_the_next_full_text_search(
    backend_settings: Settings,
) -> None:
    """Both backends answer full-text searches from an index held in the reader's process;
    a worker's insert, edit and delete are in the very next search's answer."""
    reader, writer = Runtime.build(backend_settings), Runtime.build(backend_settings)
    try:
        put(writer, [make_record(NS, "Sitemap split into paginated pages", 0)])
        storage: Any = reader.storage  # either backend's: both hold the index
        reader.retriever.warm_up()
        assert storage.memory_index(wait_s=30) is not None  # built: the index answers

        def found(query: str) -> list[str]:
            return [h.record.record_id for h in reader.retriever.search(NS, query).items]

        added = make_record(NS, "Walrus tusks measured", 1)
        put(writer, [added])
        assert found("walrus tusks") == [added.record_id]
        writer.storage.edit_memory_record(added.record_id, title="Narwhal horn measured")
        assert found("walrus tusks") == []
        assert found("narwhal horn") == [added.record_id]
        writer.storage.delete_memory_records([added.record_id])
        assert found("narwhal horn") == []
        assert storage.memory_index(wait_s=30) is not None  # kept current, not dropped
    finally:
        reader.close()
        writer.close()


def _two_projects_searched(serving: Runtime, *searched: str) -> None:
    """A record embedded in NS and one in OTHER, and a search of each of ``searched``
    by ``serving`` (noted in the shared epochs, as a serving API process does)."""
    put(serving, [make_record(NS, "Sitemap split into paginated pages", 0)], embed=True)
    put(serving, [make_record(OTHER, "Refunds batched nightly", 0)], embed=True)
    for namespace in searched:
        serving.retriever.search(namespace, "sitemap pages refunds")


def test_a_starting_process_preloads_the_namespaces_searched_lately(
    two_runtimes: tuple[Runtime, Runtime],
) -> None:
    serving, starting = two_runtimes
    _two_projects_searched(serving, NS)  # OTHER is never searched
    assert starting.retriever.metrics()["vector_cache"]["loads"] == 0
    starting.retriever.warm_up()  # as gunicorn's post_worker_init runs it
    for _ in range(200):
        if starting.retriever.metrics()["vector_cache"]["loads"] == 1:
            break
        time.sleep(0.05)
    cache = starting.retriever.metrics()["vector_cache"]
    assert cache["loads"] == 1 and cache["namespaces"] == 1
    starting.embedder.warm()  # the model loads beside the vectors
    result = starting.retriever.search(NS, "sitemap pages")
    assert not result.degraded and starting.retriever.metrics()["vector_cache"]["loads"] == 1


def test_a_process_that_only_searches_preloads_nothing(
    two_runtimes: tuple[Runtime, Runtime],
) -> None:
    """The CLI's one search: the model loads, the namespaces others searched do not."""
    serving, oneshot = two_runtimes
    _two_projects_searched(serving, NS, OTHER)
    for _ in range(LOAD_TRIES):  # the first asks for the model, later ones load NS
        if not oneshot.retriever.search(NS, "sitemap pages").degraded:
            break
        time.sleep(0.05)
    else:
        pytest.fail("the search never answered with its vectors")
    time.sleep(1.0)  # a preload started by the searches would have loaded OTHER by now
    cache = oneshot.retriever.metrics()["vector_cache"]
    assert cache["loads"] == 1 and cache["namespaces"] == 1

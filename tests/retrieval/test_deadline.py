"""A search given up on does not finish its SQL: each leg's statements are cancelled at
the search's deadline, on real backends and real (if pathological) queries that take
longer than the bound."""

from __future__ import annotations

import logging
import random
import sqlite3
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import psycopg
import pytest

from tests.pgbulk import CHUNK, hnsw_built_after
from tests.retrieval.conftest import NS, make_record, put
from wakemark.shared.config import Settings, prepare_home
from wakemark.shared.retrieval.lexical import search_lexical
from wakemark.shared.runtime import Runtime
from wakemark.shared.storage import (
    ImportBatch,
    SearchQuery,
    Storage,
    StorageError,
    StorageTimeoutError,
    migrate,
    open_storage,
)

# Long records of a few words: matching or scanning them takes a while on any box.
# SQLite looks at its deadline every PROGRESS_OPS virtual machine instructions, a few
# per row, so it needs rows more than text.
ROWS = 2_000
WORDS = [f"word{i}" for i in range(20)]
BOUND_S = 0.003  # a few round trips to Postgres, then statement_timeout (whole ms)
# A query that takes less than this unbounded proves nothing about its cancellation.
SLOW_S = 0.008
VECTOR_ROWS = 5_000
VECTOR_BOUND_S = 0.002
ATTEMPTS = 5  # searches, on a box too busy for one to reach its legs within the budget


def _long_records(rt: Runtime, rows: int = ROWS) -> None:
    rng = random.Random(5)
    put(rt, [
        make_record(NS, f"walrus note {i}", i, summary=" ".join(rng.choices(WORDS, k=700))[:4000])
        for i in range(rows)
    ])  # fmt: skip


def _embedded_records(rt: Runtime, rows: int) -> None:
    """Records with their vectors, written as an import restores them (Postgres)."""
    vectors = np.random.default_rng(5).standard_normal((rows, 384)).astype(np.float32)
    assert rt.settings.database_url
    with hnsw_built_after(rt.settings.database_url):
        for lo in range(0, rows, CHUNK):
            batch = [(make_record(NS, "note", i), vectors[i]) for i in range(lo, lo + CHUNK)]
            rt.storage.import_batch(ImportBatch(records=batch))


def _slowest(fn: Callable[[], Any]) -> float:
    """The fastest of three unbounded runs, in seconds (the first warms the caches)."""
    times = []
    for _ in range(3):
        began = time.perf_counter()
        fn()
        times.append(time.perf_counter() - began)
    return min(times)


def _logged(caplog: pytest.LogCaptureFixture, message: str, wait_s: float = 10.0) -> bool:
    """Whether ``message`` is logged within ``wait_s`` (another thread may log it)."""
    end = time.monotonic() + wait_s
    while not any(message in r.getMessage() for r in caplog.records):
        if time.monotonic() > end:
            return False
        time.sleep(0.01)
    return True


def _cancelled(storage: Storage, exc: StorageTimeoutError) -> None:
    """The engine stopped a statement that was running (not one refused before it ran)."""
    cause = psycopg.errors.QueryCanceled if storage.backend == "postgres" else sqlite3.Error
    assert isinstance(exc.__cause__, cause), repr(exc.__cause__)


def _bounded_lexical(rt: Runtime, query: str, found: int) -> None:
    storage = rt.storage
    assert _slowest(lambda: search_lexical(storage, NS, query, 40)) >= SLOW_S
    with pytest.raises(StorageTimeoutError) as caught:
        search_lexical(storage, NS, query, 40, timeout_s=BOUND_S)
    _cancelled(storage, caught.value)
    # The connection it ran on serves the next search, unbounded, in full.
    assert len(search_lexical(storage, NS, query, 40)) == found


def test_a_substring_search_past_its_bound_is_cancelled(runtime: Runtime) -> None:
    _long_records(runtime)
    _bounded_lexical(runtime, "%%", 0)  # no token: a substring scan of every row


def test_an_interrupted_full_text_search_is_not_taken_for_a_refused_one(
    settings: Settings,
) -> None:
    # SQLite's error for an interrupted statement is the one of a query it refuses, which
    # falls back to the substring scan (unbounded). Postgres's full-text search of these
    # rows takes a few milliseconds: too little to cancel it reliably.
    prepare_home(settings)
    migrate(settings)
    rt = Runtime.build(settings)
    try:
        _long_records(rt, 3 * ROWS)  # SQLite ranks them faster than it scans them
        # Ten of the records' words: ranking them takes a few times SLOW_S (five take
        # about SLOW_S on a quiet box), and not so many that only the rarest are run.
        _bounded_lexical(rt, "walrus " + " ".join(WORDS[:10]), 40)
    finally:
        rt.close()


@pytest.mark.postgres
def test_a_vector_search_past_its_bound_is_cancelled(settings: Settings, pg_url: str) -> None:
    rt = Runtime.build(settings.replace(database_url=pg_url))
    try:
        migrate(rt.settings)
        _embedded_records(rt, VECTOR_ROWS)
        storage, query = rt.storage, np.ones(384, np.float32)

        # A filter no row passes: the HNSW walk visits the whole graph (then the exact scan
        # the rows that pass), as for a type filter on a large namespace.
        def search(bound: float | None) -> Any:
            return storage.search_vector(SearchQuery(NS, 40, "bugfix", timeout_s=bound), query)

        # A few milliseconds on a quiet box: a tighter bound, and no look at the cause.
        # pgvector looks for a cancel only between batches of its walk: the walk is
        # cancelled, or it ends past the bound and the exact scan after it never starts.
        assert _slowest(lambda: search(None)) >= 2.5 * VECTOR_BOUND_S
        with pytest.raises(StorageTimeoutError):
            search(VECTOR_BOUND_S)
        assert search(None) == []
    finally:
        rt.close()


def test_a_search_whose_lexical_leg_is_cancelled_answers_degraded(
    backend_settings: Settings, caplog: pytest.LogCaptureFixture
) -> None:
    rt = Runtime.build(backend_settings.replace(retrieval_budget_ms=10))
    try:
        # Scanned in well over twice the budget on a quiet box (SQLite scans faster).
        _long_records(rt, (3 if rt.storage.backend == "sqlite" else 2) * ROWS)
        unbounded_s = _slowest(lambda: search_lexical(rt.storage, NS, "%%", 40))
        assert unbounded_s >= 0.02  # twice the budget
        cancelled = "search degraded, a leg is missing: fts: substring search past"
        late = "search exceeded the 10 ms budget"
        with caplog.at_level(logging.WARNING, logger="wakemark.shared.retrieval"):
            for _ in range(ATTEMPTS):
                caplog.clear()
                result = rt.retriever.search(NS, "%%")
                assert result.items == [] and result.degraded  # not failed
                # The search thread says so when the leg ends: on a loaded box it may wait
                # for a core well past the budget, so the wait is generous (it ends at once).
                if _logged(caplog, cancelled):
                    break
                # Else the box was too busy for the search to reach its legs in time: the
                # caller said so, and nothing here tells about the leg. Again.
                assert any(late in r.getMessage() for r in caplog.records), caplog.messages
            else:
                pytest.fail(f"the search never reached its lexical leg in {ATTEMPTS} tries")
        assert rt.retriever.metrics()["errors"] == 0
    finally:
        rt.close()


@pytest.mark.postgres
def test_a_closed_storage_is_not_reopened_by_a_late_call(settings: Settings, pg_url: str) -> None:
    settings = settings.replace(database_url=pg_url)
    migrate(settings)
    storage = open_storage(settings)
    storage.ping()
    storage.close()
    # A vector leg or a cache load still running when its runtime closed.
    with pytest.raises(StorageError, match="closed"):
        storage.count_embeddings(NS)
    assert storage._db._pool is None  # type: ignore[attr-defined]

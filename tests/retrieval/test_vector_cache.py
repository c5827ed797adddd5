"""Incremental vector-cache refresh on both backends: always equal to a full reload."""

from __future__ import annotations

import itertools
import subprocess
import sys
import threading
from typing import Any

import numpy as np
from hypothesis import HealthCheck, given
from hypothesis import settings as hsettings
from hypothesis import strategies as st

from tests.retrieval.conftest import T0
from wakemark.shared.models import OBSERVATION_TYPES, MemoryRecord
from wakemark.shared.retrieval.vectors import VectorCache, VectorSet
from wakemark.shared.storage import Storage

_namespaces = itertools.count()
BUDGET = 2**30


class Harness:
    """A cache over one storage namespace, with an epoch bumped by every write."""

    def __init__(self, storage: Storage) -> None:
        self.storage = storage
        self.ns = f"/actor/cache/project/p{next(_namespaces)}/"
        self.epoch = 0
        self.cache = VectorCache(
            storage.list_embeddings,
            lambda ns: self.epoch,
            storage.embedded_ids,
            BUDGET,
        )
        self.ids: list[str] = []

    def add(self, seed: int, embed: bool = True) -> str:
        record = MemoryRecord(
            namespace=self.ns,
            title=f"record {seed}",
            observation_type=OBSERVATION_TYPES[seed % len(OBSERVATION_TYPES)],
            created_at=T0,
        )
        with self.storage.transaction() as tx:
            tx.put_memory_record(record)
            if embed:
                tx.put_embedding(record.record_id, _vector(seed))
        self.ids.append(record.record_id)
        self.epoch += 1
        return record.record_id

    def embed(self, index: int, seed: int) -> None:
        if self.ids:
            rid = self.ids[index % len(self.ids)]
            self.storage.put_embedding(rid, _vector(seed))
            self.epoch += 1

    def delete(self, index: int) -> None:
        if self.ids:
            self.storage.delete_memory_records([self.ids.pop(index % len(self.ids))])
            self.epoch += 1

    def clear(self) -> None:
        for rid in self.ids:  # an edit clears the record's vector
            self.storage.edit_memory_record(rid, title="edited")
        self.epoch += 1


def _vector(seed: int) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(384).astype(np.float32)


def _content(vset: VectorSet) -> dict[str, tuple[bytes, float, int]]:
    assert len(vset.ids) == len(set(vset.ids)) == len(vset.rows)
    assert vset.created_ts.shape == vset.types.shape == (len(vset.ids),)
    return {
        rid: (
            vset.rows.codes[i].tobytes() + vset.rows.halves[i].tobytes(),
            float(vset.created_ts[i]),
            int(vset.types[i]),
        )
        for i, rid in enumerate(vset.ids)
    }


def _full(h: Harness) -> dict[str, tuple[bytes, float, int]]:
    return _content(VectorSet.build(h.storage.list_embeddings(h.ns)))


OPS = st.lists(
    st.one_of(
        st.tuples(st.just("add"), st.integers(0, 10**6)),
        st.tuples(st.just("add_unembedded"), st.integers(0, 10**6)),
        st.tuples(st.just("embed"), st.integers(0, 50), st.integers(0, 10**6)),
        st.tuples(st.just("delete"), st.integers(0, 50)),
        st.tuples(st.just("clear")),
        st.tuples(st.just("search")),
    ),
    max_size=25,
)


@hsettings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(ops=OPS)
def test_incremental_refresh_equals_full_reload(storage: Any, ops: list[tuple[Any, ...]]) -> None:
    h = Harness(storage)
    h.add(10**7)
    h.cache.get(h.ns)
    for op in ops:
        if op[0] == "add":
            h.add(op[1])
        elif op[0] == "add_unembedded":
            h.add(op[1], embed=False)
        elif op[0] == "embed":
            h.embed(op[1], op[2])
        elif op[0] == "delete":
            h.delete(op[1])
        elif op[0] == "clear":
            h.clear()
        else:
            assert _content(h.cache.get(h.ns)) == _full(h)
    assert _content(h.cache.get(h.ns)) == _full(h)
    assert h.cache.loads == 1  # every later change was patched in, never reloaded


def test_patches_leave_earlier_sets_untouched(storage: Any) -> None:
    h = Harness(storage)
    first, second = h.add(1), h.add(2)
    before = h.cache.get(h.ns)
    snapshot = _content(before)
    added = h.add(3)
    grown = h.cache.get(h.ns)
    assert set(grown.ids) == {first, second, added} and _content(before) == snapshot
    grown_snapshot = _content(grown)
    h.add(4)
    again = h.cache.get(h.ns)
    # Appends reuse the spare rows of one buffer; rows a reader can see never change.
    assert again.buffer is grown.buffer and len(again.ids) == 4
    assert _content(grown) == grown_snapshot and _content(again) == _full(h)
    h.embed(0, 99)  # re-embed `first`
    h.delete(1)  # `second`
    latest = h.cache.get(h.ns)
    assert second not in latest.ids and _content(latest) == _full(h)
    assert _content(again)[first] != _content(latest)[first]
    assert _content(before) == snapshot
    assert h.cache.stats()["loads"] == 1 and h.cache.stats()["refreshes"] == 3


def test_re_embedding_after_clearing_is_patched_in_too(storage: Any) -> None:
    h = Harness(storage)
    for seed in range(6):
        h.add(seed)
    h.cache.get(h.ns)
    h.clear()
    for i in range(3):
        h.embed(i, 100 + i)  # the embed jobs, half-way through
    assert _content(h.cache.get(h.ns)) == _full(h)
    for i in range(3, 6):
        h.embed(i, 100 + i)
    assert _content(h.cache.get(h.ns)) == _full(h)
    assert h.cache.loads == 1 and h.cache.refreshes == 2


def test_a_rebuilds_swap_replaces_every_vector_and_the_model(storage: Any) -> None:
    h = Harness(storage)
    storage.claim_model("old")
    for seed in range(6):
        h.add(seed)
    before = h.cache.get(h.ns)
    assert before.model == "old"
    storage.start_rebuild("new")
    with storage.transaction() as tx:
        for i, rid in enumerate(h.ids):
            tx.put_staged(rid, _vector(100 + i))
    h.epoch += 1
    staged = h.cache.get(h.ns)  # staged vectors are not the records' yet
    assert staged.model == "old" and _content(staged) == _content(before)
    assert storage.swap_staged("new")
    h.epoch += 1
    after = h.cache.get(h.ns)
    assert after.model == "new" and _content(after) == _full(h)
    stored = storage.list_embeddings(h.ns)
    by_id = dict(zip(stored.record_ids, stored.vectors, strict=True))
    assert all(np.array_equal(by_id[rid], _vector(100 + i)) for i, rid in enumerate(h.ids))


def test_a_slow_first_load_finishes_in_the_background(storage: Any) -> None:
    h = Harness(storage)
    for seed in range(3):
        h.add(seed)
    gate = threading.Event()

    def slow_load(ns: str, since: int | None) -> Any:
        assert gate.wait(10), "never released"
        return storage.list_embeddings(ns, since)

    cache = VectorCache(slow_load, lambda ns: h.epoch, storage.embedded_ids, BUDGET)
    assert cache.get_within(h.ns, 0.05) is None  # still loading: the caller degrades
    assert cache.get_within(h.ns, 0.05) is None  # the same load, not a second one
    gate.set()
    loaded = cache.get_within(h.ns, 10)
    assert loaded is not None and _content(loaded) == _full(h)
    assert cache.stats()["loads"] == 1
    # A write since: the next read brings the set up to date (incrementally).
    h.add(7)
    refreshed = cache.get_within(h.ns, 10)
    assert refreshed is not None and _content(refreshed) == _full(h)
    assert cache.stats()["loads"] == 1 and cache.stats()["refreshes"] == 1


def test_a_slow_refresh_leaves_the_set_as_last_read_held(storage: Any) -> None:
    h = Harness(storage)
    for seed in range(3):
        h.add(seed)
    gate = threading.Event()
    gate.set()

    def slow_load(ns: str, since: int | None) -> Any:
        assert gate.wait(10), "never released"
        return storage.list_embeddings(ns, since)

    cache = VectorCache(slow_load, lambda ns: h.epoch, storage.embedded_ids, BUDGET)
    assert cache.held(h.ns) is None  # never loaded
    before = cache.get_within(h.ns, 10)
    assert before is not None
    gate.clear()
    h.add(7)
    assert cache.get_within(h.ns, 0.05) is None  # refreshing
    assert cache.held(h.ns) is before  # what a search answers from meanwhile
    gate.set()
    after = cache.get_within(h.ns, 10)
    assert after is not None and _content(after) == _full(h) and cache.held(h.ns) is after


def test_warm_starts_one_background_load(storage: Any) -> None:
    h = Harness(storage)
    h.add(1)
    h.cache.warm(h.ns)
    h.cache.warm(h.ns)
    loaded = h.cache.get_within(h.ns, 10)
    assert loaded is not None and _content(loaded) == _full(h)
    assert h.cache.stats()["loads"] == 1


def test_a_process_that_searches_runs_one_blas_thread() -> None:
    # OpenBLAS's spare threads spin after each product and took the CPU from the
    # lexical leg and the query embedding beside it (shared/retrieval/vectors.py).
    code = (
        "import wakemark.shared.retrieval.vectors, threadpoolctl;"
        "print(sorted({i['num_threads'] for i in threadpoolctl.threadpool_info()"
        " if i['user_api'] == 'blas'}))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[1]"


def test_the_int8_scan_returns_the_float32_nearest_rows() -> None:
    """The first pass over int8 codes keeps enough rows that ranking them again by their
    float16 vectors returns the exact float32 top k, in order, with the filters: rows
    may trade places only where float16 cannot tell their cosines apart."""
    from datetime import timedelta

    from wakemark.shared.storage import EmbeddingMatrix

    rng = np.random.default_rng(3)
    n = 5000
    vectors = rng.standard_normal((n, 384)).astype(np.float32)
    vectors[:50] = vectors[0] + 0.3 * rng.standard_normal((50, 384))  # a tight cluster
    types = [OBSERVATION_TYPES[i % 3] for i in range(n)]
    created = np.array([(T0 + timedelta(minutes=i)).timestamp() for i in range(n)])
    unit = vectors / np.linalg.norm(vectors, axis=1, keepdims=True)
    vset = VectorSet.build(
        EmbeddingMatrix([f"r{i}" for i in range(n)], created, types, vectors.copy(), n, 0)
    )
    since = T0 + timedelta(minutes=3000)
    asks = ((80, None, None), (10, OBSERVATION_TYPES[1], None), (40, None, since))
    for seed in range(20):
        query = rng.standard_normal(384).astype(np.float32)
        if seed % 2:
            query = vectors[0] + 0.5 * query  # near the cluster: many close scores
        q = query / np.linalg.norm(query)
        for k, kind, after in asks:
            keep = np.ones(n, dtype=bool)
            if kind is not None:
                keep &= np.array([t == kind for t in types])
            if after is not None:
                keep &= created >= after.timestamp()
            exact = np.where(keep, unit @ q, -np.inf)
            want = np.argsort(-exact, kind="stable")[:k]
            got = [int(c.record_id[1:]) for c in vset.top(query, k, kind, after)]
            assert len(got) == len(want) and all(keep[got])
            assert np.abs(exact[got] - exact[want]).max() < 1e-4
            assert sum(a != b for a, b in zip(got, want, strict=True)) <= k // 10


def _harnesses(storage: Any, sizes: list[int]) -> list[Harness]:
    out = []
    for size in sizes:
        h = Harness(storage)
        for seed in range(size):
            h.add(seed)
        out.append(h)
    return out


def test_preload_loads_the_most_wanted_first_until_the_budget_is_full(storage: Any) -> None:
    first, second, third = _harnesses(storage, [4, 4, 4])
    # Room for two of the three: the third would evict what was wanted more.
    budget = int(2.5 * VectorSet.build(storage.list_embeddings(first.ns)).nbytes)
    cache = VectorCache(storage.list_embeddings, lambda ns: 0, storage.embedded_ids, budget)
    cache.preload([second.ns, first.ns, third.ns]).join(10)
    assert cache.held(second.ns) is not None and cache.held(first.ns) is not None
    assert cache.held(third.ns) is None
    assert cache.stats()["loads"] == 2 and cache.stats()["evictions"] == 0
    held = cache.get_within(second.ns, 0.0)
    assert held is not None and _content(held) == _full(second)


def test_preload_skips_what_would_not_fit_for_a_smaller_one(storage: Any) -> None:
    big, small = _harnesses(storage, [12, 3])
    budget = 2 * VectorSet.build(storage.list_embeddings(small.ns)).nbytes
    count = lambda ns: len(storage.embedded_ids(ns))  # noqa: E731
    # Alone (SQLite: the only vector search) and with a database to search instead.
    for cache in (
        VectorCache(storage.list_embeddings, lambda ns: 0, storage.embedded_ids, budget),
        VectorCache(storage.list_embeddings, lambda ns: 0, storage.embedded_ids, budget, count),
    ):
        cache.preload([big.ns, small.ns]).join(10)
        assert cache.held(big.ns) is None
        held = cache.get_within(small.ns, 0.0)
        assert held is not None and _content(held) == _full(small)
        assert cache.stats()["loads"] == 1

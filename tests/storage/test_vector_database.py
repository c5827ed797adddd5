"""The vector leg past the cache's byte budget: eviction by bytes, and on Postgres the
database (HNSW or an exact scan) answering for a namespace the process does not hold."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import numpy as np
import psycopg
import pytest

from tests.pgbulk import chunks, hnsw_built_after
from tests.retrieval.conftest import NS, OTHER, T0
from wakemark.shared.cache import LocalEpochs
from wakemark.shared.config import Settings
from wakemark.shared.embedding import Embedder
from wakemark.shared.models import EMBEDDING_DIM, MemoryRecord
from wakemark.shared.retrieval.legs import VectorLeg
from wakemark.shared.retrieval.vectors import ROW_BYTES, VectorCache, VectorSet
from wakemark.shared.storage import SearchQuery, Storage
from wakemark.shared.storage.postgres import search as q

BIG = "/actor/alice/project/big/"


def _fill(storage: Storage, namespace: str, n: int, seed: int, types: Any = None) -> None:
    """``n`` records with clustered unit vectors (so neighbourhoods exist)."""
    rng = np.random.default_rng(seed)
    centers = rng.standard_normal((8, EMBEDDING_DIM))
    vectors = centers[rng.integers(0, 8, n)] + rng.standard_normal((n, EMBEDDING_DIM))
    for batch in chunks(range(n)):
        with storage.transaction() as tx:
            for i in batch:
                kind = types(i) if types else "discovery"
                record = MemoryRecord(
                    namespace=namespace,
                    title=f"note {seed} {i}",
                    observation_type=kind,
                    created_at=T0 + timedelta(minutes=i),
                )
                tx.put_memory_record(record)
                tx.put_embedding(record.record_id, vectors[i].astype(np.float32))


def _query(seed: int) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(EMBEDDING_DIM).astype(np.float32)


def _exact(storage: Storage, namespace: str, query: np.ndarray, k: int, **filters: Any) -> list:
    return VectorSet.build(storage.list_embeddings(namespace)).top(query, k, **filters)


def test_the_cache_evicts_the_least_recently_used_by_bytes(storage: Storage) -> None:
    for i, ns in enumerate((NS, OTHER, BIG)):
        _fill(storage, ns, 30, seed=i)
    # Room for two namespaces of 30 rows, not three.
    cache = VectorCache(
        storage.list_embeddings, lambda ns: 0, storage.embedded_ids, budget_bytes=75 * ROW_BYTES
    )
    first, second = cache.get(NS), cache.get(OTHER)
    assert first is not None and second is not None
    assert cache.get(NS) is first  # NS is now the most recently used
    assert cache.get(BIG) is not None
    stats = cache.stats()
    assert stats["namespaces"] == 2 and stats["evictions"] == 1
    assert stats["bytes"] <= stats["budget_bytes"] == 75 * ROW_BYTES
    assert cache.get(NS) is first  # kept; OTHER went
    assert cache.get(OTHER) is not second and cache.stats()["loads"] == 4


def test_with_a_database_leg_a_newcomer_evicts_only_idle_namespaces(storage: Storage) -> None:
    for i, ns in enumerate((NS, OTHER, BIG)):
        _fill(storage, ns, 30, seed=i)

    def cache(idle_s: float) -> VectorCache:
        return VectorCache(
            storage.list_embeddings, lambda ns: 0, storage.embedded_ids, 75 * ROW_BYTES,
            count=lambda ns: len(storage.embedded_ids(ns)), idle_s=idle_s,
        )  # fmt: skip

    busy = cache(idle_s=3600)
    assert busy.get(NS) is not None and busy.get(OTHER) is not None
    assert busy.get(BIG) is None  # both searched just now: BIG goes to the database
    assert busy.stats()["evictions"] == 0 and busy.stats()["in_database"] == 1
    assert busy.rows(BIG) == 30
    idle = cache(idle_s=0)  # every entry idle at once: LRU, as without a database leg
    assert idle.get(NS) is not None and idle.get(OTHER) is not None
    assert idle.get(BIG) is not None and idle.stats()["evictions"] == 1


def test_the_cache_is_bounded_in_entries_too(storage: Storage) -> None:
    # An empty namespace costs no bytes: only the entry bound stops a client searching
    # ever new project ids from growing the cache.
    _fill(storage, NS, 3, seed=1)
    cache = VectorCache(
        storage.list_embeddings, lambda ns: 0, storage.embedded_ids, 2**30, max_entries=8
    )
    assert cache.get(NS) is not None
    for i in range(50):
        empty = cache.get(f"/actor/a/project/nothing-{i}/")
        assert empty is not None and not empty.ids
    stats = cache.stats()
    assert stats["namespaces"] == 8 and stats["evictions"] == 43
    assert cache.get(NS) is not None and cache.stats()["loads"] == 52  # NS went, reloaded
    # Namespaces too large to load are remembered as left to the database: bounded too.
    counted = VectorCache(
        storage.list_embeddings, lambda ns: 0, storage.embedded_ids, ROW_BYTES,
        count=lambda ns: 10, max_entries=8,
    )  # fmt: skip
    for i in range(50):
        assert counted.get(f"/actor/a/project/large-{i}/") is None
    assert counted.stats()["in_database"] == 8
    assert counted.rows("/actor/a/project/large-49/") == 10
    assert counted.rows("/actor/a/project/large-0/") is None


def test_a_namespace_left_to_the_database_reads_no_epoch(storage: Storage) -> None:
    """The database answers its search whatever the epoch says: reading it would cost a
    round trip (Redis, or the database's change stamp) for nothing."""
    asked: list[str] = []
    cache = VectorCache(
        storage.list_embeddings,
        lambda ns: asked.append(ns) or 0,  # type: ignore[func-returns-value]
        storage.embedded_ids,
        ROW_BYTES,
        count=lambda ns: 10**6,  # far over the budget
    )
    assert cache.get(NS) is None  # counted, and left to the database
    asked.clear()
    assert cache.get_within(NS, 0.0) is None
    assert asked == []


def test_nbytes_counts_the_spare_buffer_rows(storage: Storage) -> None:
    _fill(storage, NS, 10, seed=1)
    vset = VectorSet.build(storage.list_embeddings(NS))
    _fill(storage, NS, 1, seed=2)
    grown = vset.patched(storage.list_embeddings(NS, vset.watermark))
    assert grown.buffer is not None and len(grown.buffer) > len(grown.ids)
    assert grown.nbytes >= grown.buffer.nbytes > grown.rows.nbytes


def test_without_a_database_leg_an_oversized_namespace_is_held_alone(storage: Storage) -> None:
    _fill(storage, NS, 20, seed=1)
    _fill(storage, OTHER, 5, seed=2)
    cache = VectorCache(storage.list_embeddings, lambda ns: 0, storage.embedded_ids, ROW_BYTES)
    assert cache.get(OTHER) is not None
    big = cache.get(NS)  # no count given (SQLite's way): loaded, over the budget
    assert big is not None and len(big.ids) == 20
    assert cache.stats()["namespaces"] == 1 and cache.stats()["evictions"] == 1


# --- Postgres: the database answers ---------------------------------------------------------


@pytest.fixture
def pg_storage(pg_url: str, settings: Settings) -> Iterator[Storage]:
    from wakemark.shared.storage import migrate, open_storage

    pg = settings.replace(database_url=pg_url)
    migrate(pg)
    store = open_storage(pg)
    yield store
    store.close()


class _Embedder:
    """The query's vector is given by the test; storage stays real."""

    state = "ready"
    identity = "sha256:0123456789abcdef"
    path = Path("model.onnx")

    def __init__(self, vector: np.ndarray) -> None:
        self.vector = vector

    def embed_query(self, text: str) -> np.ndarray:
        return self.vector

    def model(self) -> _Embedder:
        return self

    stored_other = Embedder.stored_other  # the database's model checked as a process does


def _leg(storage: Storage, settings: Settings, query: np.ndarray, cache_mb: int) -> VectorLeg:
    onnx = settings.replace(embedder="onnx", vector_cache_mb=cache_mb)
    return VectorLeg(onnx, storage, _Embedder(query), LocalEpochs())  # type: ignore[arg-type]


@pytest.mark.postgres
def test_a_namespace_over_the_budget_is_searched_in_the_database(
    pg_storage: Storage, settings: Settings
) -> None:
    _fill(pg_storage, BIG, 900, seed=3)  # ~1.2 MB of vectors: over a 1 MB budget
    _fill(pg_storage, NS, 40, seed=4)
    query = _query(5)
    leg = _leg(pg_storage, settings, query, cache_mb=1)
    for _ in range(3):
        found = leg.search(SearchQuery(BIG, 40), "anything")
        exact = _exact(pg_storage, BIG, query, 40)
        assert [c.record_id for c in found] == [c.record_id for c in exact]
        assert all(abs(a.score - b.score) < 1e-4 for a, b in zip(found, exact, strict=True))
    small = leg.search(SearchQuery(NS, 10), "anything")  # fits: loaded (in the background) and kept
    assert [c.record_id for c in small] == [c.record_id for c in _exact(pg_storage, NS, query, 10)]
    for _ in range(100):
        if leg.cache_stats()["namespaces"] == 1:
            break
        leg.search(SearchQuery(NS, 10), "anything")
    stats = leg.cache_stats()
    assert stats["namespaces"] == 1 and stats["rows"] == 40  # BIG never cached
    assert stats["in_database"] == 1 and stats["bytes"] <= stats["budget_bytes"]
    assert stats["database_searches"] >= 3
    ids = [c.record_id for c in _exact(pg_storage, BIG, query, 3)]
    cosines = leg.cosines(BIG, "anything", ids)  # the gate's evidence, from the database
    assert cosines.keys() == set(ids) and all(-1.0 <= v <= 1.0 for v in cosines.values())


@pytest.mark.postgres
def test_database_results_equal_the_in_memory_leg_on_a_small_namespace(
    pg_storage: Storage,
) -> None:
    _fill(pg_storage, NS, 300, seed=6, types=lambda i: ("bugfix", "decision")[i % 2])
    _fill(pg_storage, OTHER, 300, seed=7)
    query = _query(8)
    for filters in ({}, {"observation_type": "bugfix"}, {"since": T0 + timedelta(minutes=150)}):
        memory = _exact(pg_storage, NS, query, 20, **filters)
        for exact in (True, False):
            hits = pg_storage.search_vector(SearchQuery(NS, 20, **filters), query, exact=exact)
            if not exact:  # approximate: the same neighbours, near enough
                assert len({h.record_id for h in hits} & {c.record_id for c in memory}) >= 18
                continue
            assert [h.record_id for h in hits] == [c.record_id for c in memory]
            for h, c in zip(hits, memory, strict=True):
                assert abs(h.cosine - c.score) < 1e-4  # the cache ranks by float16 rows
                assert h.created_at == c.created_ts


def _plan(storage: Any, sql: str, params: dict[str, Any]) -> str:
    with storage._db.connection() as conn, conn.transaction():
        for name, value in q.vector_settings(storage.hnsw_ef_search, sort=False).items():
            conn.execute(f"SET LOCAL {name} = '{value}'")
        return "\n".join(r[0] for r in conn.execute("EXPLAIN " + sql, params))


def _one_bugfix_in_40(i: int) -> str:
    return "bugfix" if i % 40 == 0 else "discovery"


@pytest.mark.postgres
def test_a_selective_filter_still_gets_k_rows_from_the_hnsw_walk(pg_storage: Storage) -> None:
    # 1 'bugfix' in 40 of 4,000 rows: a walk that stopped at ef_search candidates would
    # keep ~3 of them; the iterative scan goes on until it has the 20 asked for.
    url = pg_storage._db.url  # type: ignore[attr-defined]
    with hnsw_built_after(url):
        _fill(pg_storage, NS, 4000, seed=9, types=_one_bugfix_in_40)
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("ANALYZE memory_records")
    query = _query(10)
    params = {"ns": NS + "%", "vector": query, "limit": 20, "type": "bugfix", "since": None}
    params["model"] = "sha256:0123456789abcdef"  # as the vector leg asks
    assert "memory_records_embedding" in _plan(pg_storage, q.SEARCH_VECTOR_HNSW, params)
    hits = pg_storage.search_vector(SearchQuery(NS, 20, observation_type="bugfix"), query)
    exact = _exact(pg_storage, NS, query, 20, observation_type="bugfix")
    assert len(hits) == 20
    assert len({h.record_id for h in hits} & {c.record_id for c in exact}) >= 19


@pytest.mark.postgres
def test_the_database_answers_only_a_query_of_the_stored_model(pg_storage: Storage) -> None:
    # A swap may commit between the vector leg's check of the model and its statement.
    _fill(pg_storage, NS, 50, seed=11)
    pg_storage.claim_model("sha256:00000000000000aa")
    query, ids = _query(12), [c.record_id for c in _exact(pg_storage, NS, _query(12), 5)]
    for exact in (False, True):
        assert pg_storage.search_vector(SearchQuery(NS, 5), query, exact, "sha256:00000000000000aa")
        assert (
            pg_storage.search_vector(SearchQuery(NS, 5), query, exact, "sha256:00000000000000bb")
            == []
        )
    assert len(pg_storage.vector_cosines(NS, query, ids, "sha256:00000000000000aa")) == 5
    assert pg_storage.vector_cosines(NS, query, ids, "sha256:00000000000000bb") == {}

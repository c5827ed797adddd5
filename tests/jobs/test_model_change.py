"""A model change: ``rebuild_embeddings`` (``wakemark backfill --rebuild``) against a
database a service keeps searching, on both backends, with two real models (the second
the first with its dimensions permuted: as good, but not comparable with it)."""

from __future__ import annotations

import threading
from pathlib import Path

import numpy as np
import pytest

from wakemark.shared.config import Settings
from wakemark.shared.jobs import backfill_embeddings, embed_records, rebuild_embeddings
from wakemark.shared.models import MemoryRecord
from wakemark.shared.retrieval import legs
from wakemark.shared.retrieval.legs import LegParts, Unavailable, VectorLeg
from wakemark.shared.runtime import Runtime
from wakemark.shared.storage import SearchQuery

NS = "/actor/a/project/model-change/"
TOPICS = [
    "Customers were charged twice on double click",
    "Sitemap generation split into pages",
    "The worker crashed because Redis was not reachable at startup",
    "Fonts render as boxes when the glyph cache is stale",
    "Release notes are generated from merged pull requests",
    "Dark mode colours fixed for the settings dialog",
]
QUERY = "people billed two times when pressing pay"  # no word of TOPICS[0]


@pytest.fixture
def old(backend_settings: Settings, onnx_model_path: Path, make_runtime) -> Runtime:
    """The service, configured with the model the stored vectors are of."""
    runtime = make_runtime(backend_settings.replace(embedder="onnx", model_path=onnx_model_path))
    runtime.embedder.warm()
    return runtime


@pytest.fixture
def new(old: Runtime, second_model_path: Path, make_runtime) -> Runtime:
    """A process configured with the second model, on the same database."""
    runtime = make_runtime(old.settings.replace(model_path=second_model_path))
    runtime.embedder.warm()
    return runtime


def _records(n: int) -> list[MemoryRecord]:
    return [MemoryRecord(namespace=NS, title=f"{TOPICS[i % len(TOPICS)]} ({i})") for i in range(n)]


def _write(runtime: Runtime, records: list[MemoryRecord]) -> None:
    for record in records:
        runtime.storage.put_memory_record(record)
    assert backfill_embeddings(runtime.tasks)["embedded"] == len(records)


def _leg(runtime: Runtime) -> VectorLeg:
    parts = LegParts(runtime.settings, runtime.storage, runtime.embedder, runtime.epochs)
    return VectorLeg.build(parts)


def _semantic(leg: VectorLeg, runtime: Runtime) -> list[str]:
    """The vector leg's hits for QUERY; the namespace's vectors read first (sqlite)."""
    leg._cache.get(NS)
    return [c.record_id for c in leg.search(SearchQuery(NS, 3), QUERY)]


def _stored(runtime: Runtime) -> dict[str, np.ndarray]:
    rows = runtime.storage.list_embeddings(NS)
    return dict(zip(rows.record_ids, rows.vectors, strict=True))


def _made_by(runtime: Runtime, records: list[MemoryRecord]) -> dict[str, np.ndarray]:
    vectors = runtime.embedder.embed([r.embedding_text() for r in records])
    return {r.record_id: v for r, v in zip(records, vectors, strict=True)}


def _all_close(stored: dict[str, np.ndarray], made: dict[str, np.ndarray]) -> bool:
    return stored.keys() == made.keys() and all(
        np.allclose(stored[k], made[k], atol=1e-5) for k in made
    )


def test_the_two_models_are_as_good_and_not_comparable(old: Runtime, new: Runtime) -> None:
    assert old.embedder.identity != new.embedder.identity
    a, b = old.embedder.embed(TOPICS), new.embedder.embed(TOPICS)
    assert np.allclose(a @ a.T, b @ b.T, atol=1e-4)  # the same geometry
    assert np.abs(np.diag(a @ b.T)).max() < 0.5  # a text's two vectors are far apart


def test_a_rebuild_keeps_the_vector_leg_until_it_swaps_every_vector_at_once(
    old: Runtime, new: Runtime, monkeypatch: pytest.MonkeyPatch
) -> None:
    records = _records(30)
    _write(old, records)
    service = _leg(old)
    billing = {r.record_id for r in records if r.title.startswith(TOPICS[0])}
    first = _semantic(service, old)
    assert first and first[0] in billing
    before = _made_by(old, records)

    answered: list[list[str]] = []
    columns_seen: list[bool] = []
    stop = threading.Event()

    def between_batches(done: int, total: int) -> None:
        # Every batch committed so far: the service still searches with its vectors, and
        # the records' vectors are all the old model's.
        answered.append(_semantic(service, old))
        columns_seen.append(_all_close(_stored(old), before))
        if done >= 16:
            stop.set()  # Ctrl-C: the rebuild stops after this batch

    result = rebuild_embeddings(new.tasks, batch=8, progress=between_batches, stop=stop)
    assert not result["swapped"] and result["embedded"] == 16
    assert len(answered) == 3 and all(hits and hits[0] in billing for hits in answered)
    assert all(columns_seen)
    models = old.storage.embedding_models()
    assert models.model == old.embedder.identity and models.staged == new.embedder.identity

    # Written by the service meanwhile, with the old model's vector.
    late = _records(31)[30:]
    late[0] = late[0].model_copy(update={"title": "Invoices were paid twice by one customer"})
    _write(old, late)
    before.update(_made_by(old, late))
    billing.add(late[0].record_id)

    # Run again: it goes on where it stopped (16 records were staged and stay so).
    result = rebuild_embeddings(new.tasks, batch=8, progress=between_batches)
    assert result["swapped"] and result["embedded"] == 31 - 16
    assert all(columns_seen)
    assert _all_close(_stored(old), _made_by(new, records + late))
    models = old.storage.embedding_models()
    assert models.model == new.embedder.identity and models.staged is None

    # The new model's process searches the swapped vectors. The old one's cache holds the
    # vectors it read, of its own model (stale, never mixed), until its epochs say they
    # changed (another process's writes do, through Redis, or without it the database's
    # change stamp, which SQLite's swap moves as it re-stamps every vector) or its next
    # read of the stored model (held off here: the rebuild may have outlasted
    # MODEL_CHECK_S); then it leaves its leg out.
    monkeypatch.setattr(legs, "MODEL_CHECK_S", float("inf"))
    assert _semantic(_leg(new), new)[0] in billing
    if old.settings.backend == "postgres":  # its swap renames the columns: no stamp moves
        assert _semantic(service, old)[0] in billing
        old.epochs.bump({NS})
    with pytest.raises(Unavailable, match="stored vectors are of model"):
        _semantic(service, old)
    assert "vector_leg_off" in service.metrics()


def test_a_process_of_another_model_never_compares_or_writes_its_vectors(
    old: Runtime, new: Runtime
) -> None:
    records = _records(6)
    _write(old, records)
    leg = _leg(new)
    with pytest.raises(Unavailable, match="stored vectors are of model"):
        _semantic(leg, new)
    assert new.retriever.search(NS, "charged twice").items  # lexical still answers
    assert leg.metrics()["vector_leg_off"].startswith("the stored vectors are of model")
    assert leg.cosines(NS, QUERY, [r.record_id for r in records]) == {}

    extra = _records(7)[6:]
    new.storage.put_memory_record(extra[0])
    assert embed_records(new.tasks, [extra[0].record_id]) == 0
    assert backfill_embeddings(new.tasks)["model"] is None
    assert not new.storage.has_embedding(extra[0].record_id)
    assert old.storage.embedding_models().model == old.embedder.identity


def test_a_database_from_before_is_taken_as_made_by_the_model_configured(
    old: Runtime,
) -> None:
    records = _records(6)
    vectors = _made_by(old, records)
    with old.storage.transaction() as tx:  # as a version without models wrote them
        for record in records:
            tx.put_memory_record(record)
            tx.put_embedding(record.record_id, vectors[record.record_id])
    assert old.storage.embedding_models().model is None
    assert _semantic(_leg(old), old)[0] == records[0].record_id
    assert old.storage.embedding_models().model == old.embedder.identity


def test_the_swap_waits_for_every_record_and_for_its_own_rebuild(old: Runtime) -> None:
    storage = old.storage
    records = _records(3)
    _write(old, records)
    assert storage.start_rebuild("sha256:b") == 3
    with storage.transaction() as tx:
        for record in records[:2]:
            tx.put_staged(record.record_id, np.ones(384, dtype=np.float32))
    assert not storage.swap_staged("sha256:b")  # one lacks a staged vector
    assert not storage.swap_staged("sha256:c")  # not the rebuild under way
    assert storage.embedding_models().model == old.embedder.identity
    assert _all_close(_stored(old), _made_by(old, records))
    assert storage.start_rebuild("sha256:c") == 3  # another model: its staging starts over
    assert [r.record_id for r in storage.records_missing_staged(5)] == sorted(
        r.record_id for r in records
    )


def test_the_services_learn_of_the_swap_through_redis(
    backend_settings: Settings,
    onnx_model_path: Path,
    second_model_path: Path,
    redis_url: str,
    make_runtime,
) -> None:
    """No process is told but through the epochs the swap bumps in Redis: the service's
    cache, holding the old model's vectors, is read again and found another model's."""
    shared = backend_settings.replace(
        embedder="onnx", model_path=onnx_model_path, redis_url=redis_url
    )
    old = make_runtime(shared)
    new = make_runtime(shared.replace(model_path=second_model_path))
    records = _records(12)
    _write(old, records)
    billing = {r.record_id for r in records if r.title.startswith(TOPICS[0])}
    service = _leg(old)
    assert _semantic(service, old)[0] in billing
    assert rebuild_embeddings(new.tasks)["swapped"]
    with pytest.raises(Unavailable, match="stored vectors are of model"):
        _semantic(service, old)
    assert _semantic(_leg(new), new)[0] in billing

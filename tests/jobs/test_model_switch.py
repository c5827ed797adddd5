"""A running service after a model change: once ``wakemark backfill --rebuild`` swaps in
the new model's vectors, the service (an in-process app on each backend, its epochs
shared through Redis as a team server's are) loads the stored model in the background and
searches and writes with it, without a restart; a file that is not that model, or none,
leaves it as it was (full-text only, no vectors written), saying why in /health."""

from __future__ import annotations

import logging
import shutil
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.api.conftest import Api
from tests.jobs.test_model_change import NS, QUERY, TOPICS, _records, _write
from wakemark.services.api import create_app
from wakemark.services.api.security import ensure_token
from wakemark.shared.config import Settings
from wakemark.shared.embedding import Embedder, tokenizer_path
from wakemark.shared.jobs import embed_records, rebuild_embeddings
from wakemark.shared.models import MemoryRecord
from wakemark.shared.retrieval import legs
from wakemark.shared.retrieval.legs import VECTOR, VectorLeg
from wakemark.shared.runtime import Runtime

WAIT_S = 60  # for the background load to end: never reached unless it is stuck


def _copy(model: Path, folder: Path) -> Path:
    """The model's files (the model, its tokenizer) in another folder."""
    folder.mkdir(parents=True, exist_ok=True)
    shutil.copy(tokenizer_path(model), tokenizer_path(folder / model.name))
    shutil.copy(model, folder / model.name)
    return folder / model.name


def _replace(path: Path, by: Path) -> None:
    """``path`` now holds ``by``'s bytes (a re-export replacing the file)."""
    shutil.copy(by, path.with_name("incoming"))
    path.with_name("incoming").replace(path)


def _until(done: Callable[[], bool]) -> None:
    end = time.monotonic() + WAIT_S
    while not done():
        assert time.monotonic() < end, "stuck"
        time.sleep(0.02)


class Service:
    """A service of the old model: its app, its vector leg, its jobs."""

    def __init__(self, runtime: Runtime) -> None:
        self.runtime = runtime
        self.api = Api(create_app(runtime=runtime).test_client(), ensure_token(runtime.settings))
        leg = next(leg for leg in runtime.retriever.legs if leg.name == VECTOR)
        assert isinstance(leg, VectorLeg)
        self.leg = leg

    def search(self) -> list[dict[str, Any]]:
        response = self.api.get(f"/v1/search?namespace={NS}&q={QUERY}&limit=5")
        assert response.status_code == 200
        return list(response.get_json()["items"])

    def semantic(self) -> list[str]:
        """The ids the vector leg found (alone or with another leg)."""
        return [
            h["record"]["record_id"]
            for h in self.search()
            if h["match_source"] in ("semantic", "hybrid")
        ]

    def health(self) -> dict[str, Any]:
        return dict(self.api.get("/health").get_json())

    def switch_ended(self) -> bool:
        embedder = self.runtime.embedder
        self.search()  # a search that finds the stored model is another starts the switch
        return embedder.switch_state is None or embedder.switch_state.startswith("cannot")


@pytest.fixture
def local(backend_settings: Settings, onnx_model_path: Path) -> Settings:
    return backend_settings.replace(embedder="onnx", model_path=onnx_model_path)


@pytest.fixture
def shared(local: Settings, redis_url: str) -> Settings:
    """The service's epochs shared with the rebuild's process, as a team server's are."""
    return local.replace(redis_url=redis_url)


def _started(make_runtime: Callable[[Settings], Runtime], settings: Settings) -> Runtime:
    runtime = make_runtime(settings)
    runtime.embedder.warm()
    return runtime


def _billing(records: list[MemoryRecord]) -> set[str]:
    return {r.record_id for r in records if r.title.startswith(TOPICS[0])}


@pytest.mark.redis
def test_a_running_service_switches_to_the_stored_model_once_the_swap_commits(
    shared: Settings,
    second_model_path: Path,
    make_runtime: Callable[[Settings], Runtime],
    caplog: pytest.LogCaptureFixture,
) -> None:
    old = _started(make_runtime, shared)
    new = _started(make_runtime, shared.replace(model_path=second_model_path))
    old_id, new_id = old.embedder.identity, new.embedder.identity
    records = _records(12)
    _write(old, records)
    service = Service(old)
    assert _billing(records) & set(service.semantic())
    before = old.embedder.model()
    first_query_vector = service.leg._recent[(old_id, QUERY)]

    # The switch's load waits until the test lets it go: meanwhile the service answers
    # at once, full-text only (its vector leg out), and writes no vector.
    release = threading.Event()
    load = Embedder._load

    def held(self: Embedder, path: Path, identity: str | None = None) -> Any:
        if identity is not None:
            assert release.wait(WAIT_S)
        return load(self, path, identity)

    caplog.set_level(logging.INFO)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(Embedder, "_load", held)
        assert rebuild_embeddings(new.tasks)["swapped"]
        assert old.storage.embedding_models().path == str(second_model_path.absolute())
        _until(lambda: not service.semantic() and old.embedder.switch_state is not None)
        assert old.embedder.identity == old_id
        assert service.health()["embedder"]["switch"] == f"loading the stored model {new_id}"
        late = MemoryRecord(namespace=NS, title="Invoices were paid twice by one customer")
        old.storage.put_memory_record(late)
        assert embed_records(old.tasks, [late.record_id]) == 0
        release.set()
        _until(lambda: old.embedder.identity == new_id)

    # The same process, not restarted: the new model's query vector against the new
    # model's vectors, which it writes too.
    hits = service.semantic()
    assert _billing(records) & set(hits)
    query_vector = service.leg._recent[(new_id, QUERY)]
    assert np.allclose(query_vector, new.embedder.embed_query(QUERY), atol=1e-5)
    assert not np.allclose(query_vector, before.embed_query(QUERY), atol=0.1)
    assert embed_records(old.tasks, [late.record_id]) == 1
    stored = old.storage.list_embeddings(NS)
    written = stored.vectors[stored.record_ids.index(late.record_id)]
    assert np.allclose(written, new.embedder.embed([late.embedding_text()])[0], atol=1e-5)
    health = service.health()
    assert health["embedder"]["model"] == new_id and "switch" not in health["embedder"]
    assert "vector_leg_off" not in health["search"]
    assert any(f"embedder switched from {old_id}" in m for m in caplog.messages)
    # A search that took the model before the switch ends with it.
    assert before.identity == old_id
    assert np.allclose(before.embed_query(QUERY), first_query_vector, atol=1e-5)


def _rebuilt_from(
    folder: Path, service_settings: Settings, second_model_path: Path, make_runtime: Any
) -> tuple[Service, Path, str, set[str]]:
    """A service searching with vectors, then a rebuild that loaded the second model from
    a copy in ``folder``: the service, that copy, the new model's identity, the records
    the query is about."""
    old = _started(make_runtime, service_settings)
    moved = _copy(second_model_path, folder)
    new = _started(make_runtime, service_settings.replace(model_path=moved))
    records = _records(6)
    _write(old, records)
    service = Service(old)
    assert service.semantic()
    assert rebuild_embeddings(new.tasks)["swapped"]
    return service, moved, new.embedder.identity, _billing(records)


@pytest.mark.redis
def test_a_file_that_is_not_the_stored_model_is_never_loaded(
    shared: Settings,
    onnx_model_path: Path,
    second_model_path: Path,
    make_runtime: Callable[[Settings], Runtime],
    tmp_path: Path,
) -> None:
    service, moved, new_id, _ = _rebuilt_from(tmp_path, shared, second_model_path, make_runtime)
    old = service.runtime
    _replace(moved, onnx_model_path)  # the recorded path now holds another model

    _until(service.switch_ended)
    switch = service.health()["embedder"]["switch"]
    assert switch.startswith(f"cannot load the stored model {new_id}")
    assert f"its hash is {old.embedder.identity}, not {new_id}" in switch
    assert old.embedder.model().path == onnx_model_path  # never loaded the other file
    assert service.semantic() == []
    assert service.health()["search"]["vector_leg_off"].startswith("the stored vectors are of")


@pytest.mark.redis
def test_a_missing_file_keeps_the_vector_leg_off_until_the_configured_file_holds_it(
    shared: Settings,
    onnx_model_path: Path,
    second_model_path: Path,
    make_runtime: Callable[[Settings], Runtime],
    tmp_path: Path,
) -> None:
    mine = _copy(onnx_model_path, tmp_path / "service")
    service, moved, new_id, billing = _rebuilt_from(
        tmp_path / "new", shared.replace(model_path=mine), second_model_path, make_runtime
    )
    old = service.runtime
    shutil.rmtree(moved.parent)  # the rebuild ran elsewhere: its file is not here

    _until(service.switch_ended)
    assert f"{moved} is missing" in service.health()["embedder"]["switch"]
    assert service.semantic() == [] and old.embedder.identity != new_id

    # An upgrade re-exports the configured file: it is the stored model now.
    _replace(mine, second_model_path)
    _until(lambda: service.switch_ended() and old.embedder.identity == new_id)
    assert old.embedder.model().path == mine
    assert billing & set(service.semantic())


def test_a_service_without_shared_epochs_switches_at_a_search(
    local: Settings,
    second_model_path: Path,
    make_runtime: Callable[[Settings], Runtime],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A local server (no Redis) learns of the swap only from the database, with no vector
    write of its own. On SQLite the swap re-stamps every vector, so the change stamp
    tells it at its next search; on Postgres (the swap renames columns) a search from its
    cache reads the stored model every ``MODEL_CHECK_S``, and meanwhile it searches the
    old vectors it holds (stale, never mixed). Either starts the switch."""
    # The first search after the rebuild must come before the next read of the stored
    # model, which a rebuild on a loaded machine can outlast: held off until then.
    shipped = legs.MODEL_CHECK_S
    monkeypatch.setattr(legs, "MODEL_CHECK_S", float("inf"))
    service, _, new_id, billing = _rebuilt_from(tmp_path, local, second_model_path, make_runtime)
    old = service.runtime
    old_id = old.embedder.identity
    if local.backend == "sqlite":
        assert service.semantic() == []  # the leg left out, the switch started
    else:
        assert service.semantic() and old.embedder.switch_state is None
    monkeypatch.setattr(legs, "MODEL_CHECK_S", shipped)

    def switched() -> bool:
        service.search()
        return old.embedder.identity == new_id

    _until(switched)
    _until(lambda: bool(billing & set(service.semantic())))  # the new model's, reloaded
    assert (new_id, QUERY) in service.leg._recent
    # Every search until then compared the old model's query vector with its vectors.
    assert {model for model, _ in service.leg._recent} == {old_id, new_id}

"""compose.yaml's model change, natively: the deployment's processes (gunicorn API, the
Celery workers, beat) on Postgres and Redis, started with one model; the new model put
in a directory they all see (the ``models`` volume), ``wakemark backfill --rebuild`` run
as another process with it; then the API searches with it and the embedding worker
writes its vectors, neither restarted."""

from __future__ import annotations

import shutil
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import quote

import numpy as np
import pytest

from tests.jobs.test_model_change import QUERY, TOPICS
from wakemark.shared.config import Settings
from wakemark.shared.embedding import Embedder, tokenizer_path
from wakemark.shared.embedding.onnx import file_identity
from wakemark.shared.models import MemoryRecord
from wakemark.shared.storage import open_storage

from .stack import Stack, wakemark_argv

pytestmark = [pytest.mark.slow, pytest.mark.postgres, pytest.mark.redis]

NS = "/actor/a/project/model-volume/"
WAIT_S = 120  # for the workers and the switch: never reached unless something is stuck


def _until(done: Callable[[], Any], what: str, stack: Stack) -> Any:
    end = time.monotonic() + WAIT_S
    while not (found := done()):
        stack.check_alive()
        assert time.monotonic() < end, f"stuck waiting for {what}\n{stack.logs()}"
        time.sleep(0.2)
    return found


def _remember(stack: Stack, title: str) -> str:
    record = {"namespace": NS, "title": title, "summary": title}
    status, body = stack.request("POST", "/v1/memories", record)
    assert status == 201, body
    return str(body["record_id"])


def _search(stack: Stack) -> dict[str, Any]:
    status, body = stack.request("GET", f"/v1/search?namespace={quote(NS)}&q={quote(QUERY)}")
    assert status == 200, body
    return dict(body)


def _embedder(stack: Stack) -> dict[str, Any]:
    return dict(stack.request("GET", "/health")[1]["embedder"])


def _model_after_a_search(stack: Stack) -> str | None:
    _search(stack)  # a search that finds the stored model is another starts the switch
    return _embedder(stack).get("model")


def _vector_hits(stack: Stack) -> list[dict[str, Any]]:
    return [h for h in _search(stack)["items"] if h["match_source"] in ("semantic", "hybrid")]


def test_every_process_adopts_the_model_a_rebuild_put_in_the_shared_volume(
    deployment: Stack,
    pg_url: str,
    onnx_model_path: Path,
    second_model_path: Path,
    tmp_path: Path,
) -> None:
    storage = open_storage(Settings(home=tmp_path / "reader", database_url=pg_url))
    try:
        vector_of = {}

        def embedded(ids: list[str]) -> bool:
            stored = storage.list_embeddings(NS)
            vector_of.update(zip(stored.record_ids, stored.vectors, strict=True))
            return set(ids) <= set(vector_of)

        ids = [_remember(deployment, f"{TOPICS[i % len(TOPICS)]} ({i})") for i in range(8)]
        _until(lambda: embedded(ids), "the worker's vectors of the old model", deployment)
        _until(lambda: not _search(deployment)["degraded"], "the API's model", deployment)
        old_id = _embedder(deployment)["model"]

        # compose's `models` volume: `model export --dest` (or a copy) puts the new model
        # there, and the rebuild loads it from there, so it records that path.
        volume = tmp_path / "models"
        volume.mkdir()
        new = volume / second_model_path.name
        shutil.copy(tokenizer_path(second_model_path), tokenizer_path(new))
        shutil.copy(second_model_path, new)
        new_id = file_identity(new)
        rebuild = subprocess.run(
            wakemark_argv("backfill", "--rebuild"),
            env={**deployment.env(), "WAKEMARK_MODEL_PATH": str(new)},
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert rebuild.returncode == 0, rebuild.stderr
        assert storage.embedding_models().path == str(new)

        # The API (gunicorn's worker) loads it from the volume at its next searches.
        _until(lambda: _model_after_a_search(deployment) == new_id, "the API's switch", deployment)
        assert old_id != new_id
        _until(lambda: _vector_hits(deployment), "the new model's vector hits", deployment)

        # The embedding worker: a record written now gets the new model's vector (its
        # first job finds the swap and starts the switch; the sweep enqueues it again).
        late = "Invoices were paid twice by one customer"
        late_id = _remember(deployment, late)
        _until(lambda: embedded([late_id]), "the worker's vector of the new model", deployment)
        text = MemoryRecord(namespace=NS, title=late, summary=late).embedding_text()
        written = vector_of[late_id]
        assert np.allclose(written, Embedder(new).embed([text])[0], atol=1e-4)
        assert not np.allclose(written, Embedder(onnx_model_path).embed([text])[0], atol=0.1)
    finally:
        storage.close()

"""Retrieval fixtures: runtimes over real backends, records written through storage."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from tests.pgbulk import chunks
from wakemark.shared.config import Settings
from wakemark.shared.models import MemoryRecord
from wakemark.shared.runtime import Runtime

NS = "/actor/alice/project/p1/"
OTHER = "/actor/alice/project/p2/"
STRANGER = "/actor/bob/project/p1/"
T0 = datetime(2024, 6, 1, 12, 0, tzinfo=UTC)


def make_record(namespace: str = NS, title: str = "note", i: int = 0, **over: Any) -> MemoryRecord:
    over.setdefault("created_at", T0 + timedelta(minutes=i))
    return MemoryRecord(namespace=namespace, title=title, **over)


def put(runtime: Runtime, records: list[MemoryRecord], embed: bool = False) -> None:
    """The records written through storage, a few hundred to a transaction (``pgbulk``)."""
    for batch in chunks(records):
        vectors = runtime.embedder.embed([r.embedding_text() for r in batch]) if embed else None
        with runtime.storage.transaction() as tx:
            for i, record in enumerate(batch):
                tx.put_memory_record(record)
                if vectors is not None:
                    tx.put_embedding(record.record_id, vectors[i])


@pytest.fixture
def onnx_settings(backend_settings: Settings, onnx_model_path: Path) -> Settings:
    return backend_settings.replace(embedder="onnx", model_path=onnx_model_path)


@pytest.fixture
def hybrid(onnx_settings: Settings) -> Iterator[Runtime]:
    """The real ONNX embedder, loaded before the test starts."""
    rt = Runtime.build(onnx_settings)
    rt.embedder.warm()
    yield rt
    rt.close()

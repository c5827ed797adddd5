"""Fixtures of the storage tests, and the rows the conformance files (``test_<concern>.py``,
one per port of ``wakemark.shared.storage.ports``) build."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np
import pytest

from wakemark.shared.config import Settings, prepare_home
from wakemark.shared.models import (
    Event,
    MemoryRecord,
    Retrieval,
    RetrievalCandidate,
    new_record_id,
    new_ulid,
)
from wakemark.shared.storage import Storage, migrate, open_storage
from wakemark.shared.storage.postgres import PostgresStorage, migrate_postgres


@pytest.fixture
def store(pg_url: str) -> Iterator[PostgresStorage]:
    """A migrated Postgres storage in a fresh schema."""
    migrate_postgres(pg_url)
    storage = PostgresStorage(pg_url)
    yield storage
    storage.close()


@pytest.fixture
def sql_store(pg_url: str) -> Iterator[PostgresStorage]:
    """As ``store``, its full-text searches answered by Postgres alone (no index held in
    the process)."""
    migrate_postgres(pg_url)
    storage = PostgresStorage(pg_url, lexicon=False)
    yield storage
    storage.close()


@pytest.fixture
def sqlite_store(settings: Settings) -> Iterator[Storage]:
    """A migrated SQLite storage in the test's home."""
    prepare_home(settings)
    migrate(settings)
    storage = open_storage(settings)
    yield storage
    storage.close()


NS = "/actor/a/project/a/"


T0 = datetime(2024, 5, 1, 12, 0, tzinfo=UTC)


def event(kind: str = "prompt", text: str = "hello", session: str = "s1", ns: str = NS,
          at: datetime | None = None, **extra: Any) -> Event:  # fmt: skip
    return Event(
        event_id=new_ulid(),
        session_id=session,
        actor_id=ns.split("/")[2],
        namespace=ns,
        kind=kind,
        body={"type": "text", "content": text},
        valid_time=at or datetime.now(UTC),
        source={"surface": "test", "project_path": extra.pop("project_path", None)},
        **extra,
    )


def record(title: str = "a memory", ns: str = NS, minutes: int = 0, **extra: Any) -> MemoryRecord:
    return MemoryRecord(
        namespace=ns, title=title, created_at=T0 + timedelta(minutes=minutes), **extra
    )


def vec(seed: int) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(384).astype(np.float32)


def retrieval(prompt: Event, minutes: int = 0, **extra: Any) -> Retrieval:
    candidates = [
        RetrievalCandidate(
            record_id=new_record_id(), rank=0, match_source="hybrid", score=0.03,
            relevance=0.8, evidence={"coverage": 1.0, "cosine": 0.6}, injected=True,
        ),
        RetrievalCandidate(
            record_id=new_record_id(), rank=1, match_source="fts", score=0.01,
            relevance=0.1,
        ),
    ]  # fmt: skip
    values: dict[str, Any] = {
        "event_id": prompt.event_id,
        "namespace": prompt.namespace,
        "session_id": prompt.session_id,
        "created_at": T0 + timedelta(minutes=minutes),
        "decision": "inject",
        "reason": "1 of 2 hits at or above 0.5",
        "mode": "hybrid",
        "min_relevance": 0.5,
        "latency_ms": 4.2,
        "bytes": 321,
        "injected": [candidates[0].record_id],
        "candidates": candidates,
    }
    return Retrieval(**{**values, **extra})

"""Vectors, the storage contract: each test runs on each backend (``storage``)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given
from hypothesis import settings as hsettings
from hypothesis import strategies as st

from tests.storage.conftest import NS, record, vec
from wakemark.shared.models import new_record_id
from wakemark.shared.storage import NotFoundError, Storage


def test_put_embedding_unknown_record(storage: Storage) -> None:
    with pytest.raises(NotFoundError):
        storage.put_embedding(new_record_id(), vec(0))


def test_embeddings_list_missing_and_clear(storage: Storage) -> None:
    recs = [record(f"r{i}", minutes=i) for i in range(3)]
    other = record("other", ns="/actor/b/project/b/", minutes=9)
    for r in [*recs, other]:
        storage.put_memory_record(r)
    assert [r.record_id for r in storage.records_missing_embedding(10)] == [
        *(r.record_id for r in recs),
        other.record_id,
    ]
    assert [r.record_id for r in storage.records_missing_embedding(1)] == [recs[0].record_id]
    storage.put_embedding(recs[1].record_id, vec(1))
    storage.put_embedding(other.record_id, vec(2))
    assert storage.has_embedding(recs[1].record_id)

    rows = storage.list_embeddings(NS)
    assert rows.record_ids == [recs[1].record_id] and rows.total == 1
    assert rows.vectors.dtype == np.float32 and rows.vectors.shape == (1, 384)
    assert rows.vectors.flags.c_contiguous and rows.vectors.flags.writeable
    assert np.array_equal(rows.vectors[0], vec(1))
    assert rows.created_at.tolist() == [recs[1].created_at.timestamp()]
    assert rows.observation_types == ["note"]
    missing = storage.records_missing_embedding(10, namespace=NS)
    assert [r.record_id for r in missing] == [recs[0].record_id, recs[2].record_id]

    assert storage.stats()["pending_embedding"] == 2
    storage.edit_memory_record(recs[1].record_id, title="edited")  # its vector is stale
    assert len(storage.list_embeddings(NS)) == 0 and storage.embedded_ids(NS) == []
    assert storage.has_embedding(other.record_id)
    assert storage.stats()["pending_embedding"] == 3


@hsettings(
    max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(raw=st.binary(min_size=1536, max_size=1536))
def test_sqlite_embedding_bits_round_trip(sqlite_store: Any, raw: bytes) -> None:
    if sqlite_store.get_memory_record(BITS.record_id) is None:
        sqlite_store.put_memory_record(BITS)
    sqlite_store.put_embedding(BITS.record_id, np.frombuffer(raw, dtype="<f4"))
    [vector] = sqlite_store.list_embeddings(NS).vectors
    assert vector.tobytes() == raw  # NaN payloads and signed zeros included


BITS = record("bits")


def test_sqlite_bad_embedding_names_the_record(sqlite_store: Any) -> None:
    import sqlite3

    from wakemark.shared.storage import EmbeddingDecodeError

    rec = record("short vector")
    sqlite_store.put_memory_record(rec)
    with pytest.raises(ValueError):
        sqlite_store.put_embedding(rec.record_id, np.zeros(383, dtype=np.float32))
    conn = sqlite3.connect(sqlite_store.path)
    with conn:
        conn.execute(
            "UPDATE memory_records SET embedding = ? WHERE record_id = ?",
            (b"\0" * 1532, rec.record_id),
        )
    conn.close()
    with pytest.raises(EmbeddingDecodeError, match=rec.record_id):
        sqlite_store.list_embeddings(NS)

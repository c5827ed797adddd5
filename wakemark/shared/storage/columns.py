"""Build an ``EmbeddingMatrix`` from fetched row batches, one array copy per batch."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

import numpy as np

from wakemark.shared.models import EMBEDDING_DIM
from wakemark.shared.storage.errors import EmbeddingDecodeError, StorageError
from wakemark.shared.storage.ports.vectors import EmbeddingMatrix

BATCH_ROWS = 2048  # rows fetched per round trip: bounds the transient bytes objects

# decode(blobs, record_ids) -> (k, 384) array of any float dtype (a view is fine)
Decoder = Callable[[list[bytes], list[str]], np.ndarray]


def check_sizes(blobs: Sequence[bytes], record_ids: Sequence[str], size: int) -> None:
    for record_id, blob in zip(record_ids, blobs, strict=True):
        if len(blob) != size:
            raise EmbeddingDecodeError(
                f"embedding of {record_id} has {len(blob)} bytes, expected {size}"
            )


def collect(
    batches: Iterable[Sequence[Sequence[Any]]],
    count: int,
    decode: Decoder,
    timestamp: Callable[[Any], float],
    total: int,
    watermark: int,
    model: str | None,
) -> EmbeddingMatrix:
    """Rows ``(record_id, created_at, observation_type, blob)`` in ``count`` or fewer.

    The vectors go straight into one preallocated array: per batch, the blobs are
    joined and decoded as a whole, so no numpy object exists per row.
    """
    vectors = np.empty((count, EMBEDDING_DIM), dtype=np.float32)
    created = np.empty(count, dtype=np.float64)
    ids: list[str] = []
    types: list[str] = []
    n = 0
    for batch in batches:
        k = len(batch)
        if n + k > count:
            raise StorageError("embedding rows changed inside one read snapshot")
        batch_ids = [r[0] for r in batch]
        vectors[n : n + k] = decode([r[3] for r in batch], batch_ids)
        created[n : n + k] = [timestamp(r[1]) for r in batch]
        ids.extend(batch_ids)
        types.extend(r[2] for r in batch)
        n += k
    if n < count:  # never expected in one snapshot; keep the arrays exact anyway
        vectors, created = vectors[:n].copy(), created[:n].copy()
    return EmbeddingMatrix(ids, created, types, vectors, total, watermark, model)


def fetch_batches(cursor: Any) -> Iterable[Sequence[Any]]:
    while batch := cursor.fetchmany(BATCH_ROWS):
        yield batch


def project_sizes(events: Iterable[Any], records: Iterable[Any]) -> list[dict[str, Any]]:
    """Rows of (namespace, count, bytes) for events and records → one dict per namespace,
    largest first."""
    out: dict[str, dict[str, Any]] = {}
    for kind, rows in (("event", events), ("record", records)):
        for namespace, n, size in rows:
            row = out.setdefault(
                namespace,
                {"namespace": namespace, "events": 0, "event_bytes": 0, "records": 0,
                 "record_bytes": 0},
            )  # fmt: skip
            row[f"{kind}s"], row[f"{kind}_bytes"] = int(n), int(size or 0)
    return sorted(out.values(), key=lambda r: -(r["event_bytes"] + r["record_bytes"]))

"""Conversions between model objects and Postgres rows (column order of the concern files' SQL)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import numpy as np

from wakemark.shared.models import (
    EMBEDDING_DIM,
    Event,
    MemoryRecord,
    Source,
    StoredEvent,
    body_from_json,
)
from wakemark.shared.storage.columns import check_sizes
from wakemark.shared.storage.fields import event_fields


def event_params(event: Event, transaction_time: datetime) -> dict[str, Any]:
    return {
        **event_fields(event),
        "body": event.body_json(),
        "valid_time": event.valid_time,
        "source_surface": event.source.surface,
        "source_version": event.source.version,
        "project_path": event.source.project_path,
        "schema_version": event.schema_version,
        "transaction_time": transaction_time,
    }


def stored_event(row: tuple[Any, ...]) -> StoredEvent:
    (event_id, parent, session_id, actor_id, namespace, kind, body, valid_time,
     surface, version, project_path, schema_version, transaction_time, turn_id) = row  # fmt: skip
    return StoredEvent(
        event_id=event_id,
        parent_event_id=parent,
        session_id=session_id,
        actor_id=actor_id,
        namespace=namespace,
        kind=kind,
        body=body_from_json(body),
        valid_time=valid_time,
        source=Source(surface=surface, version=version, project_path=project_path),
        schema_version=schema_version,
        transaction_time=transaction_time,
        turn_id=turn_id,
    )


def memory_record(row: tuple[Any, ...]) -> MemoryRecord:
    (record_id, namespace, title, summary, facts, concepts, files_touched, observation_type,
     source_event_ids, strategy, quality, pinned, created_at, edited_at) = row  # fmt: skip
    return MemoryRecord.stored(
        record_id=record_id,
        namespace=namespace,
        title=title,
        summary=summary,
        facts=facts,
        concepts=concepts,
        files_touched=files_touched,
        observation_type=observation_type,
        source_event_ids=source_event_ids,
        strategy=strategy,
        quality=quality,
        pinned=pinned,
        created_at=created_at,
        edited_at=edited_at,
    )


def check_vector(vector: np.ndarray) -> np.ndarray:
    """A float32 (384,) copy of ``vector``; ValueError names what is wrong."""
    arr = np.asarray(vector, dtype=np.float32)
    if arr.shape != (EMBEDDING_DIM,):
        raise ValueError(f"embedding must have shape ({EMBEDDING_DIM},), got {arr.shape}")
    if not np.isfinite(arr).all():
        raise ValueError("embedding contains NaN or infinity")
    return arr


def decode_vectors(raw: list[bytes], record_ids: list[str]) -> np.ndarray:
    """pgvector's binary form (u16 dim, u16 unused, big-endian float32s) → (n, 384) view."""
    check_sizes(raw, record_ids, 4 + 4 * EMBEDDING_DIM)
    flat = np.frombuffer(b"".join(raw), dtype=">f4").reshape(len(raw), EMBEDDING_DIM + 1)
    return flat[:, 1:]

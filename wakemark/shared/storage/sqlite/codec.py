"""Conversions between Python values and SQLite columns (times, JSON lists, vectors)."""

from __future__ import annotations

import json
import sqlite3
from datetime import UTC, datetime
from typing import Any

import numpy as np

from wakemark.shared.models import EMBEDDING_DIM, MemoryRecord, StoredEvent, body_from_json
from wakemark.shared.storage.columns import check_sizes
from wakemark.shared.storage.fields import event_fields, record_fields
from wakemark.shared.storage.ports.upkeep import TurnRow

EMBEDDING_BYTES = EMBEDDING_DIM * 4
_F32_LE = np.dtype("<f4")


def ts(value: datetime) -> str:
    """UTC with fixed-width microseconds, so text order is time order."""
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    return value.astimezone(UTC).isoformat(timespec="microseconds")


def from_ts(text: str) -> datetime:
    return datetime.fromisoformat(text)


def encode_embedding(vector: np.ndarray) -> bytes:
    # astype keeps float32 bits as they are (NaN payloads included); wider inputs round.
    array = np.asarray(vector).astype(_F32_LE, copy=False).reshape(-1)
    if array.shape != (EMBEDDING_DIM,):
        raise ValueError(f"embedding must have {EMBEDDING_DIM} values, got {array.size}")
    return array.tobytes()


def decode_embeddings(blobs: list[bytes], record_ids: list[str]) -> np.ndarray:
    """(k, 384) little-endian float32 view of the joined blobs (sizes checked first)."""
    check_sizes(blobs, record_ids, EMBEDDING_BYTES)
    return np.frombuffer(b"".join(blobs), dtype=_F32_LE).reshape(-1, EMBEDDING_DIM)


def seconds(text: str) -> float:
    return datetime.fromisoformat(text).timestamp()


def record_params(record: MemoryRecord) -> dict[str, Any]:
    return {
        **record_fields(record),
        "facts": _json(record.facts),
        "facts_text": "\n".join(record.facts),
        "concepts": _json(record.concepts),
        "files_touched": _json(record.files_touched),
        "source_event_ids": _json(record.source_event_ids),
        "pinned": int(record.pinned),
        "created_at": ts(record.created_at),
    }


def to_record(row: sqlite3.Row) -> MemoryRecord:
    return MemoryRecord.stored(
        record_id=row["record_id"],
        namespace=row["namespace"],
        title=row["title"],
        summary=row["summary"],
        facts=json.loads(row["facts"]),
        concepts=json.loads(row["concepts"]),
        files_touched=json.loads(row["files_touched"]),
        observation_type=row["observation_type"],
        source_event_ids=json.loads(row["source_event_ids"]),
        strategy=row["strategy"],
        quality=row["quality"],
        pinned=bool(row["pinned"]),
        created_at=from_ts(row["created_at"]),
        edited_at=from_ts(row["edited_at"]) if row["edited_at"] else None,
    )


def event_params(event: Any, now: str) -> dict[str, Any]:
    """The columns of an event recorded at ``now`` (``ts`` text), all but its turn."""
    return {
        **event_fields(event),
        "body": event.body_json(),
        "valid_time": ts(event.valid_time),
        "source": event.source.model_dump_json(),
        "schema_version": event.schema_version,
        "transaction_time": now,
    }


def to_event(row: sqlite3.Row) -> StoredEvent:
    return StoredEvent.model_validate(
        {
            "event_id": row["event_id"],
            "parent_event_id": row["parent_event_id"],
            "session_id": row["session_id"],
            "actor_id": row["actor_id"],
            "namespace": row["namespace"],
            "kind": row["kind"],
            "body": body_from_json(row["body"]),
            "valid_time": from_ts(row["valid_time"]),
            "source": json.loads(row["source"]),
            "schema_version": row["schema_version"],
            "transaction_time": from_ts(row["transaction_time"]),
            "turn_id": row["turn_id"],
        }
    )


def _json(values: list[str]) -> str:
    return json.dumps(values, ensure_ascii=False)


def turn_row_params(turn: TurnRow) -> dict[str, Any]:
    return {
        "turn_id": turn.turn_id,
        "namespace": turn.namespace,
        "session_id": turn.session_id,
        "opened_at": ts(turn.opened_at),
        "last_event_at": ts(turn.last_event_at),
        "closed_at": ts(turn.closed_at) if turn.closed_at else None,
        "extracted_at": ts(turn.extracted_at) if turn.extracted_at else None,
        "record_ids": _json(turn.record_ids),
        "skip_reason": turn.skip_reason,
        "repeat_of": turn.repeat_of,
    }


def to_turn_row(row: sqlite3.Row) -> TurnRow:
    return TurnRow(
        turn_id=row["turn_id"],
        namespace=row["namespace"],
        session_id=row["session_id"],
        opened_at=from_ts(row["opened_at"]),
        last_event_at=from_ts(row["last_event_at"]),
        closed_at=from_ts(row["closed_at"]) if row["closed_at"] else None,
        extracted_at=from_ts(row["extracted_at"]) if row["extracted_at"] else None,
        record_ids=json.loads(row["record_ids"]),
        skip_reason=row["skip_reason"],
        repeat_of=row["repeat_of"],
    )

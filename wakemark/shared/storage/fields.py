"""The columns of records and events that both backends and the export hold as they are;
each adds its own form of the rest (times, JSON, vectors)."""

from __future__ import annotations

from typing import Any

from wakemark.shared.models import Event, MemoryRecord


def record_fields(record: MemoryRecord) -> dict[str, Any]:
    """Every field but ``edited_at`` (a record is written unedited), in field order."""
    return {
        "record_id": record.record_id,
        "namespace": record.namespace,
        "title": record.title,
        "summary": record.summary,
        "facts": list(record.facts),
        "concepts": list(record.concepts),
        "files_touched": list(record.files_touched),
        "observation_type": record.observation_type,
        "source_event_ids": list(record.source_event_ids),
        "strategy": record.strategy,
        "quality": record.quality,
        "pinned": bool(record.pinned),
        "created_at": record.created_at,
    }


_EVENT_FIELDS = ("event_id", "parent_event_id", "session_id", "actor_id", "namespace", "kind")


def event_fields(event: Event) -> dict[str, Any]:
    """The ids, namespace and kind of an event, in field order."""
    return {name: getattr(event, name) for name in _EVENT_FIELDS}

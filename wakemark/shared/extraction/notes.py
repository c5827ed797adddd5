"""A ``note`` event is an explicit memory: it becomes one record as written."""

from __future__ import annotations

from datetime import UTC

from wakemark.shared.extraction.classify import concepts
from wakemark.shared.extraction.text import body_text, first_sentence, trim_to_sentence
from wakemark.shared.models import Event, MemoryRecord

MAX_SUMMARY = 4000


def record_from_note(event: Event) -> MemoryRecord:
    """Title from the note's first line/sentence (or a json ``title``), summary the text."""
    text = body_text(event.body).strip()
    data = getattr(event.body, "data", None)
    given = data.get("title") if isinstance(data, dict) else None
    title = first_sentence(given, 200) if isinstance(given, str) else ""
    title = title or first_sentence(text, 200) or "note"
    return MemoryRecord(
        namespace=event.namespace,
        title=title,
        summary=trim_to_sentence(text, MAX_SUMMARY),
        concepts=concepts(text, "", (), (), ()),
        observation_type="note",
        source_event_ids=[event.event_id],
        strategy="deterministic",
        created_at=event.valid_time.astimezone(UTC),
    )

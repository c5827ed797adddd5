"""Notes become records as written; near-identical records collapse (batch and merge)."""

from __future__ import annotations

import numpy as np
import pytest

from wakemark.shared.config import Settings
from wakemark.shared.extraction import dedupe, extract, record_from_note
from wakemark.shared.models import Event, MemoryRecord, new_ulid

from .turns import NAMESPACE, data, event, make_turn, text

OTHER_NS = "/actor/dev/project/other/"


def _note(body: dict) -> Event:
    return Event.model_validate(event("note", body))


def test_note_record() -> None:
    ev = _note(text("Deploys need `make migrate` first.\nThe compose migrate service does it."))
    record = record_from_note(ev)
    assert record.title == "Deploys need `make migrate` first."
    assert record.summary == (
        "Deploys need `make migrate` first.\nThe compose migrate service does it."
    )
    assert record.observation_type == "note"
    assert record.strategy == "deterministic"
    assert record.source_event_ids == [ev.event_id]
    assert record.namespace == ev.namespace and record.created_at == ev.valid_time


def test_note_shapes_and_extract_routes_notes(settings: Settings) -> None:
    titled = record_from_note(_note(data({"title": "Release day", "text": "Fridays, 10:00."})))
    assert (titled.title, titled.summary) == ("Release day", "Fridays, 10:00.")
    message = {"type": "message", "turns": [{"role": "user", "content": "Use uv, not pip."}]}
    assert record_from_note(_note(message)).title == "Use uv, not pip."
    assert record_from_note(_note(text("   "))).title == "note"
    [record] = extract(make_turn(("note", text("Port 37800 is ours."))), settings)
    assert record.observation_type == "note" and record.title == "Port 37800 is ours."


def _record(title: str, ns: str = NAMESPACE, **kw: object) -> MemoryRecord:
    return MemoryRecord(
        namespace=ns,
        title=title,
        source_event_ids=[new_ulid()],
        **kw,  # type: ignore[arg-type]
    )


def _vec(*head: float) -> np.ndarray:
    v = np.zeros(384, dtype=np.float32)
    v[: len(head)] = head
    return v


def test_dedupe_collapses_near_identical_in_one_batch() -> None:
    a = _record("a", facts=["f1", "f2"], files_touched=["x.py"], concepts=["Cart"])
    b = _record("b", facts=["f2", "f3"], files_touched=["y.py", "x.py"], concepts=["cart2"])
    c = _record("c")
    d = _record("d", ns=OTHER_NS)
    va, vb, vc = _vec(1, 0.1), _vec(1, 0.2), _vec(0, 1)  # cos(a, b) ≈ 0.995
    kept, vectors = dedupe([a, b, c, d], [va, vb, vc, vb])
    assert [r.title for r in kept] == ["a", "c", "d"]  # d: same vector, other namespace
    merged = kept[0]
    assert merged.strategy == "merged" and merged.record_id == a.record_id
    assert merged.source_event_ids == a.source_event_ids + b.source_event_ids
    assert merged.facts == ["f1", "f2", "f3"]
    assert merged.files_touched == ["x.py", "y.py"]
    assert merged.concepts == ["Cart", "cart2"]
    assert kept[1] is c and kept[1].strategy == "deterministic"
    assert np.array_equal(vectors[0], va) and np.array_equal(vectors[1], vc)
    assert len(vectors) == 3


def test_dedupe_keeps_distinct_records_and_checks_lengths() -> None:
    a, b = _record("a"), _record("b")
    kept, vectors = dedupe([a, b], [_vec(1, 0), _vec(1, 0.4)])  # cos ≈ 0.93 < 0.95
    assert kept == [a, b] and len(vectors) == 2
    assert dedupe([], []) == ([], [])
    with pytest.raises(ValueError):
        dedupe([a], [])

"""What the transcript importers' tests share: a replay stored twice, extracted once."""

from __future__ import annotations

from collections.abc import Callable

from wakemark.shared.jobs import tasks
from wakemark.shared.models import Event, MemoryRecord
from wakemark.shared.runtime import Runtime


def extract_replayed(
    runtime: Runtime, replay: Callable[[], list[Event]]
) -> tuple[list[Event], MemoryRecord]:
    """Store ``replay()`` twice (the second time stores nothing: the ids are deterministic),
    extract the one turn it closes; the events and the record written."""
    storage = runtime.storage
    evs = replay()
    assert all(r.stored for r in storage.put_events(evs))
    assert not any(r.stored for r in storage.put_events(replay()))
    pending = storage.pending_turns()
    assert len(pending) == 1  # the answer closed the turn
    written = tasks.extract_turns(runtime, pending)
    assert len(written) == 1
    rec = storage.get_memory_record(written[0])
    assert rec is not None and rec.namespace == evs[0].namespace
    return evs, rec

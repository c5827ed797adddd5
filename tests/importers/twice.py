"""Imports done twice, as the importers' tests check them: the second stores nothing."""

from __future__ import annotations

from collections.abc import Callable

from tests.test_cli_transfer import _wakemark
from wakemark.shared.jobs import tasks
from wakemark.shared.models import Event, MemoryRecord
from wakemark.shared.runtime import Runtime


def store_twice_extract_once(
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


def import_twice(env: dict[str, str], *args: str, first: bytes, again: bytes) -> None:
    """``wakemark import --from *args`` twice: the first reports ``first``, the second
    (the same ids) ``again``."""
    done = _wakemark("import", "--from", *args, env=env)
    assert done.returncode == 0, done.stderr
    assert first in done.stderr, done.stderr
    repeated = _wakemark("import", "--from", *args, env=env)
    assert again in repeated.stderr

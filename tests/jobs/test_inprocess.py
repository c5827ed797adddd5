"""The embedded-mode executor: real threads, real SQLite (and Postgres), real model."""

from __future__ import annotations

import os
from typing import Any

import pytest

from wakemark.shared.config import Settings
from wakemark.shared.jobs import EXTRACT, inprocess, open_dispatcher, tasks
from wakemark.shared.jobs.inprocess import InProcessDispatcher

from .conftest import NS, assert_extracted_once, caught_up, ingest, wait_until


def test_open_dispatcher_picks_inprocess_without_redis(settings: Settings, make_runtime):
    runtime = make_runtime(settings)
    assert isinstance(runtime.jobs, InProcessDispatcher)
    assert runtime.jobs.mode == "inprocess" and runtime.jobs.queue_depth() == 0


def test_threads_start_lazily_not_at_construction(settings: Settings, make_runtime):
    runtime = make_runtime(settings)
    dispatcher = open_dispatcher(runtime.tasks)
    try:
        assert dispatcher._threads == []  # type: ignore[attr-defined]
        dispatcher.start()
        assert len(dispatcher._threads) == 2  # type: ignore[attr-defined]
    finally:
        dispatcher.close()
    assert not any(t.is_alive() for t in dispatcher._threads)  # type: ignore[attr-defined]
    dispatcher.enqueue(EXTRACT, ["after-close"])  # ignored, never raises
    assert dispatcher.queue_depth() == 0


def test_enqueued_turns_are_extracted(backend_settings: Settings, make_runtime):
    runtime = make_runtime(backend_settings)
    turns = ingest(runtime, 10)
    assert runtime.jobs.wait_idle(timeout=60)
    assert_extracted_once(runtime, turns)


def test_a_failing_turn_does_not_hold_back_its_batch(
    backend_settings: Settings, make_runtime, monkeypatch: pytest.MonkeyPatch
):
    runtime = make_runtime(backend_settings)
    turns = ingest(runtime, 8, enqueue=False)
    bad = turns[3]
    real = tasks._candidates

    def fails_on_bad(turn: Any, rt: Any) -> Any:
        if turn.turn_id == bad:
            raise RuntimeError("extraction blew up")
        return real(turn, rt)

    monkeypatch.setattr(tasks, "_candidates", fails_on_bad)
    runtime.jobs.enqueue(EXTRACT, turns)
    assert runtime.jobs.wait_idle(timeout=60)
    pending = [t for t in turns if not runtime.storage.get_turn(t).extracted]
    assert pending == [bad]
    assert runtime.storage.list_memory_records(NS).total == 7


def test_queued_ids_are_deduplicated(settings: Settings, make_runtime):
    runtime = make_runtime(settings)
    jobs = runtime.jobs
    jobs.start()
    # Holding the executor's lock keeps its threads from taking work meanwhile.
    with jobs._cond:  # type: ignore[attr-defined]
        jobs.enqueue(EXTRACT, ["t1", "t2", "t1"])
        jobs.enqueue(EXTRACT, ["t2"])
        assert jobs.queue_depth() == 2


def test_jobs_wait_while_requests_are_in_flight(
    settings: Settings, make_runtime, monkeypatch: pytest.MonkeyPatch
):
    # A job beside requests takes the GIL and the write lock from them (bench/ingest).
    monkeypatch.setattr(inprocess, "MAX_DEFER_S", 600.0)
    runtime = make_runtime(settings)
    jobs = runtime.jobs
    with jobs.serving():
        turns = ingest(runtime, 3)
        assert not jobs.wait_idle(timeout=0.3)  # queued, not started
        assert not any(runtime.storage.get_turn(t).extracted for t in turns)
    assert jobs.wait_idle(timeout=60)  # the pause came: all done
    assert_extracted_once(runtime, turns)


def test_jobs_start_anyway_once_they_waited_too_long(
    settings: Settings, make_runtime, monkeypatch: pytest.MonkeyPatch
):
    monkeypatch.setattr(inprocess, "MAX_DEFER_S", 0.2)
    runtime = make_runtime(settings)
    with runtime.jobs.serving():  # requests that never pause
        turns = ingest(runtime, 3)
        assert runtime.jobs.wait_idle(timeout=60)
    assert_extracted_once(runtime, turns)


def test_a_restarted_process_catches_up_at_start(backend_settings: Settings, make_runtime):
    first = make_runtime(backend_settings)
    turns = ingest(first, 6, enqueue=False)  # committed, then the process "died"
    first.close()
    second = make_runtime(backend_settings)
    second.jobs.start()  # the start-up sweep finds the pending turns
    wait_until(lambda: caught_up(second), what="start-up sweep to extract pending turns")
    assert_extracted_once(second, turns)


@pytest.mark.slow
def test_extraction_and_embedding_complete_with_the_real_model(
    model_settings: Settings, make_runtime
):
    runtime = make_runtime(model_settings)
    turns = ingest(runtime, 20)
    wait_until(lambda: caught_up(runtime), what="pipeline to catch up")
    assert_extracted_once(runtime, turns)
    assert runtime.storage.stats()["embedded"] == 20


def test_a_forked_child_gets_a_fresh_executor(settings: Settings, make_runtime):
    runtime = make_runtime(settings)
    jobs = runtime.jobs
    jobs.start()
    with jobs._cond:  # type: ignore[attr-defined]
        jobs.enqueue(EXTRACT, ["queued-in-parent"])
    pid = os.fork()
    if pid == 0:  # child: no inherited threads, queue or (possibly held) lock
        runtime.after_fork()  # what gunicorn's post_fork and Celery's process init call
        ok = jobs._threads == [] and jobs.queue_depth() == 0  # type: ignore[attr-defined]
        os._exit(0 if ok else 1)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0

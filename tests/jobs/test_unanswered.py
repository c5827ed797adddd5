"""Turns closed without an answer, on each backend: skipped ``unanswered`` on their own,
taken in by the answered turn that continues them, whichever order they are extracted in."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from wakemark.shared.config import Settings
from wakemark.shared.jobs import extract_turns
from wakemark.shared.models import Event, new_ulid
from wakemark.shared.runtime import Runtime

from .conftest import NS

T0 = datetime.now(UTC) - timedelta(hours=2)
ASKED = "Why does the invoice PDF crash for customers without a billing address?"
ANSWER = (
    "The crash comes from format_address, which falls back to the shipping address and "
    "fails when that is missing too. It now returns an empty block instead."
)


def _event(kind: str, body: dict, session: str, at: float) -> Event:
    return Event(
        event_id=new_ulid(),
        session_id=session,
        actor_id="a",
        namespace=NS,
        kind=kind,
        body=body,
        valid_time=T0 + timedelta(seconds=at),
        source={"surface": "test", "project_path": "/home/dev/shop"},
    )


def _text(content: str) -> dict:
    return {"type": "text", "content": content}


def _put(runtime: Runtime, *events: Event) -> list[str]:
    """Store the events; the ids of the turns they closed."""
    results = runtime.storage.put_events(list(events))
    return [t for r in results for t in r.closed_turns]


def _reasons(runtime: Runtime, session: str) -> list[str | None]:
    return [t.skip_reason for t in runtime.storage.session_turns(NS, session)]


def _records(runtime: Runtime):
    return runtime.storage.list_memory_records(NS, limit=100).items


def test_a_turn_closed_by_the_next_prompt_is_skipped_unanswered(
    backend_settings: Settings, make_runtime
):
    runtime = make_runtime(backend_settings)
    closed = _put(
        runtime,
        _event("prompt", _text(ASKED), "s", 0),
        _event("prompt", _text("what's the weather in Paris"), "s", 7200),
    )
    assert extract_turns(runtime.tasks, closed) == []
    assert _reasons(runtime, "s") == ["unanswered", None]  # the second is still open
    [first, second] = [t.turn_id for t in runtime.storage.session_turns(NS, "s")]
    assert runtime.storage.turns_before(second, 5) == [first]
    assert runtime.storage.turns_before(first, 5) == []
    assert runtime.storage.turns_before("no-such-turn", 5) == []
    assert runtime.storage.skipped_turns() == {"unanswered": 1}
    assert _records(runtime) == []


# goodsch/brain_explore: the agent's work after the context ran out (the compaction
# summary its prompt), stopped by the user before an answer, its commands saying nothing.
RESUMED = "This session is being continued from a previous conversation that ran out of context."
EXTRACT = {
    "tool_name": "Bash",
    "tool_input": {"command": "python scripts/extract_entities.py --file act.pdf"},
    "tool_response": "Processing: act.pdf\n  Extracted: 372 sections",
    "exit_code": 0,
}


@pytest.mark.parametrize(
    ("prompt", "tools"),
    [
        (ASKED, []),  # the session ended on the question
        (
            ASKED,
            [{"tool_name": "Bash", "tool_input": {"command": "echo marker-42"}, "exit_code": 0}],
        ),
        (ASKED, [{"tool_name": "Read", "tool_input": {"file_path": "/home/dev/shop/invoice.py"}}]),
        (
            ASKED,
            [
                {
                    "tool_name": "Edit",
                    "tool_input": {"file_path": "/tmp/scratch.py", "new_string": "x"},
                }
            ],
        ),
        (RESUMED, [EXTRACT]),
    ],
    ids=["prompt-only", "probe", "read-only", "edit-outside-project", "resumed-interrupted"],
)
def test_a_turn_closed_by_idle_without_answer_or_outcome_is_skipped(
    backend_settings: Settings, make_runtime, prompt: str, tools: list[dict]
):
    runtime = make_runtime(backend_settings)
    uses = [
        _event("tool_use", {"type": "json", "data": t}, "s", 1 + i) for i, t in enumerate(tools)
    ]
    assert _put(runtime, _event("prompt", _text(prompt), "s", 0), *uses) == []
    closed = runtime.storage.close_idle_turns(datetime.now(UTC) + timedelta(seconds=1))
    assert len(closed) == 1
    assert extract_turns(runtime.tasks, closed) == []
    assert _reasons(runtime, "s") == ["unanswered"]


def test_a_turn_whose_outcome_says_something_is_kept_without_answer(
    backend_settings: Settings, make_runtime
):
    runtime = make_runtime(backend_settings)
    pytest_run = {
        "tool_name": "Bash",
        "tool_input": {"command": "pytest -q tests/test_invoice.py"},
        "tool_response": {
            "stdout": "FAILED tests/test_invoice.py::test_pdf\n1 failed, 4 passed in 0.31s"
        },
        "exit_code": 1,
    }
    _put(
        runtime,
        _event("prompt", _text("run the invoice tests"), "s", 0),
        _event("tool_use", {"type": "json", "data": pytest_run}, "s", 1),
    )
    closed = runtime.storage.close_idle_turns(datetime.now(UTC) + timedelta(seconds=1))
    [record_id] = extract_turns(runtime.tasks, closed)
    [record] = _records(runtime)
    assert "1 failed, 4 passed" in record.summary and record.observation_type != "bugfix"


def _retry_session(runtime: Runtime, second_prompt: str, gap_s: float) -> tuple[list[str], str]:
    """An unanswered question, then ``second_prompt`` ``gap_s`` later, answered."""
    first = _event("prompt", _text(ASKED), "s", 0)
    closed = _put(
        runtime,
        first,
        _event("prompt", _text(second_prompt), "s", gap_s),
        _event("session_summary", _text(ANSWER), "s", gap_s + 30),
    )
    return closed, first.event_id


@pytest.mark.parametrize("order", ["together", "answer-first", "question-first"])
def test_a_retry_takes_the_unanswered_question_in(
    backend_settings: Settings, make_runtime, order: str
):
    runtime = make_runtime(backend_settings.replace(turn_idle_s=60))
    closed, asked_id = _retry_session(runtime, "try again", gap_s=3600)  # long after: a retry
    batches = {"together": [closed], "answer-first": [closed[::-1][:1], closed[:1]]}
    for batch in batches.get(order, [[c] for c in closed]):
        extract_turns(runtime.tasks, batch)
    [record] = _records(runtime)
    assert record.title.startswith("The crash comes from format_address")  # not the question
    assert f"earlier request: {ASKED}" in record.facts
    assert asked_id in record.source_event_ids
    assert "format_address" in record.concepts
    assert _reasons(runtime, "s") == ["unanswered", None]


def test_a_new_request_within_the_idle_window_continues_the_unanswered_one(
    backend_settings: Settings, make_runtime
):
    runtime = make_runtime(backend_settings.replace(turn_idle_s=600))
    closed, asked_id = _retry_session(runtime, "the PDF export crashes for them", gap_s=40)
    extract_turns(runtime.tasks, closed)
    [record] = _records(runtime)
    assert record.title == "the PDF export crashes for them"
    assert asked_id in record.source_event_ids


def test_a_new_request_after_the_idle_window_does_not_take_the_question_in(
    backend_settings: Settings, make_runtime
):
    runtime = make_runtime(backend_settings.replace(turn_idle_s=600))
    closed, asked_id = _retry_session(runtime, "the PDF export crashes for them", gap_s=3600)
    extract_turns(runtime.tasks, closed)
    [record] = _records(runtime)
    assert asked_id not in record.source_event_ids
    assert not any(f.startswith("earlier request") for f in record.facts)
    assert _reasons(runtime, "s") == ["unanswered", None]

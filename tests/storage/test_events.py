"""Events and turns, the storage contract: each test runs on each backend (``storage``)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import HealthCheck, given
from hypothesis import settings as hsettings
from hypothesis import strategies as st

from tests.storage.conftest import NS, T0, event, record, retrieval
from wakemark.shared.models import Event, Source, new_ulid
from wakemark.shared.storage import Storage


def test_put_event_is_idempotent_and_keeps_the_first_row(storage: Storage) -> None:
    first = event(text="original")
    result = storage.put_event(first)
    assert result.stored and result.event_id == first.event_id
    stored = storage.get_event(first.event_id)
    assert stored is not None and stored.transaction_time is not None

    again = storage.put_event(first.model_copy(update={"body": {"type": "text", "content": "x"}}))
    assert not again.stored and again.turn_id == result.turn_id and again.closed_turns == ()
    repeat = storage.get_event(first.event_id)
    assert repeat is not None
    assert repeat.transaction_time == stored.transaction_time
    assert repeat.body.model_dump() == {"type": "text", "content": "original"}
    assert storage.stats()["events"] == 1


def test_event_round_trips(storage: Storage) -> None:
    original = event("tool_use", text="ran pytest", at=T0, project_path="/src/wakemark")
    result = storage.put_event(original)
    got = storage.get_event(original.event_id)
    assert got is not None
    assert got.model_dump(exclude={"transaction_time", "turn_id"}) == original.model_dump()
    assert got.turn_id == result.turn_id


def test_get_event_miss_is_none(storage: Storage) -> None:
    assert storage.get_event(new_ulid()) is None


def test_list_events_newest_first_with_filters(storage: Storage) -> None:
    a = storage.put_event(event(session="s1")).event_id
    b = storage.put_event(event(session="s2")).event_id
    c = storage.put_event(event(session="s1", ns="/actor/b/project/x/")).event_id
    assert [e.event_id for e in storage.list_events()] == [c, b, a]
    assert [e.event_id for e in storage.list_events(namespace=NS)] == [b, a]
    assert [e.event_id for e in storage.list_events(session_id="s1")] == [c, a]
    assert [e.event_id for e in storage.list_events(limit=1)] == [c]


def test_events_after_pages_every_event_in_id_order(storage: Storage) -> None:
    events = [event(text=f"e{i}", ns=ns) for i, ns in enumerate([NS, "/actor/b/project/b/"] * 3)]
    storage.put_events(events)
    ids = sorted(e.event_id for e in events)
    seen: list[str] = []
    after = None
    while page := storage.events_after(after, 4):
        seen += [e.event_id for e in page]
        after = page[-1].event_id
    assert seen == ids
    assert storage.events_after(ids[-1], 4) == []


def test_rewrite_events_changes_only_the_client_text(storage: Storage) -> None:
    kept, changed = event(text="keep me"), event(text="token=abc", session="s2")
    storage.put_events([kept, changed])
    before = storage.get_event(changed.event_id)
    assert before is not None
    redacted = changed.model_copy(
        update={
            "body": {"type": "text", "content": "token=[R]"},
            "source": Source(surface="test", version="[R]", project_path="/p/[R]"),
            "actor_id": "[R]",
        }
    )
    assert storage.rewrite_events([redacted, event()]) == 1
    after = storage.get_event(changed.event_id)
    assert after is not None and after.body.content == "token=[R]"  # type: ignore[union-attr]
    assert after.source == Source(surface="test", version="[R]", project_path="/p/[R]")
    assert after.actor_id == "[R]"
    assert (after.transaction_time, after.turn_id, after.session_id, after.namespace) == (
        before.transaction_time, before.turn_id, "s2", before.namespace
    )  # fmt: skip
    assert storage.get_event(kept.event_id).body.content == "keep me"  # type: ignore[union-attr]


def test_rename_session_moves_events_turns_and_audit_rows(storage: Storage) -> None:
    leaky, other = event(session="ghp_secret"), event(session="[R]")
    storage.put_events([leaky, other])
    storage.put_retrieval(row := retrieval(leaky))
    untouched = event(session="ghp_secret", ns="/actor/bob/project/p/")
    storage.put_event(untouched)
    assert storage.rename_session(NS, "ghp_secret", "[R]") == 1
    moved = storage.get_event(leaky.event_id)
    assert moved is not None and moved.session_id == "[R]" and moved.turn_id is not None
    turns = storage.session_turns(NS, "[R]")
    assert len(turns) == 2 and storage.session_turns(NS, "ghp_secret") == []
    # One session has one open turn: the renamed one closed at its last event.
    assert [t.turn_id for t in turns if not t.closed] == [storage.get_event(other.event_id).turn_id]  # type: ignore[union-attr]
    assert storage.get_retrieval(row.retrieval_id).session_id == "[R]"  # type: ignore[union-attr]
    assert storage.get_event(untouched.event_id).session_id == "ghp_secret"  # type: ignore[union-attr]
    assert storage.rename_session(NS, "nothing", "[R]") == 0


def test_batch_put_events_is_all_or_nothing(storage: Storage) -> None:
    good = event(text="good")
    # A row the database itself refuses (no namespace) after a valid one in the same batch.
    bad = Event.model_construct(**{**event("tool_use").__dict__, "namespace": None})
    with pytest.raises(Exception):  # noqa: B017 - the driver's own error type differs
        storage.put_events([good, bad])
    assert storage.get_event(good.event_id) is None
    assert storage.stats()["events"] == 0
    assert storage.stats()["pending_extraction"] == 0
    assert storage.put_event(good).stored


def test_batch_put_events_stores_each_once(storage: Storage) -> None:
    a, b = event(text="a"), event("tool_use", text="b")
    results = storage.put_events([a, b, a])
    assert [r.stored for r in results] == [True, True, False]
    assert results[0].turn_id == results[1].turn_id == results[2].turn_id


def test_event_ids_are_deduplicated_per_namespace(storage: Storage) -> None:
    """An id taken in another namespace is no duplicate: ``stored`` must not tell one
    client that another namespace holds the id, nor let one keep another's event out."""
    theirs = event(text="theirs", ns="/actor/alice/project/p/")
    mine = event(text="mine", ns="/actor/bob/project/b/").model_copy(
        update={"event_id": theirs.event_id}
    )
    assert storage.put_event(theirs).stored
    first = storage.put_event(mine)
    assert (first.event_id, first.stored) == (theirs.event_id, True)
    assert first.stored_id and first.stored_id != theirs.event_id
    assert first.stored_id[:10] == theirs.event_id[:10]  # sorts where the client's id would
    again = storage.put_events([mine, theirs])
    assert [(r.event_id, r.stored) for r in again] == [(theirs.event_id, False)] * 2
    assert [r.stored_id for r in again] == [first.stored_id, theirs.event_id]
    kept = storage.get_event(theirs.event_id)
    assert kept is not None and kept.body.content == "theirs"  # type: ignore[union-attr]
    [bobs] = storage.list_events(namespace="/actor/bob/", limit=10)
    assert (bobs.event_id, bobs.body.content) == (first.stored_id, "mine")  # type: ignore[union-attr]
    # Both in one batch: each namespace gets its own.
    other = event(text="x", ns="/actor/carol/project/c/")
    twin = other.model_copy(update={"namespace": "/actor/dave/project/d/"})
    assert [r.stored for r in storage.put_events([other, twin, twin])] == [True, True, False]


def test_turn_lifecycle(storage: Storage) -> None:
    p1 = storage.put_event(event("prompt", at=T0))
    assert p1.turn_id and p1.closed_turns == ()
    tool = storage.put_event(event("tool_use", at=T0 + timedelta(seconds=2)))
    assert tool.turn_id == p1.turn_id and tool.closed_turns == ()

    p2 = storage.put_event(event("prompt", at=T0 + timedelta(seconds=3)))
    assert p2.turn_id != p1.turn_id and p2.closed_turns == (p1.turn_id,)
    summary = storage.put_event(event("session_summary", at=T0 + timedelta(seconds=4)))
    assert summary.turn_id == p2.turn_id and summary.closed_turns == (p2.turn_id,)

    orphan = storage.put_event(event("tool_use", at=T0 + timedelta(seconds=5)))
    assert orphan.turn_id not in (p1.turn_id, p2.turn_id) and orphan.closed_turns == ()
    note = storage.put_event(event("note", at=T0 + timedelta(seconds=6)))
    assert note.turn_id not in (orphan.turn_id, None) and note.closed_turns == (note.turn_id,)
    # The note did not close the open turn: the next tool use still joins it.
    assert storage.put_event(event("tool_use")).turn_id == orphan.turn_id

    turn = storage.get_turn(p1.turn_id)
    assert turn is not None and turn.closed and not turn.extracted
    assert turn.namespace == NS and turn.session_id == "s1"
    assert [e.event_id for e in turn.events] == [p1.event_id, tool.event_id]
    assert storage.get_turn(new_ulid()) is None
    assert storage.pending_turns() == [p1.turn_id, p2.turn_id, note.turn_id]


def test_sessions_have_separate_turns(storage: Storage) -> None:
    a = storage.put_event(event("prompt", session="s1"))
    b = storage.put_event(event("prompt", session="s2"))
    assert a.turn_id != b.turn_id and b.closed_turns == ()
    assert storage.put_event(event("tool_use", session="s1")).turn_id == a.turn_id


def test_repeated_prompt_closes_nothing(storage: Storage) -> None:
    p = event("prompt")
    first = storage.put_event(p)
    again = storage.put_event(p)
    assert not again.stored and again.closed_turns == () and again.turn_id == first.turn_id
    turn = storage.get_turn(first.turn_id or "")
    assert turn is not None and not turn.closed


# (kind, session, index of an earlier step to repeat or None)
STEPS = st.lists(
    st.tuples(
        st.sampled_from(["prompt", "tool_use", "session_summary", "note"]),
        st.sampled_from(["s1", "s2"]),
        st.none() | st.integers(min_value=0, max_value=30),
    ),
    min_size=1,
    max_size=30,
)


@hsettings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(steps=STEPS, split=st.integers(min_value=0, max_value=30))
def test_a_batch_assigns_turns_exactly_as_events_one_by_one(
    storage: Storage, steps: list[tuple[str, str, int | None]], split: int
) -> None:
    """The same steps, in two fresh namespaces: stored one event at a time, and as two
    batches (the first ending at ``split``). Turn ids differ; their shape may not."""
    runs = []
    for batched in (False, True):
        ns = f"/actor/a/project/{new_ulid().lower()}/"
        events: list[Event] = []
        for kind, session, repeat in steps:
            again = repeat is not None and repeat < len(events)
            events.append(events[repeat] if again else event(kind, session=session, ns=ns))  # type: ignore[index]
        if batched:
            results = storage.put_events(events[:split]) + storage.put_events(events[split:])
        else:
            results = [storage.put_event(e) for e in events]
        runs.append(_turn_shape(storage, events, results))
    assert runs[0] == runs[1]


def _turn_shape(storage: Storage, events: list[Event], results: list[Any]) -> Any:
    """Results and turns with each turn id replaced by its order of first appearance."""
    names: dict[str | None, int] = {}

    def name(turn_id: str | None) -> int:
        return names.setdefault(turn_id, len(names))

    shape = [(r.stored, name(r.turn_id), [name(t) for t in r.closed_turns]) for r in results]
    position = {e.event_id: i for i, e in reversed(list(enumerate(events)))}
    turns = []
    for turn_id, n in list(names.items()):
        turn = storage.get_turn(turn_id or "")
        assert turn is not None
        turns.append((n, turn.closed, sorted(position[m.event_id] for m in turn.events)))
    return shape, turns


def test_close_idle_turns(storage: Storage) -> None:
    open_turn = storage.put_event(event("prompt")).turn_id
    assert storage.close_idle_turns(datetime.now(UTC) - timedelta(hours=1)) == []
    assert storage.pending_turns() == []
    assert storage.close_idle_turns(datetime.now(UTC) + timedelta(seconds=1)) == [open_turn]
    assert storage.pending_turns() == [open_turn]
    assert storage.close_idle_turns(datetime.now(UTC) + timedelta(seconds=1)) == []


def test_mark_turn_extracted_only_once(storage: Storage) -> None:
    turn_id = storage.put_event(event("note")).turn_id
    assert turn_id is not None
    rec = record()
    with storage.transaction() as tx:
        tx.put_memory_record(rec)
        assert tx.mark_turn_extracted(turn_id, [rec.record_id])
    with storage.transaction() as tx:
        assert not tx.mark_turn_extracted(turn_id, [])
    turn = storage.get_turn(turn_id)
    assert turn is not None and turn.extracted
    assert storage.pending_turns() == []


def test_an_open_turn_is_never_marked_extracted(storage: Storage) -> None:
    # Were it marked, the next event of its session would join a turn already extracted,
    # and never be extracted itself.
    prompt = storage.put_event(event("prompt", at=T0))
    assert prompt.turn_id is not None
    with storage.transaction() as tx:
        assert not tx.mark_turn_extracted(prompt.turn_id, [])
    assert storage.put_event(event("tool_use")).turn_id == prompt.turn_id
    closing = storage.put_event(event("session_summary"))
    assert closing.closed_turns == (prompt.turn_id,)
    with storage.transaction() as tx:
        assert tx.mark_turn_extracted(prompt.turn_id, [])
    turn = storage.get_turn(prompt.turn_id)
    assert turn is not None and turn.closed and turn.extracted and len(turn.events) == 3


def test_skip_reason_is_kept_and_counted(storage: Storage) -> None:
    closed = []
    for session in ("s1", "s2", "s3", "s4"):
        storage.put_event(event("prompt", "<command-name>/clear</command-name>", session))
        closed.append(storage.put_event(event("session_summary", "ok", session)).turn_id or "")
    assert storage.skipped_turns() == {}
    rec = record()
    with storage.transaction() as tx:
        assert tx.mark_turn_extracted(closed[0], [], "command")
        assert tx.mark_turn_extracted(closed[1], [], "command")
        assert tx.mark_turn_extracted(closed[2], [], "meta")
        tx.put_memory_record(rec)
        assert tx.mark_turn_extracted(closed[3], [rec.record_id])
    with storage.transaction() as tx:
        assert not tx.mark_turn_extracted(closed[2], [], "trivial")  # the first mark stands
    assert storage.skipped_turns() == {"command": 2, "meta": 1}
    skipped = storage.get_turn(closed[0])
    assert skipped is not None and skipped.extracted
    assert [e.kind for e in skipped.events] == ["prompt", "session_summary"]  # events kept
    assert storage.pending_turns() == []


def test_put_events_in_a_transaction_commits_with_it(storage: Storage) -> None:
    note = event("note")
    seen: list[tuple[str, ...]] = []
    with storage.transaction() as tx:
        [result] = tx.put_events([note])
        tx.on_commit(lambda: seen.append(result.closed_turns))
    assert seen == [(result.turn_id,)]
    assert storage.get_event(note.event_id) is not None


def test_turns_before_lists_the_sessions_earlier_turns_nearest_first(storage: Storage) -> None:
    prompts = [event(at=T0 + timedelta(seconds=i), text=f"p{i}") for i in range(3)]
    turn_ids = [storage.put_event(p).turn_id for p in prompts]
    elsewhere = storage.put_event(event(session="s2", at=T0 + timedelta(seconds=1)))
    assert storage.turns_before(str(turn_ids[2]), 5) == [turn_ids[1], turn_ids[0]]
    assert storage.turns_before(str(turn_ids[2]), 1) == [turn_ids[1]]
    assert storage.turns_before(str(turn_ids[0]), 5) == []
    assert storage.turns_before(str(elsewhere.turn_id), 5) == []  # another session's
    assert storage.turns_before("no-such-turn", 5) == []

"""The storage contract: every test runs on each backend through the ``storage`` fixture."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given
from hypothesis import settings as hsettings
from hypothesis import strategies as st

from wakemark.shared.models import (
    Event,
    MemoryRecord,
    Retrieval,
    RetrievalCandidate,
    Source,
    new_record_id,
    new_ulid,
)
from wakemark.shared.retrieval.lexical import search_lexical
from wakemark.shared.storage import (
    DuplicateRecordError,
    NotFoundError,
    Storage,
    open_storage,
)

NS = "/actor/a/project/a/"
T0 = datetime(2024, 5, 1, 12, 0, tzinfo=UTC)


def event(kind: str = "prompt", text: str = "hello", session: str = "s1", ns: str = NS,
          at: datetime | None = None, **extra: Any) -> Event:  # fmt: skip
    return Event(
        event_id=new_ulid(),
        session_id=session,
        actor_id=ns.split("/")[2],
        namespace=ns,
        kind=kind,
        body={"type": "text", "content": text},
        valid_time=at or datetime.now(UTC),
        source={"surface": "test", "project_path": extra.pop("project_path", None)},
        **extra,
    )


def record(title: str = "a memory", ns: str = NS, minutes: int = 0, **extra: Any) -> MemoryRecord:
    return MemoryRecord(
        namespace=ns, title=title, created_at=T0 + timedelta(minutes=minutes), **extra
    )


def vec(seed: int) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(384).astype(np.float32)


# --- events ---------------------------------------------------------------------------


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


# --- turns ----------------------------------------------------------------------------


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


# --- memory records -------------------------------------------------------------------


def test_record_round_trips(storage: Storage) -> None:
    rec = record(
        "Switched to WAL", summary="because readers block", facts=["busy_timeout 5000"],
        concepts=["sqlite"], files_touched=["shared/x.py"], observation_type="decision",
        source_event_ids=[new_ulid()], strategy="llm", quality="fallback", pinned=True,
    )  # fmt: skip
    storage.put_memory_record(rec)
    assert storage.get_memory_record(rec.record_id) == rec
    assert storage.get_memory_record(new_record_id()) is None
    assert not storage.has_embedding(rec.record_id)


def test_duplicate_record_id_is_rejected(storage: Storage) -> None:
    rec = record("first")
    storage.put_memory_record(rec)
    with pytest.raises(DuplicateRecordError):
        storage.put_memory_record(rec.model_copy(update={"title": "second"}))
    got = storage.get_memory_record(rec.record_id)
    assert got is not None and got.title == "first"


def test_delete_cascades_without_ghost_fulltext_rows(storage: Storage) -> None:
    doomed, kept = record("zyzzyva quux"), record("kept quux")
    for r in (doomed, kept):
        storage.put_memory_record(r)
        storage.put_embedding(r.record_id, vec(1))
    assert [h.record.record_id for h in search_lexical(storage, NS, "zyzzyva", 10)] == [
        doomed.record_id
    ]
    assert storage.delete_memory_records([doomed.record_id, new_record_id()]) == [doomed.record_id]
    assert search_lexical(storage, NS, "zyzzyva", 10) == []
    assert [h.record.record_id for h in search_lexical(storage, NS, "quux", 10)] == [kept.record_id]
    assert storage.get_memory_record(doomed.record_id) is None
    assert not storage.has_embedding(doomed.record_id)
    assert storage.list_embeddings(NS).record_ids == [kept.record_id]
    assert storage.embedded_ids(NS) == [kept.record_id]
    assert storage.delete_memory_records([doomed.record_id]) == []


def test_replace_record_text_refreshes_fulltext_and_clears_the_embedding(
    storage: Storage,
) -> None:
    old = record("zyzzyva deploy key", summary="rotate zyzzyva", facts=["f zyzzyva"], pinned=True)
    storage.put_memory_record(old)
    storage.put_embedding(old.record_id, vec(1))
    new = old.model_copy(
        update={"title": "quokka deploy key", "summary": "rotate it", "facts": ["f quokka"],
                "concepts": ["c"], "files_touched": ["a.py"]}
    )  # fmt: skip
    with storage.transaction() as tx:
        tx.replace_record_text(new)
    got = storage.get_memory_record(old.record_id)
    assert got is not None
    assert (got.title, got.summary, got.facts, got.concepts, got.files_touched) == (
        "quokka deploy key", "rotate it", ["f quokka"], ["c"], ["a.py"]
    )  # fmt: skip
    assert (got.pinned, got.created_at, got.namespace) == (True, old.created_at, NS)
    assert search_lexical(storage, NS, "zyzzyva", 10) == []
    assert [h.record.record_id for h in search_lexical(storage, NS, "quokka", 10)] == [
        old.record_id
    ]
    assert not storage.has_embedding(old.record_id)
    assert storage.embedded_ids(NS) == [] and storage.list_embeddings(NS).total == 0
    assert [r.record_id for r in storage.records_missing_embedding(10)] == [old.record_id]
    with pytest.raises(NotFoundError), storage.transaction() as tx:
        tx.replace_record_text(record("never stored"))


def test_transaction_is_all_or_nothing(storage: Storage) -> None:
    base, other = record("base", minutes=1), record("other", minutes=2)
    storage.put_memory_record(base)
    storage.put_memory_record(other)
    turn_id = storage.put_event(event("note")).turn_id
    assert turn_id is not None
    fresh = record("fresh")
    with pytest.raises(RuntimeError), storage.transaction() as tx:
        tx.put_memory_record(fresh)
        tx.put_embedding(fresh.record_id, vec(1))
        tx.put_embedding(base.record_id, vec(2))
        assert tx.delete_memory_records([other.record_id]) == [other.record_id]
        assert tx.mark_turn_extracted(turn_id, [fresh.record_id])
        raise RuntimeError("midway")
    assert storage.get_memory_record(fresh.record_id) is None
    assert not storage.has_embedding(base.record_id)
    assert storage.get_memory_record(other.record_id) == other
    assert storage.pending_turns() == [turn_id]
    with storage.transaction() as tx:
        assert tx.mark_turn_extracted(turn_id, [])


def test_put_embedding_unknown_record(storage: Storage) -> None:
    with pytest.raises(NotFoundError):
        storage.put_embedding(new_record_id(), vec(0))


def test_list_get_pin_timeline(storage: Storage) -> None:
    recs = [record(f"r{i}", minutes=i) for i in range(5)]
    for r in recs:
        storage.put_memory_record(r)
    storage.put_memory_record(record("elsewhere", ns="/actor/a/project/b/"))
    ids = [r.record_id for r in recs]

    first = storage.list_memory_records(NS, limit=2)
    assert [r.record_id for r in first.items] == [ids[4], ids[3]]
    page = storage.list_memory_records(NS, limit=2, after=first.next)
    assert (page.total, page.limit) == (5, 2)
    assert [r.record_id for r in page.items] == [ids[2], ids[1]]
    uncounted = storage.list_memory_records(NS, limit=2, after=first.next, count=False)
    assert uncounted.total is None and uncounted.items == page.items
    last = storage.list_memory_records(NS, limit=2, after=page.next)
    assert [r.record_id for r in last.items] == [ids[0]] and last.next is None
    assert [r.record_id for p in storage.record_pages(NS, 2) for r in p] == ids[::-1]

    pinned = storage.set_pinned(ids[1], True)
    assert pinned.pinned and pinned.record_id == ids[1]
    first = storage.list_memory_records(NS, limit=2, pinned_first=True).items
    assert [r.record_id for r in first] == [ids[1], ids[4]]
    paged = [r.record_id for p in storage.record_pages(NS, 2, pinned_first=True) for r in p]
    assert paged == [ids[1], ids[4], ids[3], ids[2], ids[0]]
    assert storage.list_memory_records(NS, limit=1).items[0].record_id == ids[4]
    assert not storage.set_pinned(ids[1], False).pinned
    with pytest.raises(NotFoundError):
        storage.set_pinned(new_record_id(), True)

    assert [r.record_id for r in storage.get_memory_records([ids[3], new_record_id(), ids[0]])] == [
        ids[3],
        ids[0],
    ]
    around = storage.timeline(ids[2], before=1, after=5)
    assert [r.record_id for r in around] == ids[1:]
    assert [r.record_id for r in storage.timeline(ids[0], before=3, after=0)] == [ids[0]]
    with pytest.raises(NotFoundError):
        storage.timeline(new_record_id(), 1, 1)


def test_embeddings_list_missing_and_clear(storage: Storage) -> None:
    recs = [record(f"r{i}", minutes=i) for i in range(3)]
    other = record("other", ns="/actor/b/project/b/", minutes=9)
    for r in [*recs, other]:
        storage.put_memory_record(r)
    assert [r.record_id for r in storage.records_missing_embedding(10)] == [
        *(r.record_id for r in recs),
        other.record_id,
    ]
    assert [r.record_id for r in storage.records_missing_embedding(1)] == [recs[0].record_id]
    storage.put_embedding(recs[1].record_id, vec(1))
    storage.put_embedding(other.record_id, vec(2))
    assert storage.has_embedding(recs[1].record_id)

    rows = storage.list_embeddings(NS)
    assert rows.record_ids == [recs[1].record_id] and rows.total == 1
    assert rows.vectors.dtype == np.float32 and rows.vectors.shape == (1, 384)
    assert rows.vectors.flags.c_contiguous and rows.vectors.flags.writeable
    assert np.array_equal(rows.vectors[0], vec(1))
    assert rows.created_at.tolist() == [recs[1].created_at.timestamp()]
    assert rows.observation_types == ["note"]
    missing = storage.records_missing_embedding(10, namespace=NS)
    assert [r.record_id for r in missing] == [recs[0].record_id, recs[2].record_id]

    assert storage.clear_embeddings(NS) == 1
    assert len(storage.list_embeddings(NS)) == 0 and storage.embedded_ids(NS) == []
    assert storage.has_embedding(other.record_id)
    assert storage.clear_embeddings() == 1
    assert storage.stats()["pending_embedding"] == 4


def test_stats(storage: Storage) -> None:
    empty = storage.stats()
    assert {k: empty[k] for k in ("events", "memories", "embedded")} == {
        "events": 0,
        "memories": 0,
        "embedded": 0,
    }
    assert empty["pending_extraction"] == 0 and empty["pending_embedding"] == 0
    storage.put_event(event("prompt"))
    storage.put_event(event("tool_use"))  # open turn: still pending
    note = storage.put_event(event("note"))
    storage.put_event(event("note", ns="/actor/b/project/b/"))
    r1, r2 = record("one"), record("two")
    storage.put_memory_record(r1)
    storage.put_memory_record(r2)
    storage.put_embedding(r1.record_id, vec(1))
    stats = storage.stats()
    assert stats["events"] == 4 and stats["pending_extraction"] == 4
    assert (stats["memories"], stats["embedded"], stats["pending_embedding"]) == (2, 1, 1)
    with storage.transaction() as tx:
        assert tx.mark_turn_extracted(note.turn_id or "", [])
    scoped = storage.stats(NS)
    assert scoped["events"] == 3 and scoped["pending_extraction"] == 2
    assert storage.stats("/actor/b/")["memories"] == 0


def test_projects(storage: Storage) -> None:
    storage.put_event(event(project_path="/home/u/old-name"))
    storage.put_event(event(project_path="/home/u/wakemark"))
    storage.put_event(event(ns="/actor/a/project/b/"))
    storage.put_memory_record(record())
    rows = {p["namespace"]: p for p in storage.projects()}
    assert set(rows) == {NS, "/actor/a/project/b/"}
    assert rows[NS]["project_id"] == "a" and rows[NS]["display_name"] == "wakemark"
    assert rows[NS]["project_path"] == "/home/u/wakemark"
    assert rows["/actor/a/project/b/"]["project_path"] is None
    assert (rows[NS]["event_count"], rows[NS]["memory_count"]) == (2, 1)
    assert isinstance(rows[NS]["last_activity"], datetime)


def test_counts_follow_deletes_embeddings_and_edits(storage: Storage) -> None:
    """The per-project counts (kept by triggers) agree with the rows after every kind of
    write: idempotent repeats, deletes, embedding writes and the edit that clears one."""
    first = event(project_path="/home/u/wakemark")
    storage.put_event(first)
    storage.put_event(first)  # stored once, counted once
    second = storage.put_event(event("note"))
    kept, gone = record("kept"), record("gone", minutes=1)
    storage.put_memory_record(kept)
    storage.put_memory_record(gone)
    storage.put_embedding(kept.record_id, vec(1))
    storage.put_embedding(kept.record_id, vec(2))  # re-embedding is not a second vector
    storage.put_embedding(gone.record_id, vec(3))
    assert storage.stats(NS)["embedded"] == 2
    with storage.transaction() as tx:
        assert tx.delete_memory_records([gone.record_id]) == [gone.record_id]
        assert tx.delete_events([second.event_id]) == 1
    storage.edit_memory_record(kept.record_id, title="kept, corrected")
    stats = storage.stats(NS)
    assert (stats["events"], stats["memories"], stats["embedded"]) == (1, 1, 0)
    assert stats["pending_embedding"] == 1
    page = storage.list_memory_records(NS, count=True)
    assert page.total == 1
    (row,) = storage.projects()
    assert (row["event_count"], row["memory_count"]) == (1, 1)
    assert row["project_path"] == "/home/u/wakemark"
    with storage.transaction() as tx:
        tx.delete_memory_records([kept.record_id])
        tx.delete_events([first.event_id])
    assert storage.projects() == []  # a project with nothing left is not listed
    assert storage.stats()["events"] == 0


def test_a_batch_spanning_projects_counts_each(storage: Storage) -> None:
    other = "/actor/b/project/b/"
    storage.put_events([event(ns=other), event(), event(ns=other, session="s2")])
    counts = {p["namespace"]: p["event_count"] for p in storage.projects()}
    assert counts == {NS: 1, other: 2}


def test_ping_and_close_twice(backend_settings: Any) -> None:
    store = open_storage(backend_settings)
    store.ping()
    store.close()
    store.close()


# --- search ---------------------------------------------------------------------------


def ids_of(hits: list[Any]) -> list[str]:
    return [h.record.record_id for h in hits]


def test_search_ranks_title_above_summary_above_facts(storage: Storage) -> None:
    in_facts = record("one", facts=["the walrus detail"], minutes=3)
    in_summary = record("two", summary="a walrus here", minutes=2)
    in_title = record("walrus three", minutes=1)
    for r in (in_facts, in_summary, in_title):
        storage.put_memory_record(r)
    hits = search_lexical(storage, NS, "Walrus?", 10)
    assert ids_of(hits) == [in_title.record_id, in_summary.record_id, in_facts.record_id]
    assert [h.rank for h in hits] == [0, 1, 2]


def test_search_weighs_a_rare_word_above_common_ones(storage: Storage) -> None:
    # BM25 on both backends: the record holding the query's rarest word comes first, before
    # those holding only its two common words (weighing each word alike, Postgres' ts_rank
    # alone puts two matched words above one).
    common = [record(f"template loader fix number {i}", minutes=i) for i in range(5)]
    others = [record(f"unrelated chore {i}", minutes=20 + i) for i in range(18)]
    rare = record("sandbox escape", minutes=1)
    for r in [*common, *others, rare]:
        storage.put_memory_record(r)
    hits = search_lexical(storage, NS, "template loader sandbox", 10)
    assert ids_of(hits) == [rare.record_id, *(r.record_id for r in reversed(common))]


def test_search_ties_break_by_recency_then_id(storage: Storage) -> None:
    same = [record("identical walrus", minutes=1) for _ in range(2)]
    newer = record("identical walrus", minutes=2)
    for r in [*same, newer]:
        storage.put_memory_record(r)
    expected = [newer.record_id, *sorted(r.record_id for r in same)]
    assert ids_of(search_lexical(storage, NS, "walrus", 10)) == expected


def test_search_ties_at_the_limit_break_by_recency_then_id(storage: Storage) -> None:
    # Inserted out of creation order, more tied rows than the limit: the cut keeps the
    # newest by created_at, then the lowest ids, whatever order the index holds them in.
    minutes = [3, 9, 1, 7, 5, 9, 2, 8, 4, 6, 0]
    same = [record("identical walrus", minutes=m) for m in minutes]
    for r in same:
        storage.put_memory_record(r)
    expected = [
        r.record_id for r in sorted(same, key=lambda r: (-r.created_at.timestamp(), r.record_id))
    ]
    for limit in (1, 2, 3, 5, 11):
        assert ids_of(search_lexical(storage, NS, "walrus", limit)) == expected[:limit], limit


def test_search_filters_and_limit(storage: Storage) -> None:
    old = record("walrus old", observation_type="bugfix", minutes=1)
    new = record("walrus new", observation_type="decision", minutes=10)
    for r in (old, new):
        storage.put_memory_record(r)
    assert ids_of(search_lexical(storage, NS, "walrus", 10, observation_type="bugfix")) == [
        old.record_id
    ]
    assert ids_of(search_lexical(storage, NS, "walrus", 10, since=T0 + timedelta(minutes=5))) == [
        new.record_id
    ]
    assert len(search_lexical(storage, NS, "walrus", 1)) == 1
    # The substring fallback honours the same filters.
    assert ids_of(search_lexical(storage, NS, "w", 10, observation_type="bugfix")) == [
        old.record_id
    ]
    assert ids_of(search_lexical(storage, NS, "w", 10, since=T0 + timedelta(minutes=5))) == [
        new.record_id
    ]


def test_search_identifiers_and_operators_are_plain_words(storage: Storage) -> None:
    rec = record("fixed parse_args in cli.py", summary="NOT a NEAR miss")
    storage.put_memory_record(rec)
    for query in ("parse_args", "cli.py", "NOT", "near(", '"parse_args', "title:fixed", "fix*"):
        assert ids_of(search_lexical(storage, NS, query, 5)) == [rec.record_id], query


def test_search_falls_back_to_escaped_substring(storage: Storage) -> None:
    cpp = record("C++ templates", minutes=1)
    pct = record("coverage at 100% now", minutes=2)
    under = record("snake a_b case", minutes=3)
    plain = record("axb plain", minutes=4)
    for r in (cpp, pct, under, plain):
        storage.put_memory_record(r)
    assert ids_of(search_lexical(storage, NS, "C++", 10)) == [cpp.record_id]
    assert ids_of(search_lexical(storage, NS, "%", 10)) == [pct.record_id]
    assert ids_of(search_lexical(storage, NS, "_", 10)) == [under.record_id]
    assert ids_of(search_lexical(storage, NS, "\\", 10)) == []
    assert search_lexical(storage, NS, "", 10) == []
    assert search_lexical(storage, NS, "   ", 10) == []


def test_long_query_keeps_the_rarest_terms(storage: Storage) -> None:
    common = " ".join(f"common{i}" for i in range(40))
    # The oldest record: it comes first only if "zebra" survives the 32-term cap.
    rare = record("entry", summary=f"{common} zebra", minutes=0)
    others = [record("entry", summary=common, minutes=i) for i in range(1, 4)]
    for r in (rare, *others):
        storage.put_memory_record(r)
    hits = search_lexical(storage, NS, f"{common} zebra", 10)
    assert ids_of(hits)[0] == rare.record_id and len(hits) == 4


HOSTILE = st.text(
    alphabet=st.one_of(
        st.sampled_from(list("ANDORNOTNEAR*^:()\"'%_\\\x00-+{}[]~ \ud800\udfff")),
        st.characters(),
    ),
    max_size=80,
)


@hsettings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(query=HOSTILE)
def test_search_never_raises(storage: Storage, query: str) -> None:
    if not storage.list_memory_records(NS, limit=1).total:
        storage.put_memory_record(record('weird AND "quoted" 100% a_b \\ NEAR(x) col:on'))
    hits = search_lexical(storage, NS, query, 5)
    assert all(h.record.namespace == NS for h in hits)


NAMESPACES = [
    "/actor/a/project/a/",
    "/actor/a/project/ab/",
    "/actor/a/project/xa/",
    "/actor/b/project/a/",
]


def test_namespace_isolation(storage: Storage) -> None:
    by_ns = {}
    for i, ns in enumerate(NAMESPACES):
        rec = record(f"shared walrus {i}", ns=ns, minutes=i)
        storage.put_memory_record(rec)
        storage.put_embedding(rec.record_id, vec(i))
        storage.put_event(event("note", ns=ns))
        by_ns[ns] = rec.record_id

    def found(ns: str) -> set[str]:
        lexical = ids_of(search_lexical(storage, ns, "walrus", 10))
        assert set(ids_of(search_lexical(storage, ns, "shared walrus", 10))) == set(lexical)
        assert set(ids_of(search_lexical(storage, ns, "d w", 10))) == set(lexical)  # fallback
        listed = [r.record_id for r in storage.list_memory_records(ns).items]
        embedded = storage.list_embeddings(ns).record_ids
        assert set(storage.embedded_ids(ns)) == set(embedded)
        assert set(lexical) == set(listed) == set(embedded)
        assert storage.stats(ns)["memories"] == len(listed)
        assert storage.stats(ns)["events"] == len(listed)
        assert {e.namespace for e in storage.list_events(namespace=ns)} <= {
            storage.get_memory_record(i).namespace  # type: ignore[union-attr]
            for i in listed
        }
        return set(lexical)

    assert found("/actor/a/project/a/") == {by_ns["/actor/a/project/a/"]}
    assert found("/actor/a/project/a_/") == set()
    assert found("/actor/a/project/%/") == set()
    assert found("/actor/a/project/_/") == set()
    assert found("/actor/a/") == {by_ns[n] for n in NAMESPACES[:3]}
    assert found("/actor/%/") == set()
    with pytest.raises(ValueError):
        search_lexical(storage, "/actor/a", "walrus", 10)
    with pytest.raises(ValueError):
        storage.list_memory_records("/actor/a/project/a")


# --- change notifications -------------------------------------------------------------


def test_on_change_only_after_commit(backend_settings: Any) -> None:
    reader = open_storage(backend_settings)
    calls: list[tuple[set[str], bool]] = []
    watched: dict[str, str] = {}

    def hook(namespaces: set[str]) -> None:
        # Seen from another connection: true only once the transaction is committed.
        calls.append((set(namespaces), reader.has_embedding(watched["id"])))

    store = open_storage(backend_settings, on_change=hook)
    try:
        rec = record("watched")
        watched["id"] = rec.record_id
        store.put_memory_record(rec)
        store.put_event(event("note"))
        assert calls == []
        store.put_embedding(rec.record_id, vec(1))
        assert calls == [({NS}, True)]

        with pytest.raises(RuntimeError), store.transaction() as tx:
            tx.put_embedding(rec.record_id, vec(2))
            raise RuntimeError("rollback")
        assert len(calls) == 1

        assert store.clear_embeddings(NS) == 1
        assert calls[-1] == ({NS}, False)
        store.put_embedding(rec.record_id, vec(3))
        assert store.delete_memory_records([new_record_id()]) == []
        assert len(calls) == 3
        store.delete_memory_records([rec.record_id])
        assert calls[-1] == ({NS}, False) and reader.get_memory_record(rec.record_id) is None
        assert len(calls) == 4
    finally:
        store.close()
        reader.close()


# --- SQLite specifics -----------------------------------------------------------------


@hsettings(
    max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(raw=st.binary(min_size=1536, max_size=1536))
def test_sqlite_embedding_bits_round_trip(sqlite_store: Any, raw: bytes) -> None:
    if sqlite_store.get_memory_record(BITS.record_id) is None:
        sqlite_store.put_memory_record(BITS)
    sqlite_store.put_embedding(BITS.record_id, np.frombuffer(raw, dtype="<f4"))
    [vector] = sqlite_store.list_embeddings(NS).vectors
    assert vector.tobytes() == raw  # NaN payloads and signed zeros included


BITS = record("bits")


def test_sqlite_bad_embedding_names_the_record(sqlite_store: Any) -> None:
    import sqlite3

    from wakemark.shared.storage import EmbeddingDecodeError

    rec = record("short vector")
    sqlite_store.put_memory_record(rec)
    with pytest.raises(ValueError):
        sqlite_store.put_embedding(rec.record_id, np.zeros(383, dtype=np.float32))
    conn = sqlite3.connect(sqlite_store.path)
    with conn:
        conn.execute(
            "UPDATE memory_records SET embedding = ? WHERE record_id = ?",
            (b"\0" * 1532, rec.record_id),
        )
    conn.close()
    with pytest.raises(EmbeddingDecodeError, match=rec.record_id):
        sqlite_store.list_embeddings(NS)


def test_sqlite_pragmas_and_strict_tables(sqlite_store: Any) -> None:
    import sqlite3

    sqlite_store.ping()
    conn = sqlite3.connect(sqlite_store.path)
    try:
        assert conn.execute("PRAGMA journal_mode").fetchone() == ("wal",)
        tables = {
            name: strict
            for _, name, kind, _, _, strict in conn.execute("PRAGMA table_list")
            if kind == "table" and not name.startswith(("sqlite_", "memory_fts"))
        }
    finally:
        conn.close()
    assert set(tables) >= {"events", "turns", "memory_records", "_migrations"}
    assert all(tables.values()), tables
    own = sqlite_store._conns.get()
    assert own.execute("PRAGMA busy_timeout").fetchone()[0] >= 5000
    assert sqlite_store.path.parent.stat().st_mode & 0o777 == 0o700


def test_sqlite_delete_leaves_no_fulltext_terms(sqlite_store: Any) -> None:
    rec = record("zyzzyva", summary="quokka", facts=["wombat"])
    sqlite_store.put_memory_record(rec)
    conn = sqlite_store._conns.get()
    vocab = "SELECT term FROM memory_fts_vocab WHERE term IN ('zyzzyva', 'quokka', 'wombat')"
    assert len(conn.execute(vocab).fetchall()) == 3
    sqlite_store.delete_memory_records([rec.record_id])
    assert conn.execute(vocab).fetchall() == []
    conn.execute("INSERT INTO memory_fts (memory_fts, rank) VALUES ('integrity-check', 1)")


def test_sqlite_threads_and_fork_use_their_own_connections(sqlite_store: Any) -> None:
    import multiprocessing
    from concurrent.futures import ThreadPoolExecutor

    def write(i: int) -> bool:
        return sqlite_store.put_event(event("note", session=f"s{i}")).stored

    with ThreadPoolExecutor(max_workers=4) as pool:
        assert all(pool.map(write, range(40)))
    assert sqlite_store.stats()["events"] == 40

    ctx = multiprocessing.get_context("fork")
    child = ctx.Process(target=write, args=(99,))
    child.start()
    child.join(timeout=60)
    assert child.exitcode == 0
    assert sqlite_store.stats()["events"] == 41


def test_sqlite_failing_hook_does_not_undo_or_fail_the_write(settings: Any) -> None:
    from wakemark.shared.config import prepare_home
    from wakemark.shared.storage import migrate

    prepare_home(settings)
    migrate(settings)

    def hook(namespaces: set[str]) -> None:
        raise ConnectionError("redis down")

    store = open_storage(settings, on_change=hook)
    try:
        rec = record("kept")
        store.put_memory_record(rec)
        store.put_embedding(rec.record_id, vec(1))
        assert store.has_embedding(rec.record_id)
    finally:
        store.close()


def test_on_commit_runs_after_commit_and_never_after_rollback(storage: Storage) -> None:
    kept, lost = record("committed"), record("rolled back")
    seen: list[object] = []
    with storage.transaction() as tx:
        tx.put_memory_record(kept)
        # The call sees the committed row, as a job it enqueues would.
        tx.on_commit(lambda: seen.append(storage.get_memory_record(kept.record_id)))
        assert seen == []  # not before the commit
    assert seen == [kept]
    with pytest.raises(RuntimeError), storage.transaction() as tx:
        tx.put_memory_record(lost)
        tx.on_commit(lambda: seen.append("rolled back"))
        raise RuntimeError("abort")
    assert seen == [kept] and storage.get_memory_record(lost.record_id) is None


def test_a_failing_on_commit_call_leaves_the_commit_and_the_other_calls(
    storage: Storage,
) -> None:
    rec = record("written")
    seen: list[str] = []

    def fails() -> None:
        raise ConnectionError("queue down")

    with storage.transaction() as tx:
        tx.put_memory_record(rec)
        tx.on_commit(fails)
        tx.on_commit(lambda: seen.append("second"))
    assert seen == ["second"]
    assert storage.get_memory_record(rec.record_id) is not None


def test_put_events_in_a_transaction_commits_with_it(storage: Storage) -> None:
    note = event("note")
    seen: list[tuple[str, ...]] = []
    with storage.transaction() as tx:
        [result] = tx.put_events([note])
        tx.on_commit(lambda: seen.append(result.closed_turns))
    assert seen == [(result.turn_id,)]
    assert storage.get_event(note.event_id) is not None


def test_lexical_primitives(storage: Storage) -> None:
    rec = record("walrus tusk")
    storage.put_memory_record(rec)
    stats = storage.term_stats(["walrus", "nosuchword"])
    assert stats is not None and stats.total is not None and stats.total >= 1
    assert stats.doc_freq.get("walrus") == 1 and stats.doc_freq.get("nosuchword", 0) == 0
    found = storage.search_terms(NS, ["nosuchword", "walrus"], 10, stats=stats)
    assert found is not None and [r.record_id for r in found] == [rec.record_id]
    assert storage.search_terms(NS, ["nosuchword"], 10, stats=stats) == []
    assert storage.search_terms(NS, [], 10, stats=stats) is None  # nothing to search for
    assert [r.record_id for r in storage.search_substring(NS, "RUS TU", 10)] == [rec.record_id]
    assert storage.search_substring(NS, "  ", 10) == []


def test_search_fragments_ranks_by_fragments_held_then_newest(storage: Storage) -> None:
    pool = record("数据库连接池的配置", summary="连接池大小设为二十", minutes=0)
    timeout = record("连接超时", minutes=1, observation_type="bugfix")
    loader = record("cold start", facts=["warm_vector_cache_loader reads 50% of rows"], minutes=2)
    elsewhere = record("连接池", ns="/actor/b/project/b/", minutes=3)
    for rec in (pool, timeout, loader, elsewhere):
        storage.put_memory_record(rec)

    def ids(*args: Any, **kwargs: Any) -> list[str]:
        return [r.record_id for r in storage.search_fragments(*args, **kwargs)]

    # Two-character fragments scan the rows; the record holding both comes first.
    assert ids(NS, ["连接", "接池"], 10) == [pool.record_id, timeout.record_id]
    assert ids(NS, ["连接"], 10) == [timeout.record_id, pool.record_id]  # newest first
    assert ids(NS, ["连接"], 1) == [timeout.record_id]
    assert ids(NS, ["连接"], 10, observation_type="bugfix") == [timeout.record_id]
    assert ids(NS, ["连接"], 10, since=T0 + timedelta(seconds=30)) == [timeout.record_id]
    # Three or more go through the trigram index, case-insensitive, facts included.
    assert ids(NS, ["连接池的", "VECTOR_CACHE"], 10) == [loader.record_id, pool.record_id]
    # An actor prefix reaches its other projects; another actor's records never show.
    assert ids("/actor/a/", ["接池"], 10) == [pool.record_id]
    assert ids("/actor/b/", ["接池"], 10) == [elsewhere.record_id]
    # Taken literally: LIKE wildcards and FTS5 syntax match only themselves.
    assert ids(NS, ["0%"], 10) == [loader.record_id]
    assert ids(NS, ["%_%", '"OR'], 10) == []
    assert ids(NS, [], 10) == [] and ids(NS, ["  "], 10) == []


# --- retrieval audit ------------------------------------------------------------------


def retrieval(prompt: Event, minutes: int = 0, **extra: Any) -> Retrieval:
    candidates = [
        RetrievalCandidate(
            record_id=new_record_id(), rank=0, match_source="hybrid", score=0.03,
            relevance=0.8, evidence={"coverage": 1.0, "cosine": 0.6}, injected=True,
        ),
        RetrievalCandidate(
            record_id=new_record_id(), rank=1, match_source="fts", score=0.01,
            relevance=0.1,
        ),
    ]  # fmt: skip
    values: dict[str, Any] = {
        "event_id": prompt.event_id,
        "namespace": prompt.namespace,
        "session_id": prompt.session_id,
        "created_at": T0 + timedelta(minutes=minutes),
        "decision": "inject",
        "reason": "1 of 2 hits at or above 0.5",
        "mode": "hybrid",
        "min_relevance": 0.5,
        "latency_ms": 4.2,
        "bytes": 321,
        "injected": [candidates[0].record_id],
        "candidates": candidates,
    }
    return Retrieval(**{**values, **extra})


def _delete_event(storage: Storage, event_id: str) -> None:
    """Raw SQL: no API deletes events yet, and the audit's retention hangs on them."""
    if storage.backend == "sqlite":
        with storage._conns.write() as conn:  # type: ignore[attr-defined]
            conn.execute("DELETE FROM events WHERE event_id = ?", (event_id,))
    else:
        with storage._db.connection() as conn:  # type: ignore[attr-defined]
            conn.execute("DELETE FROM events WHERE event_id = %s", (event_id,))


def test_retrieval_round_trips(storage: Storage) -> None:
    prompt = event()
    storage.put_event(prompt)
    row = retrieval(prompt)
    storage.put_retrieval(row)
    assert storage.get_retrieval(row.retrieval_id) == row
    assert storage.get_retrieval(new_ulid()) is None


def test_retrieval_needs_its_prompt_event(storage: Storage) -> None:
    with pytest.raises(NotFoundError):
        storage.put_retrieval(retrieval(event()))
    assert storage.list_retrievals() == []


def test_list_retrievals_filters_and_orders_newest_first(storage: Storage) -> None:
    other_ns = "/actor/a/project/ab/"
    prompts = [event(session="s1"), event(session="s2"), event(session="s1", ns=other_ns)]
    storage.put_events(prompts)
    rows = [retrieval(p, minutes=i) for i, p in enumerate(prompts)]
    for row in rows:
        storage.put_retrieval(row)
    ids = lambda items: [r.retrieval_id for r in items]  # noqa: E731
    assert ids(storage.list_retrievals(NS)) == [rows[1].retrieval_id, rows[0].retrieval_id]
    assert ids(storage.list_retrievals(NS, session_id="s1")) == [rows[0].retrieval_id]
    assert ids(storage.list_retrievals("/actor/a/", limit=2)) == ids(rows[::-1][:2])
    assert ids(storage.list_retrievals(other_ns)) == [rows[2].retrieval_id]
    assert storage.list_retrievals("/actor/b/") == []


def test_retrievals_go_with_their_prompt_event(storage: Storage) -> None:
    kept, dropped = event(), event()
    storage.put_events([kept, dropped])
    keep, drop = retrieval(kept), retrieval(dropped, minutes=1)
    storage.put_retrieval(keep)
    storage.put_retrieval(drop)
    _delete_event(storage, dropped.event_id)
    assert storage.get_retrieval(drop.retrieval_id) is None
    assert [r.retrieval_id for r in storage.list_retrievals(NS)] == [keep.retrieval_id]


def test_retrieval_sessions_sum_their_rows_and_page_by_key(storage: Storage) -> None:
    prompts = [event(session="s1"), event(session="s2"), event(session="s1"), event(session="s3")]
    storage.put_events(prompts)
    rows = [
        retrieval(prompts[0], minutes=0),
        retrieval(prompts[1], minutes=1, decision="none", injected=[], bytes=0, latency_ms=2.0),
        retrieval(prompts[2], minutes=2, latency_ms=6.0),
        retrieval(prompts[3], minutes=3),
    ]
    for row in rows:
        storage.put_retrieval(row)
    first = storage.retrieval_sessions(NS, limit=2)
    assert [s.session_id for s in first] == ["s3", "s1"]
    s1 = first[1]
    assert (s1.prompts, s1.injected, s1.records, s1.bytes) == (2, 2, 2, 642)
    assert s1.latency_ms == pytest.approx(10.2)
    assert (s1.first_at, s1.last_at) == (rows[0].created_at, rows[2].created_at)
    rest = storage.retrieval_sessions(NS, limit=2, after=(s1.last_at, s1.session_id))
    assert [(s.session_id, s.prompts, s.injected) for s in rest] == [("s2", 1, 0)]
    # A session's prompts page by key too.
    page = storage.list_retrievals(NS, "s1", limit=1)
    more = storage.list_retrievals(NS, "s1", 1, after=(page[0].created_at, page[0].retrieval_id))
    assert [r.retrieval_id for r in page + more] == [rows[2].retrieval_id, rows[0].retrieval_id]
    totals = storage.retrieval_totals()
    assert (totals["prompts"], totals["injected"], totals["records"]) == (4, 3, 3)
    assert totals["bytes"] == 963 and storage.retrieval_totals("/actor/b/")["prompts"] == 0
    # Deleting the prompt events takes their rows out of the sums, and empty sessions go.
    _delete_event(storage, prompts[1].event_id)
    _delete_event(storage, prompts[2].event_id)
    assert [(s.session_id, s.prompts, s.bytes) for s in storage.retrieval_sessions(NS)] == [
        ("s3", 1, 321),
        ("s1", 1, 321),
    ]


def test_database_bytes_grow_with_what_is_stored(storage: Storage) -> None:
    before = storage.database_bytes()
    assert before > 0
    storage.put_events([event(text="x" * 2000) for _ in range(200)])
    assert storage.database_bytes() > before


# --- tokens and audit -------------------------------------------------------------------


def test_token_round_trip_revoke_and_touch(storage: Storage) -> None:
    from wakemark.shared import tokens

    token, secret = tokens.create(
        storage, actor="bob", project="p1", read_only=True, expires=timedelta(days=1),
        name="ci", who="cli:test",
    )  # fmt: skip
    found = storage.token_by_hash(tokens.hash_secret(secret))
    assert found == token
    assert found.expires_at - found.created_at == timedelta(days=1)
    assert storage.token_by_hash(tokens.hash_secret(secret + "x")) is None
    assert storage.list_tokens() == [token]

    storage.touch_token(token.token_id, T0)
    assert storage.list_tokens()[0].last_used_at == T0

    assert tokens.revoke(storage, token.token_id, "cli:test") is True
    assert tokens.revoke(storage, token.token_id, "cli:test") is False  # already revoked
    assert tokens.revoke(storage, "tok_unknown", "cli:test") is False
    revoked = storage.token_by_hash(tokens.hash_secret(secret))
    assert revoked is not None and revoked.revoked_at is not None
    assert not tokens.usable(revoked, datetime.now(UTC))

    audit = storage.list_audit()
    assert [(a.action, a.who, a.targets, a.count) for a in audit] == [
        ("token_revoke", "cli:test", (token.token_id,), 1),
        ("token_create", "cli:test", (token.token_id,), 1),
    ]
    assert audit[1].namespace == "/actor/bob/project/p1/"
    assert storage.list_audit(limit=1) == audit[:1]


def test_token_secret_is_not_stored(storage: Storage, backend_settings: Any) -> None:
    from wakemark.shared import tokens

    _, secret = tokens.create(
        storage, actor="bob", project=None, read_only=False, expires=None, name="n", who="t"
    )
    dump = _dump(backend_settings)
    assert tokens.hash_secret(secret) in dump
    assert secret not in dump and secret[4:] not in dump


def _dump(settings: Any) -> str:
    """Every value of every table, as text."""
    if settings.backend == "sqlite":
        import sqlite3

        conn = sqlite3.connect(settings.sqlite_path)
        try:
            tables = "SELECT name FROM sqlite_master WHERE type = 'table'"
            names = [r[0] for r in conn.execute(tables)]
            return "\n".join(repr(conn.execute(f'SELECT * FROM "{n}"').fetchall()) for n in names)
        finally:
            conn.close()
    import psycopg

    with psycopg.connect(settings.database_url) as conn:
        names = [
            r[0]
            for r in conn.execute(
                "SELECT table_name FROM information_schema.tables"
                " WHERE table_schema = current_schema()"
            )
        ]
        return "\n".join(repr(conn.execute(f'SELECT * FROM "{n}"').fetchall()) for n in names)


def test_audit_commits_with_the_action_or_not_at_all(storage: Storage) -> None:
    from wakemark.shared.storage import AuditEntry

    record = MemoryRecord(namespace=NS, title="doomed")
    storage.put_memory_record(record)
    entry = AuditEntry("bootstrap", "delete", NS, (record.record_id,), 1, T0)
    with pytest.raises(RuntimeError), storage.transaction() as tx:
        tx.delete_memory_records([record.record_id])
        tx.audit(entry)
        raise RuntimeError("abort")
    assert storage.get_memory_record(record.record_id) is not None
    assert storage.list_audit() == []
    with storage.transaction() as tx:
        tx.audit(entry)
        tx.delete_memory_records([record.record_id])
    assert storage.get_memory_record(record.record_id) is None
    [row] = storage.list_audit()
    assert row.id is not None and (row.at, row.who, row.targets) == (T0, "bootstrap", entry.targets)

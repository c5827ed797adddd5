"""Curation contract on each backend: corrections, filtered selection, event deletion, turns."""

from __future__ import annotations

from datetime import timedelta

import pytest

from tests.storage.conftest import NS, T0, event, record, vec
from wakemark.shared.retrieval.lexical import search_lexical
from wakemark.shared.storage import MemoryFilter, NotFoundError, Storage

OTHER = "/actor/a/project/b/"


def fulltext_docs(storage: Storage, term: str) -> int:
    """Documents the full-text index itself holds for ``term`` (not via the records)."""
    if storage.backend == "sqlite":
        conn = storage._conns.get()  # type: ignore[attr-defined]
        row = conn.execute("SELECT doc FROM memory_fts_vocab WHERE term = ?", (term,)).fetchone()
        return int(row[0]) if row else 0
    with storage._db.connection() as conn:  # type: ignore[attr-defined]
        row = conn.execute(
            "SELECT count(*) FROM memory_fts WHERE tsv @@ to_tsquery('simple', %s)", (term,)
        ).fetchone()
        return int(row[0])


def test_edit_stores_the_correction_reindexes_and_clears_the_embedding(storage: Storage) -> None:
    rec = record("wrongword title", summary="old summary", facts=["old fact"])
    storage.put_memory_record(rec)
    storage.put_embedding(rec.record_id, vec(1))
    edited = storage.edit_memory_record(rec.record_id, title="rightword title", facts=["new"])
    assert (edited.title, edited.summary, edited.facts) == (
        "rightword title",
        "old summary",
        ["new"],
    )
    assert edited.edited_at is not None
    assert storage.get_memory_record(rec.record_id) == edited
    assert not storage.has_embedding(rec.record_id)
    assert [r.record_id for r in storage.records_missing_embedding(10)] == [rec.record_id]
    assert search_lexical(storage, NS, "wrongword", 10) == []
    assert [h.record.record_id for h in search_lexical(storage, NS, "rightword", 10)] == [
        rec.record_id
    ]
    assert fulltext_docs(storage, "wrongword") == 0
    with pytest.raises(NotFoundError):
        storage.edit_memory_record("mr_00000000000000000000000000", title="x")


def test_find_memory_ids_applies_every_filter_and_nothing_else(storage: Storage) -> None:
    s1 = storage.put_events([event("prompt", session="s1"), event("tool_use", session="s1")])
    s2 = storage.put_event(event("prompt", session="s2"))
    old = record("old", minutes=0, observation_type="bugfix", source_event_ids=[s1[0].event_id])
    mid = record("mid", minutes=10, observation_type="note", source_event_ids=[s1[1].event_id])
    new = record("new", minutes=20, observation_type="bugfix", source_event_ids=[s2.event_id])
    elsewhere = record("elsewhere", ns=OTHER, minutes=5, observation_type="bugfix")
    for r in (old, mid, new, elsewhere):
        storage.put_memory_record(r)

    def ids(**kw: object) -> list[str]:
        return storage.find_memory_ids(MemoryFilter(**kw))  # type: ignore[arg-type]

    assert ids(namespace=NS) == [old.record_id, mid.record_id, new.record_id]
    assert ids(namespace="/actor/a/") == [
        old.record_id,
        elsewhere.record_id,
        mid.record_id,
        new.record_id,
    ]
    assert ids(namespace=NS, observation_type="bugfix") == [old.record_id, new.record_id]
    assert ids(namespace=NS, before=T0 + timedelta(minutes=10)) == [old.record_id]
    assert ids(namespace=NS, after=T0 + timedelta(minutes=10)) == [mid.record_id, new.record_id]
    assert ids(namespace=NS, session_id="s1") == [old.record_id, mid.record_id]
    assert ids(namespace=NS, session_id="s1", observation_type="note") == [mid.record_id]
    assert ids(namespace=NS, session_id="nope") == []


def test_delete_events_in_a_transaction_with_the_records(storage: Storage) -> None:
    results = storage.put_events([event("prompt"), event("tool_use")])
    kept = storage.put_event(event("prompt", session="s2"))
    rec = record("from the turn", source_event_ids=[r.event_id for r in results])
    storage.put_memory_record(rec)
    with storage.transaction() as tx:
        assert tx.delete_memory_records([rec.record_id]) == [rec.record_id]
        assert tx.delete_events([*rec.source_event_ids, "01K94FZ4H00000000000000000"]) == 2
    assert storage.get_memory_record(rec.record_id) is None
    assert all(storage.get_event(e) is None for e in rec.source_event_ids)
    assert storage.get_event(kept.event_id) is not None


def test_session_turns_say_what_became_of_each_turn(storage: Storage) -> None:
    first = storage.put_event(event("prompt", text="one")).turn_id
    second = storage.put_event(event("prompt", text="two")).turn_id
    storage.put_event(event("prompt", session="other"))
    assert first and second
    rec = record("kept from one")
    with storage.transaction() as tx:
        tx.put_memory_record(rec)
        tx.mark_turn_extracted(first, [rec.record_id])
    turns = storage.session_turns(NS, "s1")
    assert [t.turn_id for t in turns] == [first, second]
    assert (turns[0].closed, turns[0].extracted, turns[0].record_ids) == (
        True,
        True,
        [rec.record_id],
    )
    assert (turns[1].closed, turns[1].extracted, turns[1].record_ids) == (False, False, [])
    assert storage.session_turns(OTHER, "s1") == []


def test_count_events_counts_the_stored_ones(storage: Storage) -> None:
    stored = [r.event_id for r in storage.put_events([event("prompt"), event("tool_use")])]
    assert storage.count_events([*stored, stored[0], "01K94FZ4H00000000000000000"]) == 2
    assert storage.count_events([]) == 0


def test_sqlite_lists_one_namespace_s_events_off_the_index(sqlite_store: Storage) -> None:
    from wakemark.shared.storage import lexical
    from wakemark.shared.storage.sqlite import events as q

    params = {**lexical.namespace_range(NS), "session_id": None, "limit": 30}
    conn = sqlite_store._conns.get()  # type: ignore[attr-defined]
    plan = [r[3] for r in conn.execute("EXPLAIN QUERY PLAN " + q.LIST_EVENTS[True], params)]
    assert plan == ["SEARCH events USING INDEX events_by_namespace (namespace=?)"], plan

"""Upkeep (counts and sizes; export, import and retention have files of their own), the
storage contract, on each backend."""

from __future__ import annotations

from datetime import datetime

from tests.storage.conftest import NS, event, record, vec
from wakemark.shared.storage import Storage


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


def test_database_bytes_grow_with_what_is_stored(storage: Storage) -> None:
    before = storage.database_bytes()
    assert before > 0
    storage.put_events([event(text="x" * 2000) for _ in range(200)])
    assert storage.database_bytes() > before

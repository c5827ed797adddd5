"""Memory records, the storage contract: each test runs on each backend (``storage``)."""

from __future__ import annotations

from typing import Any

import pytest

from tests.storage.conftest import NS, record, vec
from wakemark.shared.models import MemoryRecord, new_record_id, new_ulid
from wakemark.shared.retrieval.lexical import search_lexical
from wakemark.shared.storage import DuplicateRecordError, NotFoundError, Storage


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


def test_a_stored_record_is_the_one_model_construct_builds() -> None:
    rec = record("Switched to WAL", facts=["busy_timeout 5000"], source_event_ids=[new_ulid()])
    fields = dict(rec)
    built, stored = MemoryRecord.model_construct(**fields), MemoryRecord.stored(**fields)
    assert stored == built
    assert stored.model_fields_set == built.model_fields_set == set(fields)
    assert stored.model_dump_json() == built.model_dump_json()
    assert stored.model_copy(update={"title": "x"}).title == "x" and stored.title == rec.title
    with pytest.raises(TypeError):
        MemoryRecord.stored(**{k: v for k, v in fields.items() if k != "edited_at"})


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


def test_sqlite_delete_leaves_no_fulltext_terms(sqlite_store: Any) -> None:
    rec = record("zyzzyva", summary="quokka", facts=["wombat"])
    sqlite_store.put_memory_record(rec)
    conn = sqlite_store._conns.get()
    vocab = "SELECT term FROM memory_fts_vocab WHERE term IN ('zyzzyva', 'quokka', 'wombat')"
    assert len(conn.execute(vocab).fetchall()) == 3
    sqlite_store.delete_memory_records([rec.record_id])
    assert conn.execute(vocab).fetchall() == []
    conn.execute("INSERT INTO memory_fts (memory_fts, rank) VALUES ('integrity-check', 1)")

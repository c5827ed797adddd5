"""The composition, on each backend: transactions and their hooks, the change hook, the
connection's life."""

from __future__ import annotations

from typing import Any

import pytest

from tests.storage.conftest import NS, event, record, vec
from wakemark.shared.models import new_record_id
from wakemark.shared.storage import Storage, open_storage


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


def test_ping_and_close_twice(backend_settings: Any) -> None:
    store = open_storage(backend_settings)
    store.ping()
    store.close()
    store.close()


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

        store.edit_memory_record(rec.record_id, title="edited")  # clears its vector
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

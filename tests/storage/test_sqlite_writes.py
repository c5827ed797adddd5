"""SQLite write path: one writer lock across threads and processes; WAL checkpoints run
off-thread, catching up under that lock."""

from __future__ import annotations

import fcntl
import os
import sqlite3
import stat
import threading
from datetime import UTC, datetime
from typing import Any

import pytest

from wakemark.shared.models import Event, new_ulid
from wakemark.shared.storage.sqlite import connection


def event(kind: str = "note", session: str = "s1") -> Event:
    return Event(
        event_id=new_ulid(),
        session_id=session,
        actor_id="a",
        namespace="/actor/a/project/a/",
        kind=kind,
        body={"type": "text", "content": "hello"},
        valid_time=datetime.now(UTC),
        source={"surface": "test"},
    )


def test_checkpoints_run_in_the_background_and_stop_on_close(
    sqlite_store: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(connection, "CHECKPOINT_COMMITS", 5)
    conn = sqlite_store._conns.get()
    assert conn.execute("PRAGMA wal_autocheckpoint").fetchone()[0] == connection.BACKSTOP_PAGES
    for i in range(40):
        sqlite_store.put_event(event("note", session=f"s{i}"))
    checkpointer = sqlite_store._conns._checkpointer
    for _ in range(10_000):  # bounded wait for the thread's first pass
        if checkpointer.passes:
            break
        threading.Event().wait(0.001)
    assert checkpointer.passes >= 1
    thread = checkpointer._thread
    assert thread is not None and thread.is_alive()
    sqlite_store.close()
    assert not thread.is_alive()


class _CountingLock:
    def __init__(self) -> None:
        self.lock = threading.RLock()
        self.entered = 0

    def __enter__(self) -> None:
        self.lock.acquire()
        self.entered += 1

    def __exit__(self, *exc: object) -> None:
        self.lock.release()


def test_a_long_wal_gets_a_catch_up_pass_under_the_write_lock(
    sqlite_store: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    checkpointer = sqlite_store._conns._checkpointer
    checkpointer._write_lock = lock = _CountingLock()
    side = connection.connect(sqlite_store.path)
    try:
        for i in range(10):
            sqlite_store.put_event(event("note", session=f"a{i}"))
        monkeypatch.setattr(connection, "CATCH_UP_FRAMES", 10**9)
        checkpointer._checkpoint(side)
        assert lock.entered == 0  # a short WAL: writers are never held up
        for i in range(10):
            sqlite_store.put_event(event("note", session=f"b{i}"))
        monkeypatch.setattr(connection, "CATCH_UP_FRAMES", 1)
        checkpointer._checkpoint(side)
        assert lock.entered == 1
    finally:
        side.close()


def _open_and_write(path: str, start: Any) -> None:
    start.wait()
    conn = connection.connect(path)
    conn.execute("CREATE TABLE IF NOT EXISTS t (x INTEGER)")
    conn.close()


@pytest.mark.slow
def test_processes_opening_a_new_database_at_once_all_get_wal(tmp_path: Any) -> None:
    # Switching to WAL answers "locked" at once, without the busy handler, when another
    # process opens the new file at the same moment (seen: 10 failures in 600 opens).
    import multiprocessing

    ctx = multiprocessing.get_context("fork")
    for i in range(30):
        path = str(tmp_path / f"race{i}.db")
        start = ctx.Event()
        procs = [ctx.Process(target=_open_and_write, args=(path, start)) for _ in range(3)]
        for p in procs:
            p.start()
        start.set()
        for p in procs:
            p.join(timeout=30)
        assert [p.exitcode for p in procs] == [0, 0, 0]
        assert connection.connect(path).execute("PRAGMA journal_mode").fetchone()[0] == "wal"


def _hold_write_lock(path: str, held: Any, release: Any) -> None:
    with connection.WriteLock(path):
        held.set()
        release.wait(30)


def test_writers_in_two_processes_queue_on_the_file_lock(sqlite_store: Any) -> None:
    # Before, a writer meeting another process's transaction slept in SQLite's busy
    # handler (1, 2, 5 ... 100 ms steps, whatever the holder did): the 40-100 ms ingest
    # p99 with two gunicorn workers. The other process here holds only the file lock, no
    # SQLite transaction, so a write that waits proves the lock is honoured.
    import multiprocessing

    ctx = multiprocessing.get_context("fork")
    held, release = ctx.Event(), ctx.Event()
    child = ctx.Process(target=_hold_write_lock, args=(str(sqlite_store.path), held, release))
    child.start()
    try:
        assert held.wait(30)
        done = threading.Event()

        def write() -> None:
            sqlite_store.put_event(event())
            done.set()

        writer = threading.Thread(target=write)
        writer.start()
        assert not done.wait(0.3)  # waiting for the other process, not failing
        release.set()
        assert done.wait(30)
        writer.join()
    finally:
        release.set()
        child.join(30)
    assert child.exitcode == 0
    assert len(sqlite_store.list_events()) == 1


def test_the_write_lock_is_reentrant_and_held_until_the_outermost_exit(tmp_path: Any) -> None:
    lock = connection.WriteLock(tmp_path / "wakemark.db")
    with lock:
        path = tmp_path / "wakemark.db-writer"
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
        probe = os.open(path, os.O_RDWR)  # another open file: flock conflicts with it

        def free() -> bool:
            try:
                fcntl.flock(probe, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                return False
            fcntl.flock(probe, fcntl.LOCK_UN)
            return True

        with lock:
            assert not free()
        assert not free()  # the inner exit left the outer hold in place
    assert free()
    os.close(probe)
    lock.close()


# --- reads that must not scan or sort a whole namespace -----------------------------------


@pytest.mark.parametrize("keyset", [False, True])
@pytest.mark.parametrize("pinned_first", [False, True])
def test_one_namespace_lists_in_index_order(
    sqlite_store: Any, pinned_first: bool, keyset: bool
) -> None:
    from wakemark.shared.storage import lexical
    from wakemark.shared.storage.sqlite import records as q

    after = {"after_at": "2025-01-01T00:00:00.000000+00:00", "after_id": "m", "after_pinned": 0}
    params = {**lexical.namespace_range("/actor/a/project/a/"), "limit": 10, **after}
    plan = _plan(sqlite_store, q.LIST_RECORDS[pinned_first, True, keyset], params)
    assert "TEMP B-TREE" not in plan and "SCAN memory_records" not in plan, plan
    if keyset:  # a deep page seeks past its key instead of walking the rows before it
        assert "created_at" in plan and "<" in plan, plan
    # A prefix over several namespaces still seeks its range of the index.
    prefix = {**lexical.namespace_range("/actor/a/"), "limit": 10, **after}
    assert "SCAN memory_records" not in _plan(
        sqlite_store, q.LIST_RECORDS[pinned_first, False, keyset], prefix
    )


def test_stats_and_counts_come_off_indexes(sqlite_store: Any) -> None:
    from wakemark.shared.storage import lexical
    from wakemark.shared.storage.sqlite import records, upkeep

    ns = lexical.namespace_range("/actor/a/project/a/")
    for sql in (upkeep.STATS, records.COUNT_RECORDS):
        plan = _plan(sqlite_store, sql, ns)
        assert "SCAN memory_records" not in plan and "SCAN events" not in plan, plan
    # Pending extraction starts from the unextracted turns (a partial index), so it costs
    # what is pending, not every event of the namespace.
    assert "USING INDEX turns_pending" in _plan(sqlite_store, upkeep.STATS, ns)


def _plan(sqlite_store: Any, sql: str, params: dict[str, Any]) -> str:
    rows = sqlite_store._conns.get().execute("EXPLAIN QUERY PLAN " + sql, params).fetchall()
    return "\n".join(str(r[3]) for r in rows)


def test_a_full_database_rolls_the_write_back_whole_and_the_connection_stays_usable(
    tmp_path: Any,
) -> None:
    from wakemark.shared.storage import StorageFullError

    conn = connection.connect(tmp_path / "full.db")
    conn.execute("CREATE TABLE t (x BLOB)")
    # SQLite's own cap on the file: past it a write fails with SQLITE_FULL, as on a full disk.
    pages = conn.execute("PRAGMA page_count").fetchone()[0]
    conn.execute(f"PRAGMA max_page_count = {pages + 2}")
    with pytest.raises(StorageFullError), connection.immediate(conn):
        conn.execute("INSERT INTO t VALUES (x'00')")
        conn.execute("INSERT INTO t VALUES (zeroblob(1000000))")
    assert not conn.in_transaction
    assert conn.execute("SELECT count(*) FROM t").fetchone()[0] == 0
    conn.execute("PRAGMA max_page_count = 1000000")
    with connection.immediate(conn):
        conn.execute("INSERT INTO t VALUES (x'00')")
    assert conn.execute("SELECT count(*) FROM t").fetchone()[0] == 1
    conn.close()


def test_a_threads_connection_is_closed_when_the_thread_ends(sqlite_store: Any) -> None:
    conns = sqlite_store._conns
    held: list[Any] = []
    worker = threading.Thread(target=lambda: held.append(conns.get()))
    worker.start()
    worker.join()
    (conn,) = held
    with pytest.raises(sqlite3.ProgrammingError):  # closed, its page cache freed
        conn.execute("SELECT 1")
    assert all(c is not conn for c, _ in conns._all)
    assert conns.get().execute("SELECT 1").fetchone()[0] == 1  # this thread's, still open
    sqlite_store.close()  # and closing the storage after is quiet

"""Per-thread, fork-aware SQLite connections, the process's write lock, WAL checkpoints."""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import sqlite3
import threading
import time
import weakref
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from wakemark.shared.storage.errors import StorageError, StorageFullError

BUSY_TIMEOUT_MS = 5000
CHECKPOINT_COMMITS = 100  # commits between two background checkpoints
CATCH_UP_FRAMES = 10000  # a WAL this long (~40 MB): one catch-up pass under the write lock
# The request connections' own auto-checkpoint: only a backstop, should the background
# thread fall behind (it keeps the WAL far shorter than this).
BACKSTOP_PAGES = 20000
log = logging.getLogger(__name__)

# Connections inherited across a fork: kept referenced so the garbage collector never
# runs sqlite3_close on the parent's database handles from inside the child.
_INHERITED: list[sqlite3.Connection] = []


def connect(path: Path | str) -> sqlite3.Connection:
    # isolation_level=None: the driver never opens transactions behind our back; every
    # write says BEGIN IMMEDIATE itself. check_same_thread=False only so that close()
    # may close other threads' connections; each one is still used by one thread.
    conn = sqlite3.connect(
        str(path), timeout=BUSY_TIMEOUT_MS / 1000, isolation_level=None, check_same_thread=False
    )
    conn.row_factory = sqlite3.Row
    conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
    _set_wal(conn)
    # NORMAL in WAL mode: a commit is durable across a process crash (the WAL is written
    # before COMMIT returns) and the database can never be corrupted; only an OS crash or
    # power loss may roll back the last commits. SQLite's recommended setting for WAL.
    conn.execute("PRAGMA synchronous = NORMAL")
    conn.execute("PRAGMA foreign_keys = ON")
    conn.execute(f"PRAGMA wal_autocheckpoint = {BACKSTOP_PAGES}")
    return conn


def _set_wal(conn: sqlite3.Connection) -> None:
    # Switching a new database to WAL needs an exclusive lock, and SQLite answers "locked"
    # at once (no busy handler) while a second process opens the file at the same moment.
    # Once set, WAL is stored in the file and later switches are no-ops.
    deadline = time.monotonic() + BUSY_TIMEOUT_MS / 1000
    while True:
        try:
            conn.execute("PRAGMA journal_mode = WAL")
            return
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or time.monotonic() > deadline:
                raise
            time.sleep(0.01)


@contextmanager
def immediate(conn: sqlite3.Connection) -> Iterator[sqlite3.Connection]:
    """A write transaction: takes the write lock up front so it cannot fail half-way on
    a lock upgrade; commits on success, rolls back on any exception, a failed COMMIT
    included. A full disk raises ``StorageFullError``, with nothing of the transaction
    kept."""
    try:
        conn.execute("BEGIN IMMEDIATE")
        try:
            yield conn
            conn.execute("COMMIT")
        except BaseException:
            # SQLite may have rolled back already (a full disk, an I/O error); a second
            # ROLLBACK would raise and hide the error that matters.
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise
    except sqlite3.OperationalError as exc:
        if exc.sqlite_errorcode == sqlite3.SQLITE_FULL:
            raise StorageFullError(f"sqlite: {exc}") from exc
        raise


class WriteLock:
    """The database's writer lock: a thread lock inside the process, ``flock(2)`` on
    ``<database>-writer`` across processes (gunicorn workers, the CLI).

    Without it, a writer meeting another process's transaction waits in SQLite's busy
    handler, which sleeps in growing steps whatever the holder does, and those sleeps
    make the tail latency of ingest. A writer blocked here sleeps in the kernel and wakes
    as soon as the holder lets go. Reentrant on one
    thread (the file lock is taken once, at the outermost level)."""

    def __init__(self, path: Path | str) -> None:
        self._path = f"{path}-writer"
        self._lock = threading.RLock()
        self._fd: int | None = None
        self._depth = 0

    def __enter__(self) -> None:
        self._lock.acquire()
        try:
            if self._depth == 0:
                if self._fd is None:
                    flags = os.O_RDWR | os.O_CREAT | os.O_CLOEXEC
                    self._fd = os.open(self._path, flags, 0o600)
                fcntl.flock(self._fd, fcntl.LOCK_EX)  # releases the GIL while it waits
        except BaseException:
            self._lock.release()
            raise
        self._depth += 1

    def __exit__(self, *exc: object) -> None:
        self._depth -= 1
        if self._depth == 0 and self._fd is not None:
            fcntl.flock(self._fd, fcntl.LOCK_UN)
        self._lock.release()

    def close(self) -> None:
        with self._lock:
            if self._fd is not None:
                os.close(self._fd)
                self._fd = None


class Checkpointer:
    """WAL checkpoints on a background thread, so no request pays for one.

    SQLite's auto-checkpoint runs inside the COMMIT that crosses 1,000 WAL pages, and
    that write stalls for the copy plus an fsync: the slowest writes of ingest. Here
    a thread started at the first busy moment checkpoints every CHECKPOINT_COMMITS commits
    without blocking writers. Under a steady stream writers keep appending while it
    copies, so the WAL never restarts from the beginning (a restart needs every frame
    copied when the next write begins) and grows, slowing reads; once it is long, one
    catch-up pass under the process's write lock copies the few frames left, so the next
    writer restarts it. That pass (mostly one fsync) is the only stall writers see.
    """

    def __init__(self, path: Path | str, write_lock: WriteLock) -> None:
        self._path = path
        self._write_lock = write_lock
        self._cond = threading.Condition()
        self._commits = 0
        self._thread: threading.Thread | None = None
        self._stopped = False
        self.passes = 0  # checkpoints run so far

    def committed(self) -> None:
        self._commits += 1  # a hint, not an invariant: a lost increment only delays a pass
        if self._commits >= CHECKPOINT_COMMITS:
            with self._cond:
                if self._thread is None and not self._stopped:
                    self._thread = threading.Thread(
                        target=self._loop, name="wakemark-sqlite-checkpoint", daemon=True
                    )
                    self._thread.start()
                self._cond.notify()

    def _loop(self) -> None:
        conn = connect(self._path)
        try:
            while True:
                with self._cond:
                    while self._commits < CHECKPOINT_COMMITS and not self._stopped:
                        self._cond.wait()
                    if self._stopped:
                        return
                    self._commits = 0
                try:
                    self._checkpoint(conn)
                    self.passes += 1
                except sqlite3.Error as exc:  # busy or I/O: the next pass (or backstop) retries
                    log.warning("WAL checkpoint failed: %r", exc)
        finally:
            conn.close()

    def _checkpoint(self, conn: sqlite3.Connection) -> None:
        _, frames, _ = conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
        if frames >= CATCH_UP_FRAMES:
            with self._write_lock:
                conn.execute("PRAGMA wal_checkpoint(PASSIVE)")

    def close(self) -> None:
        with self._cond:
            self._stopped = True
            self._cond.notify()
            thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=10)


class _Owner:
    """Held only in a thread's locals: tells when they are dropped (the thread ended)."""


class Connections:
    """One connection per thread, opened lazily. A connection made before a fork is
    never used (nor closed) by the child: it opens its own.

    Writers queue on the database's ``WriteLock`` before ``BEGIN IMMEDIATE``, so they
    never meet SQLite's busy handler and its growing sleeps. Only writers that bypass
    it (another program) still wait in that handler."""

    def __init__(self, path: Path | str) -> None:
        self._path = path
        self._lock = threading.Lock()
        self._all: list[tuple[sqlite3.Connection, threading.Thread]] = []
        self._closed = False
        self._reset(os.getpid())

    def _reset(self, pid: int) -> None:
        # At construction and in a forked child: a lock held by a parent's thread at fork
        # time would never be released.
        self._pid = pid
        self._local = threading.local()
        self._write_lock = WriteLock(self._path)
        self._checkpointer = Checkpointer(self._path, self._write_lock)

    def get(self) -> sqlite3.Connection:
        if self._closed:
            raise StorageError("storage is closed")
        pid = os.getpid()
        if pid != self._pid:
            with self._lock:
                if pid != self._pid:
                    _INHERITED.extend(conn for conn, _ in self._all)
                    self._all = []
                    self._reset(pid)
        conn: sqlite3.Connection | None = getattr(self._local, "conn", None)
        if conn is None:
            conn = connect(self._path)
            self._local.conn = conn
            # Dropped with the thread's locals when it ends: its connection (and page
            # cache) is closed then, rather than kept to the end of the process.
            self._local.owner = owner = _Owner()
            weakref.finalize(owner, self._thread_ended, conn, pid).atexit = False
            with self._lock:
                self._all.append((conn, threading.current_thread()))
        return conn

    def _thread_ended(self, conn: sqlite3.Connection, pid: int) -> None:
        if os.getpid() != pid:  # a forked child drops the parent's: never closed here
            return
        with self._lock:
            self._all = [(c, t) for c, t in self._all if c is not conn]
        conn.close()  # its thread ended: no statement of it runs

    @contextmanager
    def write(self) -> Iterator[sqlite3.Connection]:
        """A write transaction on this thread's connection, under the process's lock.
        Reentrant only in the sense that a nested call fails as SQLite would (no hang)."""
        conn = self.get()
        with self._write_lock:
            with immediate(conn):
                yield conn
            self._checkpointer.committed()

    @contextmanager
    def exclusive(self) -> Iterator[sqlite3.Connection]:
        """This thread's connection under the write lock, outside any transaction: for
        statements that cannot run inside one (VACUUM)."""
        conn = self.get()
        with self._write_lock:
            yield conn

    def close(self) -> None:
        with self._lock:
            self._closed = True
            conns, self._all = self._all, []
        if os.getpid() != self._pid:
            return
        self._checkpointer.close()
        self._write_lock.close()
        for conn, thread in conns:
            if thread is threading.current_thread() or not thread.is_alive():
                conn.close()
            else:
                # Closing a connection under a statement another thread is running frees
                # what that statement uses (a crash): it is interrupted instead, and closed
                # when its thread ends (``_thread_ended``), which it may have just done.
                with contextlib.suppress(sqlite3.ProgrammingError):  # closed meanwhile
                    conn.interrupt()

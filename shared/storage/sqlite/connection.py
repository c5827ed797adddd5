"""Per-thread, fork-aware SQLite connections and the write-transaction helper."""

from __future__ import annotations

import os
import sqlite3
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from shared.storage.base import StorageError

BUSY_TIMEOUT_MS = 5000

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
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute("PRAGMA synchronous = NORMAL")
    conn.execute("PRAGMA foreign_keys = ON")
    return conn


@contextmanager
def immediate(conn: sqlite3.Connection) -> Iterator[sqlite3.Connection]:
    """A write transaction: takes the write lock up front so it cannot fail half-way on
    a lock upgrade; commits on success, rolls back on any exception."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        yield conn
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT")


class Connections:
    """One connection per thread, opened lazily. A connection made before a fork is
    never used (nor closed) by the child: it opens its own."""

    def __init__(self, path: Path | str) -> None:
        self._path = path
        self._local = threading.local()
        self._lock = threading.Lock()
        self._all: list[sqlite3.Connection] = []
        self._pid = os.getpid()
        self._closed = False

    def get(self) -> sqlite3.Connection:
        if self._closed:
            raise StorageError("storage is closed")
        pid = os.getpid()
        if pid != self._pid:
            with self._lock:
                if pid != self._pid:
                    _INHERITED.extend(self._all)
                    self._pid, self._all, self._local = pid, [], threading.local()
        conn: sqlite3.Connection | None = getattr(self._local, "conn", None)
        if conn is None:
            conn = connect(self._path)
            self._local.conn = conn
            with self._lock:
                self._all.append(conn)
        return conn

    def close(self) -> None:
        with self._lock:
            self._closed = True
            conns, self._all = self._all, []
        if os.getpid() != self._pid:
            return
        for conn in conns:
            conn.close()

"""A lazily opened psycopg connection pool that reports connection failures as transient."""

from __future__ import annotations

import logging
import os
import threading
import time
import weakref
from collections.abc import Iterator
from contextlib import contextmanager

import psycopg
from pgvector.psycopg import register_vector
from psycopg_pool import ConnectionPool, PoolTimeout

from wakemark.shared.config import DEFAULT_DB_POOL_SIZE
from wakemark.shared.storage.errors import StorageError, TransientStorageError

log = logging.getLogger(__name__)

POOL_MIN = 1
# Seconds a call waits for a pooled connection (and for a new one to connect): short, so
# an API request answers 503 well inside an agent hook's 2 s timeout while Postgres is
# down (``WAKEMARK_DB_TIMEOUT_S``).
POOL_TIMEOUT_S = 1.0
CONNECT_TIMEOUT_S = 5
# A pooled connection idle this long (seconds) is checked with a round trip before it is
# handed out; one used more recently is handed out as it is. A search is two or three
# round trips, so a check on every checkout cost a quarter of them; a connection that
# died within the second fails its statement, and the pool is replaced (``Connector``).
CHECK_IDLE_S = 1.0

# The first statement of a transaction that reads in one snapshot (and whose xmin, for
# the caches held in the process, says what it has seen).
REPEATABLE_READ = "SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY"


def configure(conn: psycopg.Connection) -> None:
    """Per-connection setup, run once when the pool opens a connection."""
    register_vector(conn)
    conn.execute("SET TIME ZONE 'UTC'")
    # plainto_tsquery NOTICEs on stop-word-only terms; they are expected, not news.
    conn.execute("SET client_min_messages = warning")
    # Without it a namespace-filtered HNSW scan stops after ef_search candidates and
    # silently returns too few rows.
    conn.execute("SET hnsw.iterative_scan = relaxed_order")


# When each pooled connection went back to the pool (``time.monotonic()``), noted by
# ``Connector.connection`` as it hands it back. Not the pool's reset callback: with one,
# the pool returns every connection through a task on its worker thread, which then
# wakes and takes the GIL from the caller's next steps after each statement.
_returned: weakref.WeakKeyDictionary[psycopg.Connection, float] = weakref.WeakKeyDictionary()


def check(conn: psycopg.Connection) -> None:
    """The pool's check before handing a connection out: only one idle ``CHECK_IDLE_S``
    or more (or never returned yet) costs a round trip."""
    if time.monotonic() - _returned.get(conn, -CHECK_IDLE_S) >= CHECK_IDLE_S:
        ConnectionPool.check_connection(conn)


@contextmanager
def transient_errors() -> Iterator[None]:
    """Re-raise connection-level failures as ``TransientStorageError`` (jobs retry on it)."""
    try:
        yield
    except (psycopg.OperationalError, PoolTimeout) as exc:
        raise TransientStorageError(f"postgres: {exc}") from exc


class Connector:
    """Hands out autocommit connections; writes open ``conn.transaction()`` themselves."""

    def __init__(
        self, url: str, timeout: float = POOL_TIMEOUT_S, size: int = DEFAULT_DB_POOL_SIZE
    ) -> None:
        self.url = url
        self.timeout = timeout
        self.size = size
        self._lock = threading.Lock()
        self._pool: ConnectionPool | None = None
        self._pid = 0
        # After a call found no connection within ``timeout``, calls fail at once until
        # this monotonic time: a request making several calls (a prompt's search, then
        # its audit row) then waits once, not once per call, and still answers inside
        # the hooks' timeout.
        self._down_until = 0.0
        self._closed = False

    def _get_pool(self) -> ConnectionPool:
        with self._lock:
            # A leg or a load still running when its runtime closed must not reopen the
            # pool: nobody would close it again.
            if self._closed:
                raise StorageError("storage is closed")
            # A pool inherited through fork() has dead worker threads and sockets shared
            # with the parent: leave it alone and open a new one in this process.
            if self._pool is None or self._pid != os.getpid():
                pool: ConnectionPool = ConnectionPool(
                    self.url,
                    min_size=POOL_MIN,
                    max_size=self.size,
                    timeout=self.timeout,
                    open=False,
                    configure=configure,
                    check=check,
                    # prepare_threshold=None: no auto-prepared statements, so a plan
                    # is never pinned across planner-setting or data changes.
                    kwargs={
                        "autocommit": True,
                        "prepare_threshold": None,
                        "connect_timeout": max(1, min(CONNECT_TIMEOUT_S, int(self.timeout))),
                    },
                )
                pool.open(wait=False)
                self._pool, self._pid = pool, os.getpid()
            return self._pool

    @contextmanager
    def connection(self) -> Iterator[psycopg.Connection]:
        if time.monotonic() < self._down_until:
            raise TransientStorageError("postgres: unreachable a moment ago; retry shortly")
        pool = self._get_pool()
        lost = False
        try:
            with transient_errors(), pool.connection() as conn:
                try:
                    yield conn
                except psycopg.OperationalError:
                    lost = conn.broken  # the server went away, not just this statement
                    raise
                finally:
                    _returned[conn] = time.monotonic()
        except TransientStorageError as exc:
            unreachable = isinstance(exc.__cause__, PoolTimeout)
            if unreachable:
                self._down_until = time.monotonic() + self.timeout
            if lost or unreachable:
                self._discard(pool)
            raise

    def _discard(self, pool: ConnectionPool) -> None:
        """Replace a pool that failed to connect or lost its connection. The pool retries
        in the background with a doubling delay (1, 2, 4 ... s), so after an outage of a
        minute it could go on failing for another minute with the server back; a fresh
        pool tries at once on the next call."""
        with self._lock:
            if self._pool is not pool:
                return  # another thread replaced it already
            self._pool = None
        # Closing joins the pool's threads, which may be inside a connect: not on the
        # request's time. Callers still waiting on it fail at once (PoolClosed).
        threading.Thread(target=pool.close, name="wakemark-pool-close", daemon=True).start()
        log.info("postgres connection pool discarded after a connection failure")

    def close(self) -> None:
        with self._lock:
            self._closed = True
            pool, self._pool = self._pool, None
            if pool is not None and self._pid == os.getpid():
                pool.close()

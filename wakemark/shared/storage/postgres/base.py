"""What the Postgres concern files share: the pool, the change hook, the namespace
pattern and the lock and isolation statements more than one concern takes."""

from __future__ import annotations

from collections.abc import Callable

import psycopg

from wakemark.shared.config import DEFAULT_DB_POOL_SIZE, DEFAULT_TEXT_INDEX_RECORDS
from wakemark.shared.storage.base import Storage, Tx
from wakemark.shared.storage.postgres.connection import (
    POOL_TIMEOUT_S,
    Connector,
)
from wakemark.shared.storage.postgres.lexicon import Memory

ChangeHook = Callable[[set[str]], None]

# Namespace arguments are LIKE patterns built by ``lexical.namespace_pattern`` (``%`` = all).
NS = "LIKE %(ns)s ESCAPE '\\'"

# Serializes transactions that add or remove memory records (PostgresTxBase), per schema:
# the rows it guards (lexeme_df, current records) are the schema's own, so two wakemarks
# in one database (or two test schemas) never wait for each other.
LOCK_RECORDS = (
    "SELECT pg_advisory_xact_lock(hashtextextended('wakemark.records:' || current_schema(), 0))"
)

# Held shared by each writer of a namespace's events or retrieval rows, and exclusive by a
# move out of it (``Upkeep.move_namespace``), with %(namespace)s. Between the move's
# statements such a write would leave an event moved without its turn, or counted in the
# project it is not in; it waits for the move instead and writes into the old namespace.
NAMESPACE_LOCK = "hashtextextended('wakemark.namespace:' || current_schema() || %(namespace)s, 0)"


class PostgresTxBase(Tx):
    """One transaction. One that adds or removes records first waits for every other
    such transaction (``LOCK_RECORDS``), before it locks a turn or a row of lexeme_df.

    Each record inserted or deleted updates the lexeme_df rows of its words, in sorted
    order, then the one fts_doc_count row (triggers of migrations 0002 and 0004). Sorted
    order keeps two single-record statements from deadlocking, but a transaction of many
    records takes its locks in one sorted pass per record, so two such transactions
    (extraction jobs in two workers) deadlock on each other, and Postgres aborts one
    after its deadlock timeout, again and again. They all meet on the rows of common
    words and on fts_doc_count anyway, so waiting up front costs almost no concurrency."""

    def __init__(self, conn: psycopg.Connection) -> None:
        super().__init__()
        self.conn = conn
        self.changed: set[str] = set()  # namespaces whose embeddings changed
        self._records_locked = False

    def _lock_records(self) -> None:
        if not self._records_locked:
            self.conn.execute(LOCK_RECORDS)
            self._records_locked = True


class PostgresBase(Storage):
    backend = "postgres"
    vector_index = True

    def __init__(
        self,
        url: str,
        on_change: ChangeHook | None = None,
        timeout: float = POOL_TIMEOUT_S,
        pool_size: int = DEFAULT_DB_POOL_SIZE,
        lexicon: bool = True,  # False: full-text search through Postgres alone
        text_index_records: int = DEFAULT_TEXT_INDEX_RECORDS,
    ) -> None:
        """``timeout``: seconds to wait for a pooled connection before the call fails with
        ``TransientStorageError``; ``pool_size``: connections open at once, at most;
        ``text_index_records``: past this many records the full-text index is not held
        in the process."""
        self._db = Connector(url, timeout, pool_size)
        self._on_change = on_change
        self._memory = Memory(self._db.connection, text_index_records) if lexicon else None

"""What the SQLite concern files share: the connections, the change hook, the namespace
range and one-snapshot reads."""

from __future__ import annotations

import logging
import sqlite3
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from wakemark.shared.storage.base import Storage, Tx
from wakemark.shared.storage.lexicon import Index, Lexicon
from wakemark.shared.storage.sqlite import fts
from wakemark.shared.storage.sqlite.connection import Connections
from wakemark.shared.storage.sqlite.lexicon import in_database

log = logging.getLogger(__name__)

# A namespace or prefix is the range [:ns_lo, :ns_hi) of wakemark.shared.storage.lexical's
# namespace_range: exact for prefixes, and a range the namespace indexes can seek (a LIKE
# pattern would scan every row).
NS = "namespace >= :ns_lo AND namespace < :ns_hi"
R_NS = "r.namespace >= :ns_lo AND r.namespace < :ns_hi"
T_NS = "t.namespace >= :ns_lo AND t.namespace < :ns_hi"


class SqliteTxBase(Tx):
    def __init__(self, conn: sqlite3.Connection) -> None:
        super().__init__()
        self.conn = conn
        self.changed: set[str] = set()  # namespaces whose embeddings changed


class SqliteBase(Storage):
    backend = "sqlite"

    def __init__(
        self,
        path: Path | str,
        on_change: Callable[[set[str]], None] | None = None,
        lexicon: bool = True,  # False: full-text search through FTS5 alone
    ) -> None:
        self.path = Path(path)
        self._conns = Connections(self.path)
        self._on_change = on_change
        self._doc_freqs = fts.DocFreqs()
        self._lexicon: Lexicon[Index] | None = in_database(self.path) if lexicon else None

    def _read(self, sql: str, params: Any = ()) -> list[sqlite3.Row]:
        return self._conns.get().execute(sql, params).fetchall()

    def _notify(self, namespaces: set[str]) -> None:
        if not namespaces or self._on_change is None:
            return
        try:
            self._on_change(set(namespaces))
        except Exception:
            # The write is committed; failing the caller now would invite a retry of
            # work already done. A missed bump only delays cache refresh.
            log.exception("on_change hook failed for %s", sorted(namespaces))


@contextmanager
def snapshot(conn: sqlite3.Connection) -> Iterator[None]:
    if conn.in_transaction:  # already inside this thread's transaction: same snapshot
        yield
        return
    conn.execute("BEGIN")
    try:
        yield
    finally:
        conn.execute("COMMIT")

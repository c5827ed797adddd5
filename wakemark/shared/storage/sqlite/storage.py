"""``SqliteStorage``: the embedded backend (one file, WAL, per-thread connections), the
composition of its concern files."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from wakemark.shared.storage.base import Tx
from wakemark.shared.storage.sqlite.anchors import SqliteAnchors, SqliteAnchorsTx
from wakemark.shared.storage.sqlite.audit import SqliteAudit, SqliteAuditTx
from wakemark.shared.storage.sqlite.events import SqliteEvents, SqliteEventsTx
from wakemark.shared.storage.sqlite.history import SqliteHistory, SqliteHistoryTx
from wakemark.shared.storage.sqlite.records import SqliteRecords, SqliteRecordsTx
from wakemark.shared.storage.sqlite.search import SqliteSearch
from wakemark.shared.storage.sqlite.upkeep import SqliteUpkeep
from wakemark.shared.storage.sqlite.vectors import SqliteVectors, SqliteVectorsTx

PING = "SELECT 1"


class SqliteTx(
    SqliteEventsTx,
    SqliteRecordsTx,
    SqliteVectorsTx,
    SqliteAuditTx,
    SqliteAnchorsTx,
    SqliteHistoryTx,
):
    """A write transaction: the writes of every concern, on one connection."""


class SqliteStorage(
    SqliteEvents,
    SqliteRecords,
    SqliteVectors,
    SqliteSearch,
    SqliteAudit,
    SqliteUpkeep,
    SqliteAnchors,
    SqliteHistory,
):
    @contextmanager
    def transaction(self) -> Iterator[Tx]:
        with self._conns.write() as conn:
            tx = SqliteTx(conn)
            yield tx
        # Reached only after COMMIT: readers told to drop caches will see the new rows.
        self._notify(tx.changed)
        tx.committed()

    def ping(self) -> None:
        self._read(PING)

    def close(self) -> None:
        self._conns.close()

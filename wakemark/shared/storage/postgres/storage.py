"""``PostgresStorage``: psycopg 3 pool, tsvector full-text search, pgvector embeddings; the
composition of its concern files."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from wakemark.shared.storage.base import Tx
from wakemark.shared.storage.postgres.anchors import PostgresAnchors, PostgresAnchorsTx
from wakemark.shared.storage.postgres.audit import PostgresAudit, PostgresAuditTx
from wakemark.shared.storage.postgres.events import PostgresEvents, PostgresEventsTx
from wakemark.shared.storage.postgres.history import PostgresHistory, PostgresHistoryTx
from wakemark.shared.storage.postgres.records import PostgresRecords, PostgresRecordsTx
from wakemark.shared.storage.postgres.search import PostgresSearch
from wakemark.shared.storage.postgres.upkeep import PostgresUpkeep
from wakemark.shared.storage.postgres.vectors import PostgresVectors, PostgresVectorsTx

PING = "SELECT 1"


class PostgresTx(
    PostgresEventsTx,
    PostgresRecordsTx,
    PostgresVectorsTx,
    PostgresAuditTx,
    PostgresAnchorsTx,
    PostgresHistoryTx,
):
    """A write transaction: the writes of every concern, on one connection."""


class PostgresStorage(
    PostgresEvents,
    PostgresRecords,
    PostgresVectors,
    PostgresSearch,
    PostgresAudit,
    PostgresUpkeep,
    PostgresAnchors,
    PostgresHistory,
):
    @contextmanager
    def transaction(self) -> Iterator[Tx]:
        with self._db.connection() as conn:
            with conn.transaction():
                tx = PostgresTx(conn)
                yield tx
            # Only after COMMIT: other processes must see the change when they react.
            if tx.changed and self._on_change is not None:
                self._on_change(set(tx.changed))
        tx.committed()

    def ping(self) -> None:
        with self._db.connection() as conn:
            conn.execute(PING)

    def close(self) -> None:
        self._db.close()

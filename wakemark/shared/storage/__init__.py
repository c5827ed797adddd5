"""Storage: one port per concern (``ports/``) composed into ``Storage`` (``base``), two
backends of the same concern files, one factory.

Only ``open_storage`` knows that ``sqlite/`` and ``postgres/`` exist (a guard test keeps
every other module away from them).
"""

from __future__ import annotations

from collections.abc import Callable

from wakemark.shared.config import Settings
from wakemark.shared.storage.base import Storage, Transactions, Tx
from wakemark.shared.storage.errors import (
    ConflictError,
    DuplicateRecordError,
    EmbeddingDecodeError,
    MigrationDriftError,
    NotFoundError,
    StorageError,
    StorageFullError,
    StorageTimeoutError,
    TransientStorageError,
)
from wakemark.shared.storage.ports.anchors import Anchors, CodeAnchors, FileAnchor
from wakemark.shared.storage.ports.audit import (
    ApiToken,
    Audit,
    AuditEntry,
    AuditLog,
    RetrievalLog,
    RetrievalSession,
    Tokens,
)
from wakemark.shared.storage.ports.events import Events, PutEventResult, Turn, TurnInfo
from wakemark.shared.storage.ports.history import History, Version
from wakemark.shared.storage.ports.records import MemoryFilter, Page, PageKey, Records
from wakemark.shared.storage.ports.search import Match, Search, SearchQuery, TermStats, VectorHit
from wakemark.shared.storage.ports.upkeep import (
    DiskUsage,
    ImportBatch,
    ImportCounts,
    TurnRow,
    Upkeep,
)
from wakemark.shared.storage.ports.vectors import EmbeddingMatrix, EmbeddingModels, Vectors

ChangeHook = Callable[[set[str]], None]
"""Called after a commit that wrote embeddings or deleted records, with the namespaces
touched; the cache layer bumps their epochs from it."""

__all__ = [
    "Anchors",
    "ApiToken",
    "Audit",
    "AuditEntry",
    "AuditLog",
    "ChangeHook",
    "CodeAnchors",
    "DiskUsage",
    "ConflictError",
    "DuplicateRecordError",
    "EmbeddingDecodeError",
    "EmbeddingMatrix",
    "EmbeddingModels",
    "Events",
    "History",
    "FileAnchor",
    "ImportBatch",
    "ImportCounts",
    "Match",
    "MemoryFilter",
    "MigrationDriftError",
    "NotFoundError",
    "Page",
    "PageKey",
    "PutEventResult",
    "Records",
    "RetrievalLog",
    "RetrievalSession",
    "Search",
    "SearchQuery",
    "Storage",
    "StorageError",
    "StorageFullError",
    "StorageTimeoutError",
    "TermStats",
    "Tokens",
    "Transactions",
    "TransientStorageError",
    "Turn",
    "TurnInfo",
    "TurnRow",
    "Tx",
    "Upkeep",
    "VectorHit",
    "Vectors",
    "Version",
    "migrate",
    "missing_extensions",
    "open_storage",
]


def open_storage(settings: Settings, on_change: ChangeHook | None = None) -> Storage:
    """The backend the settings name; migrations must have run (``migrate``)."""
    if settings.database_url:
        from wakemark.shared.storage.postgres import PostgresStorage

        return PostgresStorage(
            settings.database_url,
            on_change=on_change,
            timeout=settings.db_timeout_s,
            pool_size=settings.db_pool_size,
            text_index_records=settings.text_index_records,
        )
    from wakemark.shared.storage.sqlite import SqliteStorage

    return SqliteStorage(settings.sqlite_path, on_change=on_change)


def migrate(settings: Settings) -> list[str]:
    """Apply pending migrations of the configured backend; returns the names applied."""
    if settings.database_url:
        from wakemark.shared.storage.postgres import migrate_postgres

        return migrate_postgres(settings.database_url)
    from wakemark.shared.storage.sqlite import migrate_sqlite

    return migrate_sqlite(settings.sqlite_path)


def missing_extensions(settings: Settings) -> tuple[list[str], str]:
    """Postgres only: the extensions the database lacks, and the SQL a superuser would run
    to create them; raises if the database cannot be reached. SQLite lacks none."""
    if not settings.database_url:
        return [], ""
    from wakemark.shared.storage.postgres.migrate import missing_extensions_at, superuser_sql

    missing = missing_extensions_at(settings.database_url)
    return missing, superuser_sql(missing)

"""The SQLite backend: ``SqliteStorage`` and its migration runner."""

from shared.storage.sqlite.migrate import migrate_sqlite
from shared.storage.sqlite.storage import SqliteStorage

__all__ = ["SqliteStorage", "migrate_sqlite"]

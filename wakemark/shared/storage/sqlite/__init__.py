"""The SQLite backend: ``SqliteStorage`` and its migration runner."""

from wakemark.shared.storage.sqlite.migrate import migrate_sqlite
from wakemark.shared.storage.sqlite.storage import SqliteStorage

__all__ = ["SqliteStorage", "migrate_sqlite"]

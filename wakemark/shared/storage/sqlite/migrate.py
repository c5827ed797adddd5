"""Applies ``migrations/sqlite`` through the shared runner, under ``BEGIN IMMEDIATE``."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from wakemark.shared.models import utcnow
from wakemark.shared.storage import migrator
from wakemark.shared.storage.sqlite.codec import ts
from wakemark.shared.storage.sqlite.connection import connect, immediate

CREATE_TABLE = """
CREATE TABLE IF NOT EXISTS _migrations (
    id INTEGER PRIMARY KEY,
    name TEXT NOT NULL,
    applied_at TEXT NOT NULL
) STRICT
"""
RECORDED = "SELECT id, name FROM _migrations"
RECORD = "INSERT INTO _migrations (id, name, applied_at) VALUES (?, ?, ?)"


class SqliteMigrations:
    """The runner's adapter: the write lock of BEGIN IMMEDIATE makes a second runner
    wait (busy_timeout) until the first has committed, then see its rows."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self.conn = conn

    @contextmanager
    def locked(self) -> Iterator[None]:
        with immediate(self.conn):
            yield

    def ensure_table(self) -> None:
        self.conn.execute(CREATE_TABLE)

    def recorded(self) -> dict[int, str]:
        return {row[0]: row[1] for row in self.conn.execute(RECORDED)}

    def execute(self, sql: str) -> None:
        # Not executescript(): it COMMITs first, which would split the migration from
        # its _migrations row. complete_statement() knows trigger bodies contain ';'.
        statement = ""
        for line in sql.splitlines(keepends=True):
            statement += line
            if sqlite3.complete_statement(statement):
                self.conn.execute(statement)
                statement = ""
        if statement.strip() and not _only_comments(statement):
            self.conn.execute(statement)

    def record(self, migration: migrator.Migration) -> None:
        self.conn.execute(RECORD, (migration.id, migration.name, ts(utcnow())))


def _only_comments(text: str) -> bool:
    return all(not line.strip() or line.strip().startswith("--") for line in text.splitlines())


def migrate_sqlite(path: Path | str, migrations_dir: Path | None = None) -> list[str]:
    """Apply pending migrations to the database at ``path``; returns the labels applied."""
    directory = migrations_dir or migrator.default_directory("sqlite")
    Path(path).parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    conn = connect(path)
    try:
        return migrator.run(SqliteMigrations(conn), directory)
    finally:
        conn.close()

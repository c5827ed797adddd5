"""Postgres adapter of the shared migration runner (advisory-locked transactions)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import psycopg

from wakemark.shared.storage import migrator
from wakemark.shared.storage.postgres.connection import CONNECT_TIMEOUT_S, transient_errors

# One lock per schema, so two processes migrating the same database take turns while
# unrelated schemas (tests) do not wait for each other.
LOCK = "SELECT pg_advisory_xact_lock(hashtextextended('wakemark.migrate:' || current_schema(), 0))"
ENSURE_TABLE = """
CREATE TABLE IF NOT EXISTS _migrations (
    id         integer PRIMARY KEY,
    name       text NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now()
)
"""
RECORDED = "SELECT id, name FROM _migrations"
RECORD = "INSERT INTO _migrations (id, name) VALUES (%s, %s)"


class PostgresMigrationAdapter:
    def __init__(self, conn: psycopg.Connection) -> None:
        self.conn = conn

    @contextmanager
    def locked(self) -> Iterator[None]:
        with self.conn.transaction():
            self.conn.execute(LOCK)
            yield

    def ensure_table(self) -> None:
        self.conn.execute(ENSURE_TABLE)

    def recorded(self) -> dict[int, str]:
        return dict(self.conn.execute(RECORDED).fetchall())

    def execute(self, sql: str) -> None:
        # No parameters: psycopg sends it as one simple query, so a file may hold many
        # statements (and dollar-quoted function bodies).
        self.conn.execute(sql)

    def record(self, migration: migrator.Migration) -> None:
        self.conn.execute(RECORD, (migration.id, migration.name))


def migrate_postgres(url: str, migrations_dir: Path | None = None) -> list[str]:
    """Apply pending Postgres migrations; returns the labels applied."""
    directory = migrations_dir or migrator.default_directory("postgres")
    with (
        transient_errors(),
        psycopg.connect(url, autocommit=True, connect_timeout=CONNECT_TIMEOUT_S) as conn,
    ):
        return migrator.run(PostgresMigrationAdapter(conn), directory)

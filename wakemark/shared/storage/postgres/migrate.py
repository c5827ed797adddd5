"""Postgres adapter of the shared migration runner (advisory-locked transactions)."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import psycopg
from psycopg import errors

from wakemark.shared.storage import migrator
from wakemark.shared.storage.errors import MissingExtensionError
from wakemark.shared.storage.postgres.connection import CONNECT_TIMEOUT_S, transient_errors

log = logging.getLogger("wakemark.migrate")

# Database-wide, so created once (in the first schema of the search_path) and never by
# a migration file: unaccent is trusted (a database owner may create it), vector is not
# (only a superuser may), and a migration must not half-fail on that.
EXTENSIONS = ("vector", "unaccent", "pg_trgm", "btree_gin")

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


def missing_extensions(conn: psycopg.Connection) -> list[str]:
    rows = conn.execute(
        "SELECT extname FROM pg_extension WHERE extname = ANY(%s)", (list(EXTENSIONS),)
    ).fetchall()
    installed = {row[0] for row in rows}
    return [name for name in EXTENSIONS if name not in installed]


def missing_extensions_at(url: str) -> list[str]:
    """The extensions the database at ``url`` lacks; raises if it cannot be reached."""
    with psycopg.connect(url, autocommit=True, connect_timeout=CONNECT_TIMEOUT_S) as conn:
        return missing_extensions(conn)


def superuser_sql(names: list[str]) -> str:
    return " ".join(f"CREATE EXTENSION IF NOT EXISTS {name};" for name in names)


def ensure_extensions(conn: psycopg.Connection) -> list[str]:
    """Create the missing extensions this role may create; returns their names. For the
    rest, raise ``MissingExtensionError`` with the one line a superuser must run."""
    created: list[str] = []
    refused: list[str] = []
    unavailable: list[str] = []
    for name in missing_extensions(conn):
        try:
            conn.execute(f"CREATE EXTENSION IF NOT EXISTS {name}")  # a name from EXTENSIONS
            created.append(name)
        except errors.UniqueViolation:
            pass  # a concurrent `wakemark migrate` created it first
        except errors.InsufficientPrivilege:
            refused.append(name)
        except (errors.UndefinedFile, errors.FeatureNotSupported):  # PG <= 15, >= 16
            unavailable.append(name)
    if created:
        log.info("created extension(s) %s", ", ".join(created))
    where = f"database {conn.info.dbname!r}"
    if unavailable:
        raise MissingExtensionError(
            f"extension {', '.join(unavailable)} is not installed on the Postgres server of "
            f"{where}: install it (pgvector: scripts/install-pgvector.sh), then as a "
            f"superuser run in that database: {superuser_sql(unavailable + refused)}"
        )
    if refused:
        raise MissingExtensionError(
            f"extension {', '.join(refused)} missing and role {conn.info.user!r} may not "
            f"create it: as a superuser, run in {where}: {superuser_sql(refused)}"
        )
    return created


def migrate_postgres(url: str, migrations_dir: Path | None = None) -> list[str]:
    """Create the extensions (when the role may), then apply pending Postgres migrations;
    returns the labels applied."""
    directory = migrations_dir or migrator.default_directory("postgres")
    with (
        transient_errors(),
        psycopg.connect(url, autocommit=True, connect_timeout=CONNECT_TIMEOUT_S) as conn,
    ):
        ensure_extensions(conn)
        return migrator.run(PostgresMigrationAdapter(conn), directory)

"""Fixtures of the storage tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from shared.storage.postgres import PostgresStorage, migrate_postgres


@pytest.fixture
def store(pg_url: str) -> Iterator[PostgresStorage]:
    """A migrated Postgres storage in a fresh schema (SQLite-only modules define their own)."""
    migrate_postgres(pg_url)
    storage = PostgresStorage(pg_url)
    yield storage
    storage.close()

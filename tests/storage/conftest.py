"""Fixtures of the storage tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from wakemark.shared.config import Settings, prepare_home
from wakemark.shared.storage import Storage, migrate, open_storage
from wakemark.shared.storage.postgres import PostgresStorage, migrate_postgres


@pytest.fixture
def store(pg_url: str) -> Iterator[PostgresStorage]:
    """A migrated Postgres storage in a fresh schema."""
    migrate_postgres(pg_url)
    storage = PostgresStorage(pg_url)
    yield storage
    storage.close()


@pytest.fixture
def sqlite_store(settings: Settings) -> Iterator[Storage]:
    """A migrated SQLite storage in the test's home."""
    prepare_home(settings)
    migrate(settings)
    storage = open_storage(settings)
    yield storage
    storage.close()

"""Postgres backend: tsvector + pgvector over a psycopg 3 pool (deployment shape)."""

from wakemark.shared.storage.postgres.migrate import migrate_postgres
from wakemark.shared.storage.postgres.storage import PostgresStorage

__all__ = ["PostgresStorage", "migrate_postgres"]

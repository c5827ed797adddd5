"""The errors storage raises, whichever backend and concern."""

from __future__ import annotations


class StorageError(Exception):
    """Base class of storage errors."""


class DuplicateRecordError(StorageError):
    """``put_memory_record`` was given a ``record_id`` that already exists."""


class NotFoundError(StorageError):
    """The named row does not exist."""


class ConflictError(StorageError):
    """The write would break a rule the stored rows keep (one open turn per session of a
    project): nothing of it was written; the message names what clashed."""


class EmbeddingDecodeError(StorageError):
    """A stored embedding has the wrong size; the message names the record."""


class MigrationDriftError(StorageError):
    """A migration recorded in ``_migrations`` differs from the one in the code."""


class MissingExtensionError(StorageError):
    """Postgres lacks an extension this role may not create; the message names the SQL."""


class SwapBlockedError(StorageError):
    """A rebuild's swap found the records' table held by another transaction every time
    it tried; the message names the holders."""


class TransientStorageError(StorageError):
    """A connection-level failure worth retrying (database down, restarting)."""


class StorageFullError(StorageError):
    """The disk holding the database is full: the write was rolled back whole."""


class StorageTimeoutError(StorageError):
    """A read ran past the time it was given and was cancelled."""

"""Forward-only, drift-fatal runner of numbered SQL migrations, shared by both backends.

The files live in ``migrations/<backend>/``; how they are numbered and paired across the
backends is in ``migrations/README.md``.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import wakemark
from wakemark.shared.storage.errors import MigrationDriftError

MIGRATIONS_ROOT = Path(wakemark.__file__).parent / "migrations"  # package data in the wheel
_FILE = re.compile(r"^(\d{4})_([a-z0-9_]+)\.sql$")


@dataclass(frozen=True)
class Migration:
    id: int
    name: str  # the part after the number: 0001_initial.sql -> "initial"
    sql: str

    @property
    def label(self) -> str:
        return f"{self.id:04d}_{self.name}"


class MigrationAdapter(Protocol):
    """What a backend supplies. ``locked()`` is one transaction that no other runner can
    hold at the same time (SQLite: ``BEGIN IMMEDIATE``; Postgres: a transaction taking
    ``pg_advisory_xact_lock``); it commits on success and rolls back on error. The other
    methods run inside it."""

    def locked(self) -> AbstractContextManager[None]: ...

    def ensure_table(self) -> None:
        """``CREATE TABLE IF NOT EXISTS _migrations (id, name, applied_at)``."""

    def recorded(self) -> dict[int, str]: ...

    def execute(self, sql: str) -> None:
        """Run one migration file's statements in the current transaction."""

    def record(self, migration: Migration) -> None: ...


def default_directory(backend: str) -> Path:
    return MIGRATIONS_ROOT / backend


def discover(directory: Path) -> list[Migration]:
    """The directory's migrations in id order; a misnamed ``.sql`` file is an error."""
    found: dict[int, Migration] = {}
    for path in sorted(directory.glob("*.sql")):
        match = _FILE.match(path.name)
        if not match:
            raise ValueError(f"migration file {path.name!r} is not named NNNN_name.sql")
        number = int(match.group(1))
        if number in found:
            raise ValueError(f"two migrations numbered {number:04d} in {directory}")
        found[number] = Migration(number, match.group(2), path.read_text(encoding="utf-8"))
    return [found[n] for n in sorted(found)]


def check_drift(recorded: dict[int, str], migrations: list[Migration]) -> None:
    by_id = {m.id: m for m in migrations}
    last = max(by_id, default=0)
    for number, name in sorted(recorded.items()):
        known = by_id.get(number)
        if known is None and number > last:
            raise MigrationDriftError(
                f"the database was written by a newer wakemark (its migration"
                f" {number:04d}_{name} is unknown to {wakemark.__version__}): upgrade wakemark"
            )
        if known is None:
            raise MigrationDriftError(
                f"migration {number:04d}_{name} is recorded in the database but this"
                f" installation has no such file: reinstall wakemark {wakemark.__version__}"
            )
        if known.name != name:
            raise MigrationDriftError(
                f"migration {number:04d} is recorded as {name!r} but the file is {known.label!r}"
            )


def run(adapter: MigrationAdapter, directory: Path) -> list[str]:
    """Apply pending migrations, each in its own locked transaction with its
    ``_migrations`` row; returns the labels applied (empty when up to date)."""
    migrations = discover(directory)
    applied: list[str] = []
    for migration in _with_final_check(migrations):
        with adapter.locked():
            adapter.ensure_table()
            recorded = adapter.recorded()
            # Checked under the lock every time: another runner may have moved on.
            check_drift(recorded, migrations)
            if migration is None or migration.id in recorded:
                continue
            adapter.execute(migration.sql)
            adapter.record(migration)
        applied.append(migration.label)
    return applied


def _with_final_check(migrations: list[Migration]) -> Iterator[Migration | None]:
    # One extra pass with nothing to apply, so drift is checked even when the code has
    # no migrations left to run (or none at all).
    yield from migrations
    yield None

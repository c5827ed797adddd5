"""``wakemark migrate``: apply pending migrations of the configured backend."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from wakemark.shared.runtime import Runtime


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.epilog = "Backend from WAKEMARK_DATABASE_URL (unset: SQLite in $WAKEMARK_HOME)."


def run(args: argparse.Namespace) -> int:
    from wakemark.shared.config import Settings, prepare_home
    from wakemark.shared.storage import migrate

    settings = Settings.from_env()
    if settings.backend == "sqlite":
        prepare_home(settings)
    applied = migrate(settings)
    print(f"applied {len(applied)} migration(s)" + (": " + ", ".join(applied) if applied else ""))
    return 0


def migrated_runtime() -> Runtime:
    """The configured database, its pending migrations applied: every command that reads
    or writes it goes through here, so none meets a home without tables, and a database
    written by a newer wakemark stops it with one line (``MigrationDriftError``)."""
    from wakemark.shared.runtime import Runtime
    from wakemark.shared.storage import migrate

    runtime = Runtime.build()  # creates the data directory on SQLite
    migrate(runtime.settings)
    return runtime

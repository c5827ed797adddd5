"""``wakemark migrate``: apply pending migrations of the configured backend."""

from __future__ import annotations

import argparse


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

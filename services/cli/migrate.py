"""``engram migrate``: apply pending migrations of the configured backend."""

from __future__ import annotations

import argparse


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.epilog = "Backend from ENGRAM_DATABASE_URL (unset: SQLite in $ENGRAM_HOME)."


def run(args: argparse.Namespace) -> int:
    from shared.config import Settings, prepare_home
    from shared.storage import migrate

    settings = Settings.from_env()
    if settings.backend == "sqlite":
        prepare_home(settings)
    applied = migrate(settings)
    print(f"applied {len(applied)} migration(s)" + (": " + ", ".join(applied) if applied else ""))
    return 0

"""``wakemark beat``: the Celery beat scheduler (sweep and backfill every sweep interval)."""

from __future__ import annotations

import argparse
import sys


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--schedule", default=None, help="beat state file (default: $WAKEMARK_HOME/celerybeat)"
    )
    parser.add_argument("--loglevel", default=None, help="default: WAKEMARK_LOG_LEVEL")


def run(args: argparse.Namespace) -> int:
    from wakemark.services.worker import create_celery
    from wakemark.shared.config import Settings, prepare_home

    settings = Settings.from_env()
    if not settings.redis_url:
        print(
            "wakemark: beat needs WAKEMARK_REDIS_URL (unset means in-process jobs)", file=sys.stderr
        )
        return 2
    schedule = args.schedule or str(prepare_home(settings) / "celerybeat")
    app = create_celery(settings)
    app.Beat(schedule=schedule, loglevel=(args.loglevel or settings.log_level).upper()).run()
    return 0

"""``wakemark worker``: run a Celery worker (deployment mode, needs WAKEMARK_REDIS_URL)."""

from __future__ import annotations

import argparse
import os
import sys


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "-Q",
        "--queues",
        default="extraction,embedding,backfill",
        help="comma-separated queues to consume (default: all three)",
    )
    parser.add_argument("--concurrency", type=int, default=None, help="worker processes")
    parser.add_argument("--loglevel", default=None, help="default: WAKEMARK_LOG_LEVEL")
    parser.add_argument("--pool", default=None, help="Celery pool (prefork, solo, threads)")
    parser.add_argument(
        "-n",
        "--hostname",
        default=None,
        help="node name (default: wakemark-<pid>@<host>, unique per worker on one host)",
    )


def run(args: argparse.Namespace) -> int:
    from wakemark.services.worker import create_celery
    from wakemark.shared.config import Settings

    settings = Settings.from_env()
    if not settings.redis_url:
        print(
            "wakemark: worker needs WAKEMARK_REDIS_URL (unset means in-process jobs)",
            file=sys.stderr,
        )
        return 2
    argv = ["worker", "-Q", args.queues, "--loglevel", args.loglevel or settings.log_level]
    argv += ["--hostname", args.hostname or f"wakemark-{os.getpid()}@%h"]
    # Workers never talk to each other (no remote control): skip the start-up chatter.
    argv += ["--without-mingle", "--without-gossip"]
    if args.concurrency:
        argv += ["--concurrency", str(args.concurrency)]
    if args.pool:
        argv += ["--pool", args.pool]
    create_celery(settings).worker_main(argv)
    return 0

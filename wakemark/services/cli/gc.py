"""``wakemark gc``: the retention pass now, then give the freed space back.

The pass is the periodic retention job run to the end (``shared/retention.py``: trim past
``WAKEMARK_EVENT_RETENTION_DAYS``, retrieval audit rows of that age, expiry past
``WAKEMARK_EVENT_EXPIRY_DAYS``, records past ``WAKEMARK_RECORD_RETENTION_DAYS``);
compaction is the backend's ``Storage.compact``.
"""

from __future__ import annotations

import argparse
import sys


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--days",
        type=int,
        default=None,
        help="trim turns extracted more than this many days ago"
        " (default WAKEMARK_EVENT_RETENTION_DAYS; 0 trims nothing)",
    )
    parser.add_argument("--no-compact", action="store_true", help="trim only")


def run(args: argparse.Namespace) -> int:
    from wakemark.services.cli.migrate import migrated_runtime
    from wakemark.services.cli.stats import human
    from wakemark.shared.retention import expire

    runtime = migrated_runtime()
    try:
        days = runtime.settings.event_retention_days if args.days is None else args.days
        if days < 0:
            print("wakemark gc: --days must be 0 or more", file=sys.stderr)
            return 2
        expiry = runtime.settings.event_expiry_days
        record_days = runtime.settings.record_retention_days
        done = expire(runtime.storage, days, expiry, record_days)
        if days == 0:
            print("retention is off (0 days): no event trimmed")
        else:
            print(
                f"trimmed {done['events']:,} event bodies of {done['turns']:,} turns extracted"
                f" over {days} days ago: {human(done['bytes_before'])} ->"
                f" {human(done['bytes_after'])}; {done['retrievals']:,} retrieval audit"
                " row(s) of that age deleted"
            )
        if expiry:
            print(
                f"expired {done['expired_turns']:,} turns extracted over {expiry} days ago"
                f" ({done['expired_events']:,} event stubs)"
            )
        if record_days:
            print(
                f"deleted {done['records']:,} unpinned records created over {record_days} days ago"
            )
        if not args.no_compact:
            for line in runtime.storage.compact():
                print(line)
    finally:
        runtime.close()
    return 0

"""``wakemark audit``: the newest entries of the audit log (destructive actions)."""

from __future__ import annotations

import argparse

from wakemark.services.cli.args import positive_int


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--limit", type=positive_int, default=50, help="how many entries (50)")


def run(args: argparse.Namespace) -> int:
    from wakemark.services.cli.token import open_database, print_table, when

    with open_database() as storage:
        entries = storage.list_audit(args.limit)
    rows = [("when", "who", "action", "namespace", "count", "targets")]
    for e in entries:
        targets = ",".join(e.targets[:5]) + (",..." if len(e.targets) > 5 else "")
        rows.append((when(e.at), e.who, e.action, e.namespace or "-", str(e.count), targets))
    print_table(rows)
    return 0

"""``wakemark export``: write memories (and optionally events, vectors) as JSON Lines.

The format is ``wakemark.shared.transfer``'s (docs/data.md, "Export format"); the file goes to
stdout, progress to stderr.
"""

from __future__ import annotations

import argparse
import sys

from wakemark.services.cli.args import namespace_prefix


def add_arguments(parser: argparse.ArgumentParser) -> None:
    which = parser.add_mutually_exclusive_group()
    which.add_argument(
        "--namespace", type=namespace_prefix, help="a namespace, or an actor prefix /actor/<a>/"
    )
    which.add_argument("--all", action="store_true", help="every namespace")
    parser.add_argument("--events", action="store_true", help="include turns and raw events")
    parser.add_argument("--vectors", action="store_true", help="include embeddings (base64)")


def run(args: argparse.Namespace) -> int:
    from wakemark.services.cli.backfill import ProgressBar
    from wakemark.services.cli.migrate import migrated_runtime
    from wakemark.shared.transfer import export_lines

    if not args.all and not args.namespace:
        print("wakemark export: give --namespace NS or --all", file=sys.stderr)
        return 2
    if sys.stdout.isatty():
        print("wakemark export: redirect the output to a file (> file.jsonl)", file=sys.stderr)
        return 2
    runtime = migrated_runtime()
    progress = ProgressBar(label="exporting")
    out = sys.stdout.buffer
    try:
        for line in export_lines(
            runtime.storage, args.namespace, args.events, args.vectors, progress
        ):
            out.write(line)
        out.flush()
    finally:
        progress.finish()
        runtime.close()
    return 0

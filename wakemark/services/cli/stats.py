"""``wakemark stats``: counts, and with ``--disk`` the database's size by table and project."""

from __future__ import annotations

import argparse
import json

from wakemark.services.cli.args import namespace_prefix


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--namespace", type=namespace_prefix, help="counts of this namespace or prefix"
    )
    parser.add_argument("--disk", action="store_true", help="size by table and by project")
    parser.add_argument("--json", action="store_true", help="machine-readable output")


def human(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if abs(n) < 1024 or unit == "GB":
            return f"{n:,.0f} {unit}" if unit == "B" else f"{n:,.1f} {unit}"
        n /= 1024
    return f"{n:,.1f} TB"


def run(args: argparse.Namespace) -> int:
    from wakemark.services.cli.migrate import migrated_runtime

    runtime = migrated_runtime()
    try:
        out: dict = {"counts": runtime.storage.stats(args.namespace)}
        if args.disk:
            usage = runtime.storage.disk_usage()
            out["disk"] = {
                "total": usage.total,
                "tables": usage.tables,
                "projects": usage.projects,
            }
    finally:
        runtime.close()
    if args.json:
        print(json.dumps(out, indent=2))
        return 0
    for key, value in out["counts"].items():
        print(f"{key:<20} {value:>12,}")
    if args.disk:
        disk = out["disk"]
        print(f"\ndatabase             {human(disk['total']):>12}")
        print("\nby table")
        for table, size in disk["tables"].items():
            print(f"  {table:<24} {human(size):>12}")
        print("\nby project (stored text and vectors)")
        print(
            f"  {'namespace':<48} {'events':>9} {'event data':>11}"
            f" {'records':>8} {'record data':>11}"
        )
        for p in disk["projects"]:
            print(
                f"  {p['namespace']:<48} {p['events']:>9,} {human(p['event_bytes']):>11}"
                f" {p['records']:>8,} {human(p['record_bytes']):>11}"
            )
    return 0

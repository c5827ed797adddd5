"""``wakemark move OLD [NEW]``: a project's memories follow its directory to a new place.

A project's namespace is a hash of its root's path, so once the directory is moved or
renamed the hooks write into a new, empty one. This moves every row of the old namespace
into the new one, merged with what the agent has written there since, through the
running server (``POST /v1/projects/move``), so that its caches follow. OLD is matched
against the stored projects, never looked for on disk (it is usually gone). Exit codes: 0
moved (or counted), 2 bad arguments, nothing stored for OLD, or the server is down or
refused.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
from typing import Any

ABOUT = (
    "After you move or rename a project's directory, its memories stay under the old "
    "path's project and the agent starts from nothing. Run this from the new directory "
    "with the old one's path (it need not exist any more), or with the old project's "
    "namespace: its memories, sessions and events join the project here, merged with "
    "anything the agent wrote here since. The server must be running."
)
# The whole project is rewritten in one transaction, past the client's usual 5 s: on
# Postgres every moved record enters each of its indexes again, the vector index too.
MOVE_TIMEOUT_S = 900.0


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.description = ABOUT
    parser.add_argument(
        "old", metavar="OLD", help="the project's old directory, or its namespace /actor/.../"
    )
    parser.add_argument(
        "new", metavar="NEW", nargs="?", help="the project's directory now (default: the cwd's)"
    )
    parser.add_argument(
        "--dry-run", action="store_true", help="count what would move, move nothing"
    )


def run(args: argparse.Namespace) -> int:
    from wakemark.services.mcp.client import ApiError, ApiUnavailable, client_for
    from wakemark.shared import project
    from wakemark.shared.config import Settings

    start = args.new or project.agent_start_dir()
    root = project.find_root(start) if os.path.isdir(start) else None
    if root is None:
        print(f"wakemark: no project at or above {start} (no .git or marker)", file=sys.stderr)
        return 2
    actor = project.actor()
    new = project.namespace_for(actor, project.project_id(root))
    client = dataclasses.replace(client_for(Settings.from_env()), timeout=MOVE_TIMEOUT_S)
    try:
        stored = client.get("/v1/projects")
        old = _match(args.old, stored, actor)
        if old is None:
            print(f"wakemark: no stored project was at {args.old}", file=sys.stderr)
            for line in _vanished(stored):
                print(line, file=sys.stderr)
            return 2
        if old["namespace"] == new:
            print(f"wakemark: {args.old} is the project at {root} already", file=sys.stderr)
            return 2
        body = {"from": old["namespace"], "to": new, "project_path": root, "dry_run": args.dry_run}
        moved = client.request("POST", "/v1/projects/move", body)["moved"]
    except ApiUnavailable as exc:
        print(f"wakemark: {exc}", file=sys.stderr)
        return 2
    except ApiError as exc:
        print(f"wakemark: move failed: {exc.message}", file=sys.stderr)
        return 2
    counts = ", ".join(f"{moved[k]} {k}" for k in ("records", "events", "turns"))
    where = f"from {old['project_path'] or old['namespace']} to {root}"
    if args.dry_run:
        print(f"would move {counts} {where}; run again without --dry-run to move them")
    else:
        print(f"moved {counts} {where}")
    return 0


def _match(given: str, stored: list[dict[str, Any]], actor: str) -> dict[str, Any] | None:
    """The stored project OLD names: by its namespace, or (this actor's) by the path its
    root had, which is where its events came from or what its id was hashed from."""
    from wakemark.shared import project
    from wakemark.shared.models import NAMESPACE_RE

    if NAMESPACE_RE.fullmatch(given):
        return next((p for p in stored if p["namespace"] == given), None)
    # What exists of the path resolves as the project's root once did; the rest is kept.
    path = os.path.realpath(os.path.abspath(os.path.expanduser(given)))
    mine = [p for p in stored if p["namespace"].startswith(f"/actor/{actor}/")]
    hashed = project.project_id(path)
    return next((p for p in mine if p["project_id"] == hashed), None) or next(
        (p for p in mine if p["project_path"] == path), None
    )


def _vanished(stored: list[dict[str, Any]]) -> list[str]:
    """The stored projects whose directory is gone: the likely OLDs."""
    gone = [p for p in stored if p["project_path"] and not os.path.isdir(p["project_path"])]
    if not gone:
        return ["(every stored project's directory still exists)"]
    lines = ["stored projects whose directory no longer exists:"]
    for p in gone:
        lines.append(f"  {p['project_path']}  ({p['memory_count']} memories, {p['namespace']})")
    return lines

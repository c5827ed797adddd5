"""``wakemark search QUERY``: the hybrid search of this project (or all), for a terminal.

Asks the running server (``GET /v1/search``), so it works the same on SQLite and
Postgres; the namespace comes from the cwd exactly as the MCP server works it out.
Exit codes: 0 hits, 1 no hit, 2 the server is down (or rejects the token).
"""

from __future__ import annotations

import argparse
import json
import sys
import textwrap
from typing import Any

SUMMARY_CHARS = 160


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("query", nargs="+", help="what to look for (words are joined)")
    parser.add_argument("--all-projects", action="store_true", help="search all your projects")
    parser.add_argument("--limit", type=_limit, default=10, help="at most N hits (1-100)")
    parser.add_argument("--json", action="store_true", help="print the API's JSON reply")


def _limit(raw: str) -> int:
    value = int(raw)
    if not 1 <= value <= 100:
        raise argparse.ArgumentTypeError("expected 1 to 100")
    return value


def run(args: argparse.Namespace) -> int:
    from wakemark.services.mcp.client import ApiError, ApiUnavailable, client_for
    from wakemark.shared import project
    from wakemark.shared.config import Settings

    settings = Settings.from_env()
    actor = project.actor()
    where = project.agent_start_dir()
    namespace = f"/actor/{actor}/" if args.all_projects else project.namespace(where, actor)
    query = " ".join(args.query)
    try:
        result = client_for(settings).get(
            "/v1/search", namespace=namespace, q=query, limit=args.limit
        )
    except ApiUnavailable as exc:
        print(f"wakemark: {exc}", file=sys.stderr)
        return 2
    except ApiError as exc:
        print(f"wakemark: search failed: {exc.message}", file=sys.stderr)
        return 2 if exc.status >= 500 else 1
    items = list(result.get("items") or [])
    if args.json:
        print(json.dumps(result, indent=2))
        return 0 if items else 1
    scope = "all projects" if args.all_projects else f"{project.find_root(where) or where}"
    if not items:
        print(f"No memories match {query!r} in {scope}.")
        return 1
    print(f"{len(items)} memories for {query!r} in {scope}:")
    for i, item in enumerate(items, 1):
        print(_hit(i, item))
    if result.get("degraded"):
        print("(search degraded: some results may be missing; see `wakemark status`)")
    return 0


def _hit(n: int, item: dict[str, Any]) -> str:
    record = item.get("record") or {}
    head = [str(record.get("created_at") or "")[:10], str(record.get("observation_type") or "")]
    if record.get("pinned"):
        head.append("pinned")
    for key in ("relevance", "score"):
        if isinstance(item.get(key), int | float):
            head.append(f"{key} {item[key]:.3g}")
    if item.get("match_source"):
        head.append(str(item["match_source"]))
    lines = [f"{n:>2}. {record.get('title', '')}", f"    {' · '.join(h for h in head if h)}"]
    summary = " ".join(str(record.get("summary") or "").split())
    if summary:
        lines.append("    " + textwrap.shorten(summary, SUMMARY_CHARS, placeholder="…"))
    lines.append(f"    {record.get('record_id', '')}")
    return "\n".join(lines)

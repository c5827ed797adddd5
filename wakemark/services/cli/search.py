"""``wakemark search QUERY``: the hybrid search of this project (or all), for a terminal.

Asks the running server (``GET /v1/search``), so it works the same on SQLite and
Postgres; the namespace comes from the cwd exactly as the MCP server works it out.
Only hits that reach the relevance gate's threshold (``WAKEMARK_MIN_RELEVANCE``) are
listed, as for the context an agent gets: a query that matches nothing relevant says so
rather than listing the least bad records.
Exit codes: 0 hits, 1 no relevant hit, 2 the server is down (or rejects the token).
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
    parser.add_argument(
        "--min-relevance",
        type=_relevance,
        metavar="R",
        help="only hits this relevant, 0-1 (default: WAKEMARK_MIN_RELEVANCE; 0 lists all)",
    )
    parser.add_argument("--json", action="store_true", help="print the API's JSON reply")


def _limit(raw: str) -> int:
    if not raw.isdigit() or not 1 <= int(raw) <= 100:
        raise argparse.ArgumentTypeError(f"expected an integer from 1 to 100, got {raw!r}")
    return int(raw)


def _relevance(raw: str) -> float:
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if not 0.0 <= value <= 1.0:  # also rejects nan
        raise argparse.ArgumentTypeError(f"expected a number from 0 to 1, got {raw!r}")
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
    floor = settings.min_relevance if args.min_relevance is None else args.min_relevance
    try:
        result = client_for(settings).get(
            "/v1/search", namespace=namespace, q=query, limit=args.limit, min_relevance=floor
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
        print(f"No relevant memories for {query!r} in {scope} (none reaches relevance {floor:g}).")
        return 1
    print(f"{len(items)} memories for {query!r} in {scope}:")
    for i, item in enumerate(items, 1):
        print(_hit(i, item))
    if result.get("degraded"):
        print("(search degraded: some results may be missing; see `wakemark status`)")
    return 0


def _hit(n: int, item: dict[str, Any]) -> str:
    from wakemark.services.mcp.client import code_label

    record = item.get("record") or {}
    head = [str(record.get("created_at") or "")[:10], str(record.get("observation_type") or "")]
    if record.get("pinned"):
        head.append("pinned")
    for key in ("relevance", "score"):
        if isinstance(item.get(key), int | float):
            head.append(f"{key} {item[key]:.3g}")
    if item.get("match_source"):
        head.append(str(item["match_source"]))
    head.append(code_label(item.get("code")))  # its code changed or went since capture
    lines = [f"{n:>2}. {record.get('title', '')}", f"    {' · '.join(h for h in head if h)}"]
    summary = " ".join(str(record.get("summary") or "").split())
    if summary:
        lines.append("    " + textwrap.shorten(summary, SUMMARY_CHARS, placeholder="…"))
    lines.append(f"    {record.get('record_id', '')}")
    return "\n".join(lines)

"""``wakemark forget``: delete memories by id, by a filter or by a search, dry run first.

Asks the running server (``POST /v1/memories/delete``, the viewer's bulk delete), so
the same cascade runs on both backends: the record, its vector, its full-text and
trigram rows, its audit rows, and with ``--events`` its source events. Without
``--yes`` it only counts what would go. Exit codes: 0 done (or counted), 1 nothing
matched, 2 the server is down or refused.
"""

from __future__ import annotations

import argparse
import sys
from datetime import datetime
from typing import Any

SEARCH_LIMIT = 100  # a query selects at most this many of its best hits


def add_arguments(parser: argparse.ArgumentParser) -> None:
    what = parser.add_argument_group("what to forget (ids, or a filter, or a query)")
    what.add_argument("ids", nargs="*", help="record ids (mr_...)")
    what.add_argument("--namespace", help="a namespace or an actor prefix /actor/<a>/")
    what.add_argument("--all-projects", action="store_true", help="all projects of your actor")
    what.add_argument("--type", help="only records of this observation type")
    what.add_argument("--before", type=_time, help="only records created before (ISO time)")
    what.add_argument("--after", type=_time, help="only records created after (ISO time)")
    what.add_argument("--session", help="only records of this session")
    what.add_argument(
        "--query", help="the hits `wakemark search` lists for this query (at most 100)"
    )
    parser.add_argument("--events", action="store_true", help="also delete the source events")
    parser.add_argument("--yes", action="store_true", help="delete (else: a dry run)")


def _time(raw: str) -> str:
    try:
        stamp = datetime.fromisoformat(raw)
    except ValueError:
        raise argparse.ArgumentTypeError("expected an ISO time, e.g. 2026-11-30T12:00Z") from None
    if stamp.tzinfo is None:
        raise argparse.ArgumentTypeError("give a time zone, e.g. 2026-11-30T12:00+00:00")
    return stamp.isoformat()


def run(args: argparse.Namespace) -> int:
    from wakemark.services.mcp.client import ApiError, ApiUnavailable, client_for
    from wakemark.shared import project
    from wakemark.shared.config import Settings

    settings = Settings.from_env()
    actor = project.actor()
    here = f"/actor/{actor}/" if args.all_projects else None
    namespace = args.namespace or here or project.namespace(project.agent_start_dir(), actor)
    narrowing = (args.type, args.before, args.after, args.session)
    if args.ids and (args.query or any(narrowing) or args.namespace or args.all_projects):
        print("wakemark: give record ids, or a filter or --query, not both", file=sys.stderr)
        return 2
    client = client_for(settings)
    try:
        if args.query:
            # The hits `wakemark search` lists: those that reach the gate's floor, not
            # every record the vectors rank (any query ranks them all).
            found = client.get(
                "/v1/search", namespace=namespace, q=args.query, limit=SEARCH_LIMIT,
                min_relevance=settings.min_relevance,
            )  # fmt: skip
            hits = [item["record"] for item in found.get("items") or []]
            body: dict[str, Any] = {
                "ids": [r["record_id"] for r in hits if args.type in (None, r["observation_type"])]
            }
        elif args.ids:
            body = {"ids": list(args.ids)}
        else:
            body = {"namespace": namespace, "type": args.type, "before": args.before,
                    "after": args.after, "session_id": args.session}  # fmt: skip
        if body.get("ids") == []:
            print("No memory matches.")
            return 1
        body.update(dry_run=not args.yes, with_events=args.events)
        result = client.request("POST", "/v1/memories/delete", body)
    except ApiUnavailable as exc:
        print(f"wakemark: {exc}", file=sys.stderr)
        return 2
    except ApiError as exc:
        print(f"wakemark: forget failed: {exc.message}", file=sys.stderr)
        return 2
    return _report(result, args)


def _report(result: dict[str, Any], args: argparse.Namespace) -> int:
    records = int(result.get("records") or 0)
    if not records:
        print("No memory matches.")
        return 1
    events = int(result.get("events") or 0)
    if result.get("dry_run"):
        also = f", {events} source events" if args.events else ""
        print(f"Would delete {records} memories ({result.get('embeddings', 0)} vectors{also}).")
        for record_id in result.get("record_ids") or []:
            print(f"  {record_id}")
        print("Run again with --yes to delete them.")
        return 0
    also = f" and {events} source events" if args.events else ""
    print(f"Deleted {records} memories{also}.")
    return 0

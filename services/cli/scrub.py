"""``wakemark scrub [--dry-run]``: re-scan what is already stored with today's rules.

Events and memory records stored before a rule existed (or before secret scanning at
all) are scanned like new ones (``shared/privacy.py``); matches are rewritten in place.
A rewritten record loses its embedding, its full-text entry follows the new text, and it
is embedded again here (or by the next sweep with ``WAKEMARK_EMBEDDER=off`` set now).
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from typing import Any

PAGE = 500


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--dry-run", action="store_true", help="report what would change")


def run(args: argparse.Namespace) -> int:
    from wakemark.shared.runtime import Runtime

    runtime = Runtime.build()
    try:
        events, kinds = _events(runtime.storage, args.dry_run)
        records, record_kinds = _records(runtime.storage, args.dry_run)
        kinds.update(record_kinds)
        verb = "would rewrite" if args.dry_run else "rewrote"
        found = ", ".join(f"{k} {n}" for k, n in sorted(kinds.items())) or "nothing"
        print(f"{verb} {events} event(s) and {len(records)} record(s); redactions: {found}")
        if records and not args.dry_run:
            _reembed(runtime)
    finally:
        runtime.close()
    return 0


def _kinds(before: Any, after: Any) -> Counter[str]:
    """Redaction markers ``after`` holds beyond those ``before`` already did."""
    import re

    marker = re.compile(r"\[REDACTED(?::([a-z0-9-]+))?\]")
    new = Counter(m or "private" for m in marker.findall(str(after)))
    new.subtract(Counter(m or "private" for m in marker.findall(str(before))))
    return +new


def _events(storage: Any, dry_run: bool) -> tuple[int, Counter[str]]:
    from wakemark.shared.privacy import scrub

    changed = 0
    kinds: Counter[str] = Counter()
    after: str | None = None
    while page := storage.events_after(after, PAGE):
        after = page[-1].event_id
        rewritten = []
        for event in page:
            body = event.body.model_dump(mode="json")
            clean = scrub(body)
            if clean != body:
                kinds += _kinds(body, clean)
                rewritten.append(event.model_copy(update={"body": clean}))
        changed += len(rewritten)
        if rewritten and not dry_run:
            storage.replace_event_bodies(rewritten)
    return changed, kinds


def _records(storage: Any, dry_run: bool) -> tuple[list[str], Counter[str]]:
    from wakemark.shared.privacy import RECORD_TEXT, scrub_record

    changed: list[str] = []
    kinds: Counter[str] = Counter()
    for ns in [p["namespace"] for p in storage.projects()]:
        for page in storage.record_pages(ns, PAGE):
            rewritten = [(r, c) for r in page if (c := scrub_record(r)) is not r]
            for old, new in rewritten:
                kinds += _kinds(
                    [getattr(old, f) for f in RECORD_TEXT], [getattr(new, f) for f in RECORD_TEXT]
                )
            changed += [r.record_id for r, _ in rewritten]
            if rewritten and not dry_run:
                with storage.transaction() as tx:
                    for _, new in rewritten:
                        tx.replace_record_text(new)
    return changed, kinds


def _reembed(runtime: Any) -> None:
    from wakemark.shared.jobs import backfill_embeddings

    if runtime.settings.embedder == "off":
        print("WAKEMARK_EMBEDDER=off: run `wakemark backfill` once it is on", file=sys.stderr)
        return
    result = backfill_embeddings(runtime, wait_on_open=False)
    print(f"re-embedded {result['embedded']} record(s)", file=sys.stderr)

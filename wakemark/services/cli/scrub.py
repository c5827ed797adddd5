"""``wakemark scrub [--dry-run]``: re-scan what is already stored with today's rules.

Events and memory records stored before a rule existed (or before secret scanning at
all) are scanned like new ones (``shared/privacy.py``), every string a client could have
written: an event's body, source (surface, version, project path), actor and session id;
a record's title, summary, facts, concepts and files. Matches are rewritten in place; a
redacted session id moves the session's turns and audit rows with it. A rewritten record
loses its embedding, its full-text entry follows the new text, and it is embedded again
here (or by the next sweep with ``WAKEMARK_EMBEDDER=off`` set now). Ids, namespaces and
times are wakemark's own and are not rewritten.
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
    from wakemark.services.cli.migrate import migrated_runtime

    runtime = migrated_runtime()
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
    from wakemark.shared.models import Source
    from wakemark.shared.privacy import scrub

    changed = 0
    kinds: Counter[str] = Counter()
    renames: dict[tuple[str, str], str] = {}  # (namespace, session id) -> its redacted id
    after: str | None = None
    while page := storage.events_after(after, PAGE):
        after = page[-1].event_id
        rewritten = []
        for event in page:
            text = {
                "body": event.body.model_dump(mode="json"),
                "source": event.source.model_dump(mode="json"),
                "actor_id": event.actor_id,
                "session_id": event.session_id,
            }
            clean = scrub(text)
            if clean == text:
                continue
            changed += 1
            kinds += _kinds(text, clean)
            if clean["session_id"] != event.session_id:
                renames[(event.namespace, event.session_id)] = clean["session_id"][:200]
            # A marker can be longer than what it hides: keep the fields' limits.
            source = {k: v[:100] if k in ("surface", "version") and v else v
                      for k, v in clean["source"].items()}  # fmt: skip
            update = {
                "body": clean["body"],
                "source": Source.model_validate(source),
                "actor_id": clean["actor_id"][:200],
            }
            rewritten.append(event.model_copy(update=update))
        if rewritten and not dry_run:
            storage.rewrite_events(rewritten)
    if not dry_run:
        for (namespace, old), new in renames.items():
            storage.rename_session(namespace, old, new)
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

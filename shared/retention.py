"""Event retention: once a turn has been extracted and ``WAKEMARK_EVENT_RETENTION_DAYS``
have passed, its events' raw bodies are trimmed to stubs.

Raw bodies (tool outputs, file contents, logs) are most of the database, and the record
extracted from the turn is what search uses. A stub keeps the provenance: the event row
itself (id, kind, session, times, turn) stays, and its body becomes a small JSON object
with the original size, the tool name, the file paths and the exit code, so a record's
``source_event_ids`` still lead somewhere meaningful.
"""

from __future__ import annotations

import json
import logging
from datetime import datetime, timedelta
from typing import Any

from wakemark.shared.extraction.tools import parse_tool_use
from wakemark.shared.models import StoredEvent, utcnow
from wakemark.shared.storage.base import Storage

log = logging.getLogger("wakemark.retention")

KEEP_BYTES = 512  # a body this small (a short prompt) is kept: its stub would save nothing
RUN_MAX_TURNS = 5000  # turns one periodic run trims; a backlog takes a few runs
TURNS_PER_BATCH = 200  # turns trimmed per transaction: short holds on the write lock
STUB_KEY = "wakemark_trimmed"


def stub(event: StoredEvent) -> str | None:
    """The stub body (JSON text) for the event, or None to keep the body as it is."""
    raw = event.body_json()
    size = len(raw.encode())
    if size <= KEEP_BYTES:
        return None
    data: dict[str, Any] = {STUB_KEY: {"bytes": size}}
    if event.kind == "tool_use":
        tool = parse_tool_use(event.body)
        if tool.name:
            data["tool_name"] = tool.name[:200]
        paths = list(dict.fromkeys(path for _, path in tool.files))[:50]
        if paths:
            data["file_paths"] = [p[:1000] for p in paths]
        if tool.exit_code is not None:
            data["exit_code"] = tool.exit_code
        if tool.failed is not None:
            data["failed"] = tool.failed
    return json.dumps({"type": "json", "data": data}, ensure_ascii=False, separators=(",", ":"))


def trim_expired(
    storage: Storage, days: int, now: datetime | None = None, max_turns: int | None = None
) -> dict[str, int]:
    """Trim the events of every turn extracted more than ``days`` ago (``days`` 0: none),
    ``TURNS_PER_BATCH`` turns a transaction; ``max_turns`` bounds one run (the periodic
    job's), the next run goes on. Returns turns, events and bytes before/after."""
    totals = {"turns": 0, "events": 0, "bytes_before": 0, "bytes_after": 0}
    if days <= 0:
        return totals
    cutoff = (now or utcnow()) - timedelta(days=days)
    while max_turns is None or totals["turns"] < max_turns:
        limit = TURNS_PER_BATCH
        if max_turns is not None:
            limit = min(limit, max_turns - totals["turns"])
        turn_ids = storage.trimmable_turns(cutoff, limit)
        if not turn_ids:
            break
        bodies: dict[str, dict[str, str]] = {t: {} for t in turn_ids}
        for turn in storage.get_turns(turn_ids):
            for event in turn.events:
                new = stub(event)
                if new is not None:
                    bodies[turn.turn_id][event.event_id] = new
                    totals["bytes_before"] += len(event.body_json().encode())
                    totals["bytes_after"] += len(new.encode())
        totals["events"] += storage.trim_turns(bodies)
        totals["turns"] += len(turn_ids)
    if totals["turns"]:
        log.info("retention trimmed %(events)d events of %(turns)d turns", totals)
    return totals

"""Event retention: once a turn has been extracted and ``WAKEMARK_EVENT_RETENTION_DAYS``
have passed, its events' raw bodies are trimmed to stubs, and the prompt-time retrieval
audit rows of that age go; ``WAKEMARK_EVENT_EXPIRY_DAYS`` after extraction (when set),
the trimmed turn and its stubs go too. Records are only touched when
``WAKEMARK_RECORD_RETENTION_DAYS`` is set (off by default): unpinned records older than
that are deleted through the bulk delete (vector, full-text and trigram entries with
them), one audit-log entry per batch.

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
from typing import Any, Protocol

from wakemark.shared.extraction.tools import parse_tool_use
from wakemark.shared.models import StoredEvent, utcnow
from wakemark.shared.storage import (
    AuditEntry,
    Events,
    MemoryFilter,
    Records,
    RetrievalLog,
    Transactions,
    Upkeep,
)

log = logging.getLogger("wakemark.retention")


class RetentionStorage(Events, Records, RetrievalLog, Upkeep, Transactions, Protocol):
    """What retention reads and deletes: turns and their events, records (their deletions
    audited in the same transaction), retrieval rows."""


KEEP_BYTES = 512  # a body this small (a short prompt) is kept: its stub would save nothing
RUN_MAX_TURNS = 5000  # turns one periodic run trims; a backlog takes a few runs
TURNS_PER_BATCH = 200  # turns trimmed per transaction: short holds on the write lock
RECORDS_PER_BATCH = 500  # records deleted per transaction
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
    storage: RetentionStorage, days: int, now: datetime | None = None, max_turns: int | None = None
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


def expire(
    storage: RetentionStorage,
    retention_days: int,
    expiry_days: int = 0,
    record_days: int = 0,
    now: datetime | None = None,
    max_turns: int | None = None,
) -> dict[str, int]:
    """The whole retention pass: trim the bodies of turns past ``retention_days``, delete
    the retrieval audit rows older than that, (``expiry_days`` > 0) delete the trimmed
    turns extracted over ``expiry_days`` ago with their events, and (``record_days`` > 0)
    delete the unpinned records created over ``record_days`` ago. 0 days turns each part
    off; ``max_turns`` bounds each part of one run (records: as many). Returns the trim's
    totals plus ``retrievals``, ``expired_turns``, ``expired_events`` and ``records``
    deleted."""
    now = now or utcnow()
    totals = trim_expired(storage, retention_days, now=now, max_turns=max_turns)
    totals.update(retrievals=0, expired_turns=0, expired_events=0, records=0)
    if record_days > 0:
        totals["records"] = _expire_records(
            storage, now - timedelta(days=record_days), now, max_turns
        )
    if retention_days > 0:
        totals["retrievals"] = storage.delete_retrievals(now - timedelta(days=retention_days))
    if expiry_days > 0:
        cutoff = now - timedelta(days=expiry_days)
        while max_turns is None or totals["expired_turns"] < max_turns:
            limit = TURNS_PER_BATCH
            if max_turns is not None:
                limit = min(limit, max_turns - totals["expired_turns"])
            turns, events = storage.expire_turns(cutoff, limit)
            if not turns:
                break
            totals["expired_turns"] += turns
            totals["expired_events"] += events
    if totals["records"]:
        # Merging rewrites index segments: worth it only to drop what was deleted.
        storage.merge_indexes()
    if totals["retrievals"] or totals["expired_turns"] or totals["records"]:
        log.info(
            "retention deleted %(retrievals)d retrieval rows, %(expired_turns)d expired turns"
            " (%(expired_events)d events), %(records)d records",
            totals,
        )
    return totals


def _expire_records(
    storage: RetentionStorage, created_before: datetime, now: datetime, max_records: int | None
) -> int:
    ids = storage.find_memory_ids(MemoryFilter("/", before=created_before, pinned=False))
    ids = ids[:max_records] if max_records is not None else ids
    deleted = 0
    for k in range(0, len(ids), RECORDS_PER_BATCH):
        with storage.transaction() as tx:
            gone = tx.delete_memory_records(ids[k : k + RECORDS_PER_BATCH])
            if gone:
                tx.audit(
                    AuditEntry("retention", "record_retention", None, tuple(gone), len(gone), now)
                )
        deleted += len(gone)
    return deleted

"""claude-mem's SQLite database (``~/.claude-mem/claude-mem.db``): its observations and
session summaries as records, with their project, type, files and dates.

claude-mem names a project by a plain name, not a path, so each name becomes the
namespace of that name taken as a project root (``--project DIR`` puts everything in
that directory's project instead). Ids are derived from the database row (its table,
id, session and time), so importing again writes nothing new. Older claude-mem
databases lack some columns; whatever a row has is used.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

from ulid import ULID

from wakemark.shared.models import OBSERVATION_TYPES, MemoryRecord
from wakemark.shared.privacy import scrub

_SUMMARY_PARTS = (
    ("investigated", "Investigated"),
    ("learned", "Learned"),
    ("completed", "Completed"),
    ("next_steps", "Next steps"),
)


def _list(raw: Any) -> list[str]:
    """A JSON array column (claude-mem writes ``JSON.stringify``), or lines of text."""
    if not raw:
        return []
    try:
        value = json.loads(raw)
    except (TypeError, ValueError):
        value = str(raw).splitlines()
    if not isinstance(value, list):
        value = [value]
    return [str(v).strip() for v in value if v is not None and str(v).strip()]


def _when(row: sqlite3.Row) -> datetime:
    keys = row.keys()
    if "created_at_epoch" in keys and row["created_at_epoch"]:
        return datetime.fromtimestamp(int(row["created_at_epoch"]) / 1000, UTC)
    return datetime.fromisoformat(str(row["created_at"]).replace("Z", "+00:00"))


def _id(*parts: Any) -> str:
    digest = hashlib.sha256("\0".join(str(p) for p in parts).encode()).digest()
    return "mr_" + str(ULID.from_bytes(digest[:16]))


def _get(row: sqlite3.Row, key: str) -> Any:
    return row[key] if key in row.keys() else None  # noqa: SIM118 - Row: `in` tests values


def records(path: str, namespace_of: Any) -> Iterator[MemoryRecord]:
    """Every observation, then every session summary; ``namespace_of(project_name)``."""
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    conn.row_factory = sqlite3.Row
    try:
        tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        if "observations" in tables:
            for row in conn.execute("SELECT * FROM observations ORDER BY id"):
                yield _observation(row, namespace_of(row["project"]))
        if "session_summaries" in tables:
            for row in conn.execute("SELECT * FROM session_summaries ORDER BY id"):
                yield _summary(row, namespace_of(row["project"]))
    finally:
        conn.close()


def _record(row: sqlite3.Row, table: str, namespace: str, **fields: Any) -> MemoryRecord:
    created = _when(row)
    clean = scrub(fields)
    return MemoryRecord(
        record_id=_id("claude-mem", table, row["id"], row["memory_session_id"], created),
        namespace=namespace,
        title=(clean["title"] or "untitled")[:200],
        summary=clean["summary"][:4000],
        facts=[f[:2000] for f in clean["facts"][:100]],
        concepts=[c[:100] for c in clean["concepts"][:50]],
        files_touched=list(dict.fromkeys(f[:1000] for f in clean["files"]))[:200],
        observation_type=clean["type"],
        strategy="llm",  # claude-mem's records are written by a model
        created_at=created,
    )


def _observation(row: sqlite3.Row, namespace: str) -> MemoryRecord:
    kind = row["type"] if row["type"] in OBSERVATION_TYPES else "note"
    title = _get(row, "title") or _get(row, "subtitle") or (_get(row, "text") or "")[:200]
    summary = _get(row, "narrative") or _get(row, "text") or _get(row, "subtitle") or ""
    files = _list(_get(row, "files_read")) + _list(_get(row, "files_modified"))
    return _record(
        row, "observations", namespace, title=title, summary=summary, type=kind,
        facts=_list(_get(row, "facts")), concepts=_list(_get(row, "concepts")), files=files,
    )  # fmt: skip


def _summary(row: sqlite3.Row, namespace: str) -> MemoryRecord:
    parts = [f"{label}: {row[key]}" for key, label in _SUMMARY_PARTS if _get(row, key)]
    files = _list(_get(row, "files_read")) + _list(_get(row, "files_edited"))
    notes = _get(row, "notes")
    return _record(
        row, "session_summaries", namespace, title=_get(row, "request") or "Session summary",
        summary="\n".join(parts), type="session_summary", facts=[notes] if notes else [],
        concepts=[], files=files,
    )  # fmt: skip

"""The MCP tools' names, descriptions and JSON input schemas (strict: no unknown keys)."""

from __future__ import annotations

from typing import Any

from wakemark.shared.models import OBSERVATION_TYPES, RECORD_ID_PATTERN

RECORD_ID: dict[str, Any] = {
    "type": "string",
    "pattern": RECORD_ID_PATTERN,
    "description": "A memory record id as returned by `search`, e.g. mr_01J...",
}
TYPE: dict[str, Any] = {"type": "string", "enum": list(OBSERVATION_TYPES)}


def _strings(max_items: int, max_len: int, what: str) -> dict[str, Any]:
    return {
        "type": "array",
        "items": {"type": "string", "minLength": 1, "maxLength": max_len},
        "maxItems": max_items,
        "description": what,
    }


def _object(properties: dict[str, Any], required: list[str]) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": properties,
        "required": required,
        "additionalProperties": False,
    }


SEARCH = _object(
    {
        "query": {
            "type": "string",
            "minLength": 1,
            "maxLength": 4000,
            "description": "What to look for: keywords or a natural-language question.",
        },
        "limit": {"type": "integer", "minimum": 1, "maximum": 50, "default": 10},
        "type": {**TYPE, "description": "Only records of this observation type."},
        "days": {
            "type": "integer",
            "minimum": 1,
            "maximum": 36500,
            "description": "Only records created in the last N days.",
        },
        "all_projects": {
            "type": "boolean",
            "default": False,
            "description": "Search every project of this user, not just the current one.",
        },
        "min_relevance": {
            "type": "number",
            "minimum": 0,
            "maximum": 1,
            "description": "Only hits at least this relevant (0-1, the relevance gate's "
            "estimate); unset: every hit, best first.",
        },
    },
    ["query"],
)

TIMELINE = _object(
    {
        "record_id": RECORD_ID,
        "before": {"type": "integer", "minimum": 0, "maximum": 20, "default": 3},
        "after": {"type": "integer", "minimum": 0, "maximum": 20, "default": 3},
    },
    ["record_id"],
)

GET_RECORDS = _object(
    {
        "ids": {
            "type": "array",
            "items": RECORD_ID,
            "minItems": 1,
            "maxItems": 20,
            "uniqueItems": True,
            "description": "Record ids from `search` or `timeline` (at most 20).",
        }
    },
    ["ids"],
)

REMEMBER = _object(
    {
        "title": {
            "type": "string",
            "minLength": 1,
            "maxLength": 200,
            "description": "A short, searchable headline.",
        },
        "summary": {
            "type": "string",
            "minLength": 1,
            "maxLength": 4000,
            "description": "What happened or was decided, and why; self-contained.",
        },
        "facts": _strings(100, 2000, "Concrete facts: commands, values, file:line, errors."),
        "concepts": _strings(50, 100, "Keywords and topics that should find this record."),
        "files": _strings(200, 1000, "Paths of the files this memory is about."),
        "type": {**TYPE, "default": "note", "description": "Observation type (default note)."},
    },
    ["title", "summary"],
)

FORGET = {
    **_object(
        {
            "record_id": RECORD_ID,
            "query": {
                "type": "string",
                "minLength": 1,
                "maxLength": 4000,
                "description": "forget this project's best matches of a search instead",
            },
            "confirm": {
                "type": "boolean",
                "description": "with query: false (default) lists the matches and deletes "
                "nothing; true deletes those same matches",
            },
        },
        [],
    ),
    "oneOf": [{"required": ["record_id"]}, {"required": ["query"]}],
}

PIN = _object(
    {
        "record_id": RECORD_ID,
        "pinned": {
            "type": "boolean",
            "description": "true: always show it at session start; false: unpin.",
        },
    },
    ["record_id", "pinned"],
)

# name -> (description, input schema, read-only?)
TOOLS: dict[str, tuple[str, dict[str, Any], bool]] = {
    "search": (
        "Search wakemark's persistent memory of past sessions in this project (decisions, bug "
        "fixes, commands, files) by keywords or meaning. Returns compact hits: id, date, "
        "type, title and a one-line summary. Use before re-investigating something that may "
        "have been solved before; then call get_records for full details or timeline for "
        "what happened around a hit. Set all_projects to search every project.",
        SEARCH,
        True,
    ),
    "timeline": (
        "Show the memory records created just before and after one record (in the order "
        "the work happened), to see what led to it and what followed.",
        TIMELINE,
        True,
    ),
    "get_records": (
        "Fetch full memory records by id: summary, facts, concepts, files touched and "
        "provenance (source events, how it was extracted), and its history: the older "
        "versions a newer record about the same subject superseded, newest first. An old "
        "id returns its subject's current record. Unknown ids are listed as not found; "
        "the others are still returned.",
        GET_RECORDS,
        True,
    ),
    "remember": (
        "Store a memory for future sessions of this project: a decision, a gotcha, a "
        "convention, how something was fixed. Write the summary so that it makes sense "
        "without today's context. Text inside <private>...</private> is redacted.",
        REMEMBER,
        False,
    ),
    "forget": (
        "Permanently delete a memory record (and its vector and search index entries) by "
        "record_id, or the memories matching a query: a query first only lists its "
        "matches, and deletes them when called again with confirm=true. Use when a "
        "memory is wrong or obsolete.",
        FORGET,
        False,
    ),
    "pin": (
        "Pin a memory record so it is always included at session start (pinned=true), or "
        "unpin it (pinned=false).",
        PIN,
        False,
    ),
}

"""Read and manage API: events, memories, timeline, projects (and moving one), stats."""

from __future__ import annotations

import re

from flask import Blueprint, Response, jsonify
from pydantic import BaseModel, ConfigDict, Field, StrictBool

from wakemark.services.api import current, security
from wakemark.services.api.errors import ApiError
from wakemark.services.api.params import json_object, query
from wakemark.services.api.schemas import (
    EventsQuery,
    History,
    MemoriesQuery,
    RecordOrVersion,
    StatsQuery,
    TimelineQuery,
    cursor,
    parse_cursor,
)
from wakemark.shared.jobs import EMBED
from wakemark.shared.models import (
    RECORD_ID_PATTERN,
    ULID_PATTERN,
    Concepts,
    Facts,
    Files,
    MemoryRecord,
    Namespace,
    ObservationType,
    Summary,
    Title,
)
from wakemark.shared.privacy import scrub
from wakemark.shared.storage import PageKey, Version

RECORD_ID_RE = re.compile(RECORD_ID_PATTERN)
ULID_RE = re.compile(ULID_PATTERN)

bp = Blueprint("read", __name__)


class NewMemory(BaseModel):
    """``POST /v1/memories``: a record written directly (MCP ``remember``, import)."""

    model_config = ConfigDict(extra="forbid")

    namespace: Namespace
    title: Title
    summary: Summary
    facts: Facts = Field(default_factory=list)
    concepts: Concepts = Field(default_factory=list)
    files_touched: Files = Field(default_factory=list)
    observation_type: ObservationType = "note"
    pinned: StrictBool = False


class MoveProject(BaseModel):
    """``POST /v1/projects/move``: every row of one project's namespace into another."""

    model_config = ConfigDict(extra="forbid")

    from_: Namespace = Field(alias="from")
    to: Namespace
    project_path: str | None = Field(default=None, min_length=1, max_length=4096)
    dry_run: StrictBool = False


class RecordPatch(BaseModel):
    """Pin or unpin, and/or correct the text (the embedding is then redone)."""

    model_config = ConfigDict(extra="forbid", json_schema_extra={"minProperties": 1})

    pinned: StrictBool | None = None
    title: Title | None = None
    summary: Summary | None = None
    facts: Facts | None = None


def _record(record: MemoryRecord) -> dict:
    return record.model_dump(mode="json")


def version_json(version: Version) -> dict:
    return {
        "record": _record(version.record),
        "current_id": version.current_id,
        "superseded_by": version.superseded_by,
        "superseded_at": version.superseded_at.isoformat(),
    }


def _storage():
    return current.runtime().storage


@bp.get("/v1/events")
def list_events() -> Response:
    args = query(EventsQuery)
    events = _storage().list_events(
        namespace=args.namespace, session_id=args.session_id, limit=args.limit
    )
    return jsonify(items=[e.model_dump(mode="json") for e in events])


@bp.get("/v1/events/<event_id>")
def get_event(event_id: str) -> Response:
    event = _storage().get_event(event_id) if ULID_RE.match(event_id) else None
    return jsonify(security.owned(event, "event").model_dump(mode="json"))


@bp.get("/v1/memories")
def list_memories() -> Response:
    args = query(MemoriesQuery)
    after = None
    if args.after is not None:
        at, record_id = parse_cursor(args.after)
        after = PageKey(at, record_id)
    page = _storage().list_memory_records(
        args.namespace, limit=args.limit, after=after, count=args.count
    )
    more = {}
    if args.superseded:
        history = _storage().get_history
        more["superseded"] = [version_json(v) for r in page.items for v in history(r.record_id)]
    return jsonify(
        items=[_record(r) for r in page.items],
        total=page.total,
        limit=page.limit,
        next=cursor(page.next.created_at, page.next.record_id) if page.next else None,
        **more,
    )


@bp.post("/v1/memories")
def create_memory() -> tuple[Response, int]:
    # Scrubbed before validation, like events: nothing private reaches storage or logs.
    new = NewMemory.model_validate(scrub(json_object()))
    security.require_scope(new.namespace)
    record = MemoryRecord(**new.model_dump(), strategy="manual")
    with _storage().transaction() as tx:
        tx.put_memory_record(record)
        current.enqueue_on_commit(tx, EMBED, [record.record_id])
    return jsonify(record_id=record.record_id), 201


def _get_record(record_id: str) -> MemoryRecord:
    record = _storage().get_memory_record(record_id) if RECORD_ID_RE.match(record_id) else None
    return security.owned(record, "memory record")


def _record_or_version(record_id: str) -> tuple[MemoryRecord, Version | None]:
    """A current record (and None), or a superseded one's version; 404 for neither."""
    storage = _storage()
    known = RECORD_ID_RE.match(record_id) is not None
    record = storage.get_memory_record(record_id) if known else None
    version = storage.get_version(record_id) if record is None and known else None
    if version is not None:
        record = version.record
    return security.owned(record, "memory record"), version


@bp.get("/v1/memories/<record:record_id>")
def get_memory(record_id: str) -> Response:
    """A current record, or a superseded one marked with what replaced it (not a 404: an
    id seen in an audit, an export or an earlier answer stays readable)."""
    record, version = _record_or_version(record_id)
    if version is None:
        return jsonify(_record(record))
    marked = RecordOrVersion(
        **dict(record),
        superseded_by=version.superseded_by,
        current_id=version.current_id,
        superseded_at=version.superseded_at,
    )
    return jsonify(marked.model_dump(mode="json"))


@bp.get("/v1/memories/<record:record_id>/history")
def memory_history(record_id: str) -> Response:
    """The chain of a current record, or of the current record a version belongs to."""
    _, version = _record_or_version(record_id)
    current_id = record_id if version is None else version.current_id
    items = [version_json(v) for v in _storage().get_history(current_id)]
    return jsonify(
        History.model_validate(
            {"record_id": record_id, "current_id": current_id, "items": items}
        ).model_dump(mode="json")
    )


@bp.post("/v1/memories/<record:record_id>/split")
def split_memory(record_id: str) -> Response:
    """Undo a wrong merge: the version is a current record again (and embedded anew)."""
    storage = _storage()
    version = storage.get_version(record_id) if RECORD_ID_RE.match(record_id) else None
    security.owned(version.record if version else None, "superseded memory record")
    record = storage.split_version(record_id)
    current.enqueue(EMBED, [record_id])
    return jsonify(_record(record))


@bp.patch("/v1/memories/<record:record_id>")
def patch_memory(record_id: str) -> Response:
    patch = RecordPatch.model_validate(scrub(json_object()))
    if not patch.model_fields_set:
        raise ApiError(422, "nothing to change", code="validation_error")
    record = _get_record(record_id)
    if patch.pinned is not None:
        record = _storage().set_pinned(record_id, patch.pinned)
    if {"title", "summary", "facts"} & patch.model_fields_set:
        record = _storage().edit_memory_record(record_id, patch.title, patch.summary, patch.facts)
        current.enqueue(EMBED, [record_id])  # the edited text gets a new vector
    return jsonify(_record(record))


@bp.delete("/v1/memories/<record:record_id>")
def delete_memory(record_id: str) -> tuple[str, int]:
    record = _get_record(record_id)
    with _storage().transaction() as tx:
        if not tx.delete_memory_records([record_id]):
            raise ApiError(404, "no such memory record")  # deleted since it was read
        security.audit(tx, "delete", record.namespace, [record_id])
    return "", 204


@bp.get("/v1/timeline")
def timeline() -> Response:
    args = query(TimelineQuery)
    _get_record(args.record_id)
    items = _storage().timeline(args.record_id, before=args.before, after=args.after)
    return jsonify(items=[_record(r) for r in items])


@bp.get("/v1/projects")
def projects() -> Response:
    return jsonify([p for p in _storage().projects() if security.visible(p["namespace"])])


@bp.post("/v1/projects/move")
def move_project() -> Response:
    """A project whose directory was moved or renamed (its namespace follows the path):
    its rows join the namespace of the new place, merged with what is there already."""
    req = MoveProject.model_validate(json_object())
    security.require_scope(req.from_)
    security.require_scope(req.to)
    if req.from_ == req.to:
        # Not a 400: the body is valid by the published schema, which cannot say "differ".
        raise ApiError(409, f"{req.from_} would move onto itself")
    entry = security.audit_entry("move", req.from_, [req.to])  # a dry run rolls it back
    moved = _storage().move_namespace(
        req.from_, req.to, req.project_path, not req.dry_run, audit=entry
    )
    return jsonify({"moved": moved, "from": req.from_, "to": req.to, "dry_run": req.dry_run})


@bp.get("/v1/stats")
def stats() -> Response:
    return jsonify(_storage().stats(query(StatsQuery).namespace))

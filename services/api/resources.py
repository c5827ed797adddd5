"""Read and manage API: events, memories, timeline, projects, stats."""

from __future__ import annotations

import re

from flask import Blueprint, Response, jsonify
from pydantic import BaseModel, ConfigDict, Field, StrictBool

from wakemark.services.api import pipeline
from wakemark.services.api.errors import ApiError
from wakemark.services.api.params import (
    bool_arg,
    int_arg,
    json_object,
    namespace_arg,
    str_arg,
    text_without_nul,
)
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


class RecordPatch(BaseModel):
    """Pin or unpin, and/or correct the text (the embedding is then redone)."""

    model_config = ConfigDict(extra="forbid")

    pinned: StrictBool | None = None
    title: Title | None = None
    summary: Summary | None = None
    facts: Facts | None = None


def _record(record: MemoryRecord) -> dict:
    return record.model_dump(mode="json")


def _storage():
    return pipeline.runtime().storage


@bp.get("/v1/events")
def list_events() -> Response:
    namespace = namespace_arg()
    session_id = str_arg("session_id")
    limit = int_arg("limit", 50, 1, 100)
    events = _storage().list_events(namespace=namespace, session_id=session_id, limit=limit)
    return jsonify(items=[e.model_dump(mode="json") for e in events])


@bp.get("/v1/events/<event_id>")
def get_event(event_id: str) -> Response:
    event = _storage().get_event(event_id) if ULID_RE.match(event_id) else None
    if event is None:
        raise ApiError(404, "no such event")
    return jsonify(event.model_dump(mode="json"))


@bp.get("/v1/memories")
def list_memories() -> Response:
    namespace = namespace_arg(required=True)
    limit = int_arg("limit", 50, 1, 100)
    offset = int_arg("offset", 0, 0, 1_000_000)
    # count=false: no total (counting a large namespace costs more than the page).
    count = bool_arg("count", True)
    page = _storage().list_memory_records(namespace, limit=limit, offset=offset, count=count)
    return jsonify(
        items=[_record(r) for r in page.items],
        total=page.total,
        limit=page.limit,
        offset=page.offset,
    )


@bp.post("/v1/memories")
def create_memory() -> tuple[Response, int]:
    # Scrubbed before validation, like events: nothing private reaches storage or logs.
    new = NewMemory.model_validate(text_without_nul(scrub(json_object())))
    record = MemoryRecord(**new.model_dump(), strategy="manual")
    _storage().put_memory_record(record)
    pipeline.enqueue_embed([record.record_id])
    return jsonify(record_id=record.record_id), 201


def _get_record(record_id: str) -> MemoryRecord:
    record = _storage().get_memory_record(record_id) if RECORD_ID_RE.match(record_id) else None
    if record is None:
        raise ApiError(404, "no such memory record")
    return record


@bp.get("/v1/memories/<record_id>")
def get_memory(record_id: str) -> Response:
    return jsonify(_record(_get_record(record_id)))


@bp.patch("/v1/memories/<record_id>")
def patch_memory(record_id: str) -> Response:
    patch = RecordPatch.model_validate(text_without_nul(scrub(json_object())))
    if not patch.model_fields_set:
        raise ApiError(422, "nothing to change", code="validation_error")
    record = _get_record(record_id)
    if patch.pinned is not None:
        record = _storage().set_pinned(record_id, patch.pinned)
    if {"title", "summary", "facts"} & patch.model_fields_set:
        record = _storage().edit_memory_record(record_id, patch.title, patch.summary, patch.facts)
        pipeline.enqueue_embed([record_id])
    return jsonify(_record(record))


@bp.delete("/v1/memories/<record_id>")
def delete_memory(record_id: str) -> tuple[str, int]:
    deleted = _storage().delete_memory_records([record_id]) if RECORD_ID_RE.match(record_id) else []
    if not deleted:
        raise ApiError(404, "no such memory record")
    return "", 204


@bp.get("/v1/timeline")
def timeline() -> Response:
    record_id = str_arg("record_id", max_len=64, required=True) or ""
    before = int_arg("before", 5, 0, 50)
    after = int_arg("after", 5, 0, 50)
    _get_record(record_id)
    items = _storage().timeline(record_id, before=before, after=after)
    return jsonify(items=[_record(r) for r in items])


@bp.get("/v1/projects")
def projects() -> Response:
    return jsonify(_storage().projects())


@bp.get("/v1/stats")
def stats() -> Response:
    return jsonify(_storage().stats(namespace_arg()))

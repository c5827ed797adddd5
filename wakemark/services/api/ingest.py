"""``POST /v1/events``: scrub → validate → store (one transaction, closed turns enqueued on
commit) → respond."""

from __future__ import annotations

from typing import Any

from flask import Blueprint, Response, jsonify, request
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from wakemark.services.api import current, security
from wakemark.services.api.errors import ApiError, validation_details
from wakemark.services.api.params import parse_json, query
from wakemark.services.api.schemas import IngestQuery
from wakemark.shared.models import MAX_BATCH, Event
from wakemark.shared.privacy import scrub

bp = Blueprint("ingest", __name__)


class EventBatch(BaseModel):
    model_config = ConfigDict(extra="forbid")

    events: list[Event] = Field(min_length=1, max_length=MAX_BATCH)


@bp.post("/v1/events")
def post_events() -> tuple[Response, int]:
    args = query(IngestQuery)
    retrieve, min_relevance = args.retrieve, args.min_relevance
    raw = request.get_data(cache=False)
    data = parse_json(raw)
    # Scrub before validation, so a secret cannot survive even in an error path.
    data = scrub(data)
    batch = isinstance(data, dict) and "events" in data
    events = _validate_batch(data) if batch else [_validate(data)]
    for event in events:
        security.require_scope(event.namespace)
        security.write_actor(event.actor_id)
    results, _ = current.store_events(events)
    if batch:
        return jsonify(results=[{"event_id": r.event_id, "stored": r.stored} for r in results]), 201
    body: dict[str, Any] = {"event_id": results[0].event_id, "stored": results[0].stored}
    if retrieve and events[0].kind == "prompt":
        prompt = current.as_stored(events[0], results[0])
        body["retrieval"] = current.retrieve_for(prompt, min_relevance).to_json()
    return jsonify(body), 201


def _validate(data: Any) -> Event:
    try:
        return Event.model_validate(data)
    except ValidationError as exc:
        raise ApiError(422, "invalid event", validation_details(exc)) from None


def _validate_batch(data: dict[str, Any]) -> list[Event]:
    """All or nothing: every item is checked before anything is written; each error
    names its item's ``index`` and the location inside that item."""
    try:
        return EventBatch.model_validate(data).events
    except ValidationError as exc:
        details = []
        for d in validation_details(exc):
            loc = d["loc"]
            if len(loc) >= 2 and loc[0] == "events" and isinstance(loc[1], int):
                d = {"index": loc[1], **d, "loc": loc[2:]}
            details.append(d)
        indexed = [d["index"] for d in details if "index" in d]
        where = f"event at index {indexed[0]}" if indexed else "batch"
        raise ApiError(422, f"invalid {where}; nothing stored", details) from None

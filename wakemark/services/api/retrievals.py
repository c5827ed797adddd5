"""``GET /v1/retrievals``: the audit of prompt-time retrievals (what the gate decided),
row by row or summed per session; both page by key."""

from __future__ import annotations

import re

from flask import Blueprint, Response, jsonify

from wakemark.services.api import security
from wakemark.services.api.current import runtime
from wakemark.services.api.params import query
from wakemark.services.api.schemas import (
    RetrievalSessionsQuery,
    RetrievalsQuery,
    cursor,
    parse_cursor,
)
from wakemark.shared.models import ULID_PATTERN

bp = Blueprint("retrievals", __name__)


@bp.before_request
def _written() -> None:
    # Rows are written after the answer: store this process's queued ones before reading.
    runtime().retriever.flush_audit()


@bp.get("/v1/retrievals")
def list_retrievals() -> Response:
    args = query(RetrievalsQuery)
    after = parse_cursor(args.after) if args.after else None
    rows = runtime().storage.list_retrievals(args.namespace, args.session_id, args.limit, after)
    last = rows[-1] if len(rows) == args.limit else None
    return jsonify(
        items=[r.model_dump(mode="json") for r in rows],
        next=cursor(last.created_at, last.retrieval_id) if last else None,
    )


@bp.get("/v1/retrievals/sessions")
def list_sessions() -> Response:
    args = query(RetrievalSessionsQuery)
    after = parse_cursor(args.after) if args.after else None
    sessions = runtime().storage.retrieval_sessions(args.namespace, args.limit, after)
    last = sessions[-1] if len(sessions) == args.limit else None
    items = [
        {
            "namespace": s.namespace,
            "session_id": s.session_id,
            "prompts": s.prompts,
            "injected": s.injected,
            "records": s.records,
            "bytes": s.bytes,
            "mean_latency_ms": round(s.latency_ms / s.prompts, 2),
            "first_at": s.first_at.isoformat(),
            "last_at": s.last_at.isoformat(),
        }
        for s in sessions
    ]
    return jsonify(items=items, next=cursor(last.last_at, last.session_id) if last else None)


@bp.get("/v1/retrievals/<retrieval_id>")
def get_retrieval(retrieval_id: str) -> Response:
    # Ids are ULIDs: anything else (a NUL Postgres would refuse, say) is simply unknown.
    known = re.fullmatch(ULID_PATTERN[1:-1], retrieval_id) is not None
    row = runtime().storage.get_retrieval(retrieval_id) if known else None
    return jsonify(security.owned(row, "retrieval").model_dump(mode="json"))

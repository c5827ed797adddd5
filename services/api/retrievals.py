"""``GET /v1/retrievals``: the audit of prompt-time retrievals (what the gate decided)."""

from __future__ import annotations

import re

from flask import Blueprint, Response, jsonify

from wakemark.services.api import security
from wakemark.services.api.current import runtime
from wakemark.services.api.params import query
from wakemark.services.api.schemas import RetrievalsQuery
from wakemark.shared.models import ULID_PATTERN

bp = Blueprint("retrievals", __name__)


@bp.get("/v1/retrievals")
def list_retrievals() -> Response:
    args = query(RetrievalsQuery)
    rows = runtime().storage.list_retrievals(args.namespace, args.session_id, args.limit)
    return jsonify(items=[r.model_dump(mode="json") for r in rows])


@bp.get("/v1/retrievals/<retrieval_id>")
def get_retrieval(retrieval_id: str) -> Response:
    # Ids are ULIDs: anything else (a NUL Postgres would refuse, say) is simply unknown.
    known = re.fullmatch(ULID_PATTERN[1:-1], retrieval_id) is not None
    row = runtime().storage.get_retrieval(retrieval_id) if known else None
    return jsonify(security.owned(row, "retrieval").model_dump(mode="json"))

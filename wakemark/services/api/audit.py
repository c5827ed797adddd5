"""``GET /v1/audit``: the audit log of destructive actions, newest first (operator only)."""

from __future__ import annotations

from flask import Blueprint, Response, jsonify

from wakemark.services.api.current import runtime
from wakemark.services.api.params import query
from wakemark.services.api.schemas import AuditQuery
from wakemark.services.api.security import bootstrap_only

bp = Blueprint("audit", __name__)


@bp.get("/v1/audit")
@bootstrap_only
def audit_log() -> Response:
    entries = runtime().storage.list_audit(query(AuditQuery).limit)
    return jsonify(items=[{**vars(e), "targets": list(e.targets)} for e in entries])

"""``GET /health``: public liveness and state, never any user content."""

from __future__ import annotations

from flask import Blueprint, current_app, jsonify

from shared import __version__

bp = Blueprint("health", __name__)


@bp.get("/health")
def health():  # type: ignore[no-untyped-def]
    runtime = current_app.extensions["engram"]
    return jsonify(status="ok", version=__version__, backend=runtime.settings.backend)

"""The HTTP API: ``create_app`` builds the Flask app; ``wsgi.py`` serves it."""

from __future__ import annotations

from contextlib import nullcontext
from datetime import datetime
from typing import Any

from flask import Blueprint, Flask
from flask.json.provider import DefaultJSONProvider
from werkzeug.routing import BaseConverter

from wakemark.services.api import errors, metrics, params, security
from wakemark.shared.config import Settings
from wakemark.shared.models import MAX_REQUEST_BYTES, RECORD_ID_PATTERN
from wakemark.shared.registry import Registry
from wakemark.shared.runtime import Runtime

# The API's route groups, registered in this order.
BLUEPRINTS: Registry[Blueprint] = Registry(
    "blueprint",
    {
        "health": "wakemark.services.api.health:bp",
        "ingest": "wakemark.services.api.ingest:bp",
        "hooks": "wakemark.services.api.hooks:bp",
        "resources": "wakemark.services.api.resources:bp",
        "metrics": "wakemark.services.api.metrics:bp",
        "search": "wakemark.services.api.search:bp",
        "retrievals": "wakemark.services.api.retrievals:bp",
        "openapi": "wakemark.services.api.openapi:bp",
        "export": "wakemark.services.api.export:bp",
        "audit": "wakemark.services.api.audit:bp",
        "ui": "wakemark.services.ui.pages:bp",
        "viewer": "wakemark.services.api.viewer:bp",
    },
)


def create_app(settings: Settings | None = None, runtime: Runtime | None = None) -> Flask:
    runtime = runtime or Runtime.build(settings)
    app = Flask(__name__)
    app.json = _JSONProvider(app)
    # Over this, werkzeug raises 413 before a view reads the body.
    app.config["MAX_CONTENT_LENGTH"] = MAX_REQUEST_BYTES
    app.extensions["wakemark"] = runtime
    # Order matters: errors first (everything below raises ApiError), then Host/token/
    # Origin checks, then the content-type check, then per-request metrics.
    errors.init_app(app)
    security.init_app(app, runtime.settings)
    params.init_app(app)
    metrics.init_app(app)
    app.url_map.converters["record"] = RecordIdConverter
    for blueprint in BLUEPRINTS.values():
        app.register_blueprint(blueprint)
    app.wsgi_app = _Serving(app.wsgi_app, runtime)  # type: ignore[method-assign]
    return app


class RecordIdConverter(BaseConverter):
    """``<record:record_id>``: only a record id (``mr_`` + ULID) matches, so a sibling
    route such as ``/v1/memories/delete`` is never taken for a record, and a malformed id
    is a plain 404 before any view runs."""

    regex = RECORD_ID_PATTERN[1:-1]


class _Serving:
    """Marks each request as in flight for the job dispatcher: in embedded mode, queued
    extraction and embedding wait for a pause in requests (``shared/jobs/inprocess``)."""

    def __init__(self, wsgi_app: Any, runtime: Runtime) -> None:
        self._wsgi_app = wsgi_app
        self._runtime = runtime

    def __call__(self, environ: Any, start_response: Any) -> Any:
        try:
            scope = self._runtime.jobs.serving()
        except Exception:  # no dispatcher: the request is served all the same
            scope = nullcontext()
        with scope:
            return self._wsgi_app(environ, start_response)


class _JSONProvider(DefaultJSONProvider):
    """ISO-8601 datetimes (Flask's default is an HTTP date), keys in insertion order."""

    sort_keys = False
    compact = True

    @staticmethod
    def default(o: Any) -> Any:
        if isinstance(o, datetime):
            return o.isoformat()
        return DefaultJSONProvider.default(o)

"""``GET /v1/search`` (hybrid search) and ``GET /v1/context`` (session-start index)."""

from __future__ import annotations

from collections.abc import Iterable

from flask import Blueprint, Response, current_app, jsonify

from wakemark.services.api import metrics
from wakemark.services.api.current import runtime
from wakemark.services.api.errors import ApiError
from wakemark.services.api.params import float_arg, int_arg, namespace_arg, str_arg
from wakemark.shared.models import OBSERVATION_TYPES

bp = Blueprint("search", __name__)

MAX_CONTEXT_BYTES = 9500  # the agents' hook output limit, with headroom
MAX_QUERY_CHARS = 4000


@bp.get("/v1/search")
def search() -> Response:
    namespace = namespace_arg(required=True)
    query = str_arg("q", max_len=MAX_QUERY_CHARS, required=True)
    limit = int_arg("limit", 10, 1, 100)
    observation_type = str_arg("type", max_len=50)
    if observation_type is not None and observation_type not in OBSERVATION_TYPES:
        raise ApiError(400, f"type must be one of {', '.join(OBSERVATION_TYPES)}")
    days = int_arg("days", 0, 1, 36_500) or None
    min_relevance = float_arg("min_relevance", 0.0, 1.0)
    assert namespace is not None and query is not None  # required=True
    result = runtime().retriever.search(namespace, query, limit, observation_type, days)
    if min_relevance is not None:
        result = result.at_least(min_relevance)
    return jsonify(result.to_json())


@bp.get("/v1/context")
def context() -> Response:
    namespace = namespace_arg(required=True)
    default = runtime().settings.context_max_bytes
    max_bytes = int_arg("max_bytes", default, 1, MAX_CONTEXT_BYTES)
    assert namespace is not None
    return jsonify(runtime().retriever.session_index(namespace, max_bytes))


def _prometheus_lines() -> Iterable[str]:
    # Called inside the /metrics request, so the app (and its runtime) is current.
    return current_app.extensions["wakemark"].retriever.prometheus_lines()


@bp.record_once
def _register_metrics(_state: object) -> None:
    metrics.register(_prometheus_lines)

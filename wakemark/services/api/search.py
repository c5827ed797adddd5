"""``GET /v1/search`` (hybrid search) and ``GET /v1/context`` (session-start index)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from flask import Blueprint, Response, current_app, jsonify

from wakemark.services.api import metrics
from wakemark.services.api.current import reads_client_files, runtime
from wakemark.services.api.params import query
from wakemark.services.api.resources import version_json
from wakemark.services.api.schemas import CodeStateQuery, ContextQuery, SearchQuery
from wakemark.shared.retrieval.staleness import NOT_READ, Verdict

bp = Blueprint("search", __name__)


@bp.get("/v1/search")
def search() -> Response:
    args = query(SearchQuery)
    result = runtime().retriever.search(args.namespace, args.q, args.limit, args.type, args.days)
    if args.min_relevance is not None:
        result = result.at_least(args.min_relevance)
    body = result.to_json()
    if args.superseded:  # hits are current records; their older versions on request
        history = runtime().storage.get_history
        ids = [h.record.record_id for h in result.items]
        body["superseded"] = [version_json(v) for rid in ids for v in history(rid)]
    if reads_client_files():
        # Each hit's state against the project's files now (``shared/retrieval/staleness.py``).
        verdicts = runtime().retriever.code_verdicts([h.record.record_id for h in result.items])
        for item in body["items"]:
            verdict = verdicts.get(item["record"]["record_id"])
            if verdict is not None:
                item["code"] = _code_json(verdict)
    return jsonify(body)


@bp.get("/v1/memories/code")
def code_state() -> Response:
    """Each listed record's state against the project's files now (the viewer's badges):
    records without anchors, or of another scope, are left out; ``checked`` is false when
    this server does not read the client's files."""
    args = query(CodeStateQuery)
    ids = list(dict.fromkeys(i for i in args.ids.split(",") if i))
    if not reads_client_files():
        return jsonify({"checked": False, "note": NOT_READ, "items": {}})
    records = runtime().storage.get_memory_records(ids)
    mine = [r.record_id for r in records if r.namespace.startswith(args.namespace)]
    verdicts = runtime().retriever.code_verdicts(mine)
    items = {rid: _code_json(v) for rid, v in verdicts.items()}
    return jsonify({"checked": True, "note": "", "items": items})


def _code_json(verdict: Verdict) -> dict[str, Any]:
    return {"state": verdict.state, "paths": list(verdict.paths),
            "identifiers": list(verdict.identifiers)}  # fmt: skip


@bp.get("/v1/context")
def context() -> Response:
    args = query(ContextQuery)
    max_bytes = args.max_bytes or runtime().settings.context_max_bytes
    index = runtime().retriever.session_index(args.namespace, max_bytes, reads_client_files())
    return jsonify(index.to_json())


def _prometheus_lines() -> Iterable[str]:
    # Called inside the /metrics request, so the app (and its runtime) is current.
    return current_app.extensions["wakemark"].retriever.prometheus_lines()


@bp.record_once
def _register_metrics(_state: object) -> None:
    metrics.register(_prometheus_lines)

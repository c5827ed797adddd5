"""``GET /v1/search`` (hybrid search), ``GET /v1/context`` (session-start index) and the
records' code states: checked here for a local client, or by a team client itself from
the anchors it reads (``wakemark verify``)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from flask import Blueprint, Response, current_app, jsonify
from pydantic import BaseModel, ConfigDict, Field

from wakemark.services.api import metrics, security
from wakemark.services.api.current import project_root, reads_client_files, runtime
from wakemark.services.api.errors import ApiError
from wakemark.services.api.params import json_object, query
from wakemark.services.api.resources import version_json
from wakemark.services.api.schemas import (
    MAX_RETIRE_IDS,
    AnchorsQuery,
    CodeStateQuery,
    ContextQuery,
    SearchQuery,
)
from wakemark.shared.models import Namespace, RecordId
from wakemark.shared.retrieval.staleness import NOT_READ, Verdict
from wakemark.shared.storage import CodeAnchors

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
        ids = [h.record.record_id for h in result.items]
        verdicts = runtime().retriever.code_verdicts(ids, root=project_root(args.namespace))
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
    verdicts = runtime().retriever.code_verdicts(mine, root=project_root(args.namespace))
    items = {rid: _code_json(v) for rid, v in verdicts.items()}
    return jsonify({"checked": True, "note": "", "items": items})


@bp.get("/v1/memories/anchors")
def anchors() -> Response:
    """A page of the project's current records with what each cites in the code, for a
    client that checks them against its own files (``wakemark verify`` on a team
    server's client): paths, the hashes and blob ids taken at capture, identifiers."""
    args = query(AnchorsQuery)
    storage = runtime().storage
    page = storage.list_anchors(args.namespace, args.limit, args.after)
    # list_anchors takes a prefix: this very project's records only, with their titles.
    titles = {r.record_id: r.title for r in storage.get_memory_records([a.record_id for a in page])
              if r.namespace == args.namespace}  # fmt: skip
    items = [_anchors_json(a, titles[a.record_id]) for a in page if a.record_id in titles]
    last = page[-1].record_id if len(page) == args.limit else None
    return jsonify(items=items, next=last)


def _anchors_json(anchors: CodeAnchors, title: str) -> dict[str, Any]:
    files = [{"path": f.path, "sha256": f.sha256, "blob": f.blob} for f in anchors.files]
    return {"record_id": anchors.record_id, "title": title, "files": files,
            "identifiers": list(anchors.identifiers)}  # fmt: skip


class Retire(BaseModel):
    """``POST /v1/memories/retire``: records a client found gone from its files."""

    model_config = ConfigDict(extra="forbid")

    namespace: Namespace
    ids: list[RecordId] = Field(min_length=1, max_length=MAX_RETIRE_IDS)


@bp.post("/v1/memories/retire")
def retire() -> Response:
    """Delete the listed records, all or none: each must be a current record of
    ``namespace`` (else 404 naming the first few, as for ids that do not exist). The
    server cannot see the client's files: that they are gone is the client's word, as a
    delete by id is."""
    req = Retire.model_validate(json_object())
    security.require_scope(req.namespace)
    ids = list(dict.fromkeys(req.ids))
    storage = runtime().storage
    mine = {r.record_id for r in storage.get_memory_records(ids) if r.namespace == req.namespace}
    missing = [i for i in ids if i not in mine]
    if missing:
        raise ApiError(
            404, f"not current memories of {req.namespace}: {', '.join(missing[:5])}"
            + (f" and {len(missing) - 5} more" if len(missing) > 5 else "")
        )  # fmt: skip
    with storage.transaction() as tx:
        # One superseded or deleted since the check above is simply not deleted now.
        deleted = tx.delete_memory_records(ids)
        if deleted:
            security.audit(tx, "retire", req.namespace, deleted)
    return jsonify(retired=deleted)


def _code_json(verdict: Verdict) -> dict[str, Any]:
    return {"state": verdict.state, "paths": list(verdict.paths),
            "identifiers": list(verdict.identifiers)}  # fmt: skip


@bp.get("/v1/context")
def context() -> Response:
    args = query(ContextQuery)
    max_bytes = args.max_bytes or runtime().settings.context_max_bytes
    read_files = reads_client_files()
    root = project_root(args.namespace) if read_files else None
    index = runtime().retriever.session_index(args.namespace, max_bytes, read_files, root=root)
    return jsonify(index.to_json())


def _prometheus_lines() -> Iterable[str]:
    # Called inside the /metrics request, so the app (and its runtime) is current.
    return current_app.extensions["wakemark"].retriever.prometheus_lines()


@bp.record_once
def _register_metrics(_state: object) -> None:
    metrics.register(_prometheus_lines)

"""``GET /health``: liveness for anyone, state for a token, never any user content.

Without a token it answers only ``status`` and ``version``: figures about the server's
users (pending work, database size, LLM spend, gate totals) are for its operator. The
bootstrap token sees everything; a scoped token sees only its own scope's pending work
and gate totals, and the embedder's state without its error text.

Each part reports independently: a missing or failing part shows up as its own field
(``null``/``error``) instead of failing the whole check. Only an unreachable database
makes the service ``degraded`` (503), since nothing can be stored then.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

from flask import Blueprint, Response, current_app, g, jsonify

from wakemark.services.api import client_files, hooks, optout
from wakemark.services.api.current import runtime
from wakemark.shared import __version__, tokens

log = logging.getLogger("wakemark.api")

bp = Blueprint("health", __name__)

_STORED_TTL_S = 2.0  # counting pending rows is a scan; monitors may poll every second
_stored_lock = threading.Lock()


def _stored(storage: Any, prefix: str | None) -> dict[str, dict[str, Any]]:
    """What the database says under ``prefix`` (None: all of it): pending work and the
    relevance gate's totals from the stored retrieval audit (every prompt since the audit
    began, across restarts and processes); for the whole database also turns skipped by
    reason (``command``, ``meta``, ``trivial``, ``error``, ``empty``: extracted without a
    record; their events are kept) and its size."""
    # Cached per app (each test app has its own database) and scope, shared by the app's
    # threads; the scopes are those of stored tokens, so the cache stays small.
    cache: dict[str | None, tuple[float, dict[str, dict[str, Any]]]]
    cache = current_app.extensions.setdefault("wakemark.health_stored", {})
    now = time.monotonic()
    with _stored_lock:
        hit = cache.get(prefix)
        if hit is not None and now - hit[0] < _STORED_TTL_S:
            return {k: dict(v) for k, v in hit[1].items()}
    stats = storage.stats(prefix)
    value = {
        "pending": {
            "extraction": int(stats.get("pending_extraction", 0)),
            "embedding": int(stats.get("pending_embedding", 0)),
        },
        "gate": _gate(storage.retrieval_totals(prefix)),
    }
    if prefix is None:
        value["skipped"] = dict(sorted(storage.skipped_turns().items()))
        value["database"] = {"bytes": storage.database_bytes()}
    with _stored_lock:
        cache[prefix] = (now, value)
    return {k: dict(v) for k, v in value.items()}


def _gate(totals: dict[str, float]) -> dict[str, Any]:
    prompts, injected = int(totals["prompts"]), int(totals["injected"])
    return {
        "prompts": prompts,
        "injected": injected,
        "injected_share": round(injected / prompts, 4) if prompts else None,
        "mean_records": round(totals["records"] / injected, 2) if injected else None,
        "mean_bytes": round(totals["bytes"] / injected, 1) if injected else None,
        "mean_latency_ms": round(totals["latency_ms"] / prompts, 2) if prompts else None,
    }


def _jobs(rt: Any) -> dict[str, Any]:
    try:
        jobs = rt.jobs
        return {"mode": jobs.mode, "queue_depth": jobs.queue_depth()}
    except Exception as exc:
        log.debug("health: jobs unavailable: %r", exc)
        return {"mode": None, "queue_depth": None, "error": exc.__class__.__name__}


def _embedder(rt: Any, with_reason: bool) -> dict[str, Any]:
    try:
        embedder = rt.embedder
    except Exception as exc:
        return {"state": "error", "reason": exc.__class__.__name__}
    out = {"state": str(getattr(embedder, "state", "unknown"))}
    if out["state"] == "ready":
        out["model"] = str(embedder.identity)  # the vectors it makes (EmbeddingModels)
    reason = getattr(embedder, "reason", None)
    if reason and with_reason:  # the text may name the operator's paths
        out["reason"] = str(reason)[:200]
    switch = getattr(embedder, "switch_state", None)  # loading the stored model, or why not
    if switch and with_reason:
        out["switch"] = str(switch)[:400]
    return out


def _llm(rt: Any) -> dict[str, Any]:
    from wakemark.shared.extraction import llm_usage

    try:
        return llm_usage(rt.settings)
    except Exception as exc:
        return {"error": exc.__class__.__name__}


def _search(rt: Any) -> dict[str, Any]:
    try:
        return dict(rt.retriever.metrics())
    except Exception as exc:
        return {"error": exc.__class__.__name__}


@bp.get("/health")
def health() -> tuple[Response, int]:
    rt = runtime()
    # Set by the guard only when the request carried a valid token (401 for a bad one).
    who: tokens.Principal | None = g.get("wakemark_principal")
    try:
        storage = rt.storage
        storage.ping()
    except Exception as exc:
        log.warning("health: database unreachable: %r", exc)
        storage = None
    body: dict[str, Any] = {"status": "ok" if storage else "degraded", "version": __version__}
    status = 200 if storage else 503
    if who is None:
        return jsonify(body), status
    operator = who is tokens.BOOTSTRAP
    body["backend"] = rt.settings.backend
    if storage is not None:
        body.update(_stored(storage, who.prefix))
    else:
        body["pending"] = body["gate"] = None
        if operator:
            body["skipped"] = body["database"] = None
    body["embedder"] = _embedder(rt, with_reason=operator)
    if not operator:
        return jsonify(body), status
    body["jobs"] = _jobs(rt)
    body["search"] = _search(rt)
    body["llm"] = _llm(rt)
    body["dropped"] = {"ignored_project": optout.dropped()}
    # Turns that reached storage incomplete (this process's counts since it started).
    body["capture"] = {
        "stop_without_answer": hooks.STOP_WITHOUT_ANSWER.value,
        "file_reads_refused": client_files.REFUSED.value,
    }
    return jsonify(body), status

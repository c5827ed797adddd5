"""``GET /health``: public liveness and state, never any user content.

Each part reports independently: a missing or failing part shows up as its own field
(``null``/``error``) instead of failing the whole check. Only an unreachable database
makes the service ``degraded`` (503), since nothing can be stored then.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

from flask import Blueprint, Response, current_app, jsonify

from wakemark.services.api import client_files, hooks, optout
from wakemark.services.api.current import runtime
from wakemark.shared import __version__

log = logging.getLogger("wakemark.api")

bp = Blueprint("health", __name__)

_STORED_TTL_S = 2.0  # counting pending rows is a scan; monitors may poll every second
_stored_lock = threading.Lock()


def _stored(storage: Any) -> dict[str, dict[str, Any]]:
    """What the database says: pending work, turns skipped by reason (``command``,
    ``meta``, ``trivial``, ``error``, ``empty``: extracted without a record; their events
    are kept), its size, and the relevance gate's totals from the stored retrieval audit
    (every prompt since the audit began, across restarts and processes)."""
    # Cached per app (each test app has its own database), shared by the app's threads.
    cache = current_app.extensions.setdefault("wakemark.health_stored", {"at": 0.0, "value": None})
    now = time.monotonic()
    with _stored_lock:
        if cache["value"] is not None and now - cache["at"] < _STORED_TTL_S:
            return {k: dict(v) for k, v in cache["value"].items()}
    stats = storage.stats()
    value = {
        "pending": {
            "extraction": int(stats.get("pending_extraction", 0)),
            "embedding": int(stats.get("pending_embedding", 0)),
        },
        "skipped": dict(sorted(storage.skipped_turns().items())),
        "database": {"bytes": storage.database_bytes()},
        "gate": _gate(storage.retrieval_totals()),
    }
    with _stored_lock:
        cache.update(at=now, value=value)
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


def _embedder(rt: Any) -> dict[str, Any]:
    try:
        embedder = rt.embedder
    except Exception as exc:
        return {"state": "error", "reason": exc.__class__.__name__}
    out = {"state": str(getattr(embedder, "state", "unknown"))}
    reason = getattr(embedder, "reason", None)
    if reason:
        out["reason"] = str(reason)[:200]
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
    body: dict[str, Any] = {
        "status": "ok",
        "version": __version__,
        "backend": rt.settings.backend,
    }
    status = 200
    try:
        storage = rt.storage
        storage.ping()
        body.update(_stored(storage))
    except Exception as exc:
        log.warning("health: database unreachable: %r", exc)
        body["status"] = "degraded"
        body["pending"] = body["skipped"] = body["database"] = body["gate"] = None
        status = 503
    body["jobs"] = _jobs(rt)
    body["embedder"] = _embedder(rt)
    body["search"] = _search(rt)
    body["llm"] = _llm(rt)
    body["dropped"] = {"ignored_project": optout.dropped()}
    # Turns that reached storage incomplete (this process's counts since it started).
    body["capture"] = {
        "stop_without_answer": hooks.STOP_WITHOUT_ANSWER.value,
        "file_reads_refused": client_files.REFUSED.value,
    }
    return jsonify(body), status

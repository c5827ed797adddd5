"""What views share beyond parsing: the runtime, enqueue-after-commit, retrieval."""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from typing import Any

from flask import current_app

from wakemark.shared.models import Event
from wakemark.shared.runtime import Runtime

log = logging.getLogger("wakemark.api")

_EMPTY_RETRIEVAL: dict[str, Any] = {"context": "", "records": [], "latency_ms": 0}


def runtime() -> Runtime:
    rt: Runtime = current_app.extensions["wakemark"]
    return rt


class _LogOnce:
    """Log the first failure of a kind, stay quiet until it recovers (no log floods)."""

    def __init__(self) -> None:
        self._failing: set[str] = set()
        self._lock = threading.Lock()

    def failed(self, kind: str, exc: BaseException) -> None:
        with self._lock:
            first = kind not in self._failing
            self._failing.add(kind)
        if first:
            log.warning("%s failed (the sweep will catch up): %r", kind, exc)

    def ok(self, kind: str) -> None:
        if kind in self._failing:
            with self._lock:
                self._failing.discard(kind)
            log.info("%s recovered", kind)


_once = _LogOnce()


def enqueue_extract(turn_ids: Sequence[str]) -> None:
    """Called after commit. Never fails the request: the database remembers the work."""
    if not turn_ids:
        return
    try:
        runtime().jobs.enqueue_extract(list(turn_ids))
    except Exception as exc:
        _once.failed("enqueue_extract", exc)
    else:
        _once.ok("enqueue_extract")


def enqueue_embed(record_ids: Sequence[str]) -> None:
    if not record_ids:
        return
    try:
        runtime().jobs.enqueue_embed(list(record_ids))
    except Exception as exc:
        _once.failed("enqueue_embed", exc)
    else:
        _once.ok("enqueue_embed")


def retrieve_for(event: Event, min_relevance: float | None = None) -> dict[str, Any]:
    """Context for a prompt; retrieval degrades to an empty result, never an error."""
    try:
        result = runtime().retriever.for_prompt(event.namespace, event, min_relevance)
    except Exception as exc:
        _once.failed("retrieval", exc)
        return dict(_EMPTY_RETRIEVAL)
    _once.ok("retrieval")
    records = [getattr(r, "record_id", r) for r in result.get("records", [])]
    out = {
        "context": result.get("context", ""),
        "records": records,
        "latency_ms": result.get("latency_ms", 0),
    }
    if result.get("retrieval_id"):
        out["retrieval_id"] = result["retrieval_id"]  # its audit row: GET /v1/retrievals/<id>
    return out

"""``GET /metrics``: Prometheus text; request counters plus whatever other parts register.

Counters live in the process, so with several gunicorn workers each reports its own
share (scrape with a ``worker`` view in mind, or run one worker). Other modules add
their series with ``register(callback)``; a callback returns exposition lines and is
called on each scrape (a failing callback is skipped, it never breaks the scrape).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable

from flask import Blueprint, Flask, Response, request

from wakemark.services.api.security import bootstrap_only

log = logging.getLogger("wakemark.api")

bp = Blueprint("metrics", __name__)

Callback = Callable[[], Iterable[str]]
_callbacks: list[Callback] = []
_lock = threading.Lock()
_requests: dict[tuple[str, str, int], int] = {}
# gunicorn accepts any token as a method: counting each name seen would let a client add
# series without end, so every method outside HTTP's own is counted under one label.
KNOWN_METHODS = frozenset(
    {"GET", "HEAD", "POST", "PUT", "DELETE", "PATCH", "OPTIONS", "TRACE", "CONNECT"}
)


def register(callback: Callback) -> None:
    """Add a source of exposition lines (``# HELP``/``# TYPE`` lines included)."""
    with _lock:
        if callback not in _callbacks:
            _callbacks.append(callback)


class Counter:
    """A process-wide counter; ``register(counter.lines)`` puts it on the scrape."""

    def __init__(self, name: str, help_text: str) -> None:
        self.name = name
        self.help_text = help_text
        self.value = 0
        self._lock = threading.Lock()

    def inc(self) -> None:
        with self._lock:
            self.value += 1

    def lines(self) -> list[str]:
        return [
            f"# HELP {self.name} {self.help_text}",
            f"# TYPE {self.name} counter",
            f"{self.name} {self.value}",
        ]


def init_app(app: Flask) -> None:
    @app.after_request
    def _count(response: Response) -> Response:
        # The route pattern (not the path) keeps the label set small: ids never leak in.
        route = request.url_rule.rule if request.url_rule is not None else "unmatched"
        method = request.method if request.method in KNOWN_METHODS else "OTHER"
        key = (method, route, response.status_code)
        with _lock:
            _requests[key] = _requests.get(key, 0) + 1
        return response


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def render() -> str:
    lines = [
        "# HELP wakemark_http_requests_total HTTP requests served by this process.",
        "# TYPE wakemark_http_requests_total counter",
    ]
    with _lock:
        counts = sorted(_requests.items())
        callbacks = list(_callbacks)
    for (method, route, status), n in counts:
        lines.append(
            f'wakemark_http_requests_total{{method="{method}",route="{_escape(route)}",'
            f'status="{status}"}} {n}'
        )
    for callback in callbacks:
        try:
            lines.extend(callback())
        except Exception:
            log.exception("metrics callback failed")
    return "\n".join(lines) + "\n"


@bp.get("/metrics")
@bootstrap_only  # the whole server's traffic, not one actor's
def metrics() -> Response:
    return Response(render(), mimetype="text/plain; version=0.0.4")

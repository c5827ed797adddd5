"""In-process search metrics: counts and latency percentiles over a bounded window."""

from __future__ import annotations

import threading
from collections import deque

import numpy as np

WINDOW = 2048  # latest searches kept for percentiles: bounded memory, recent behaviour


class SearchMetrics:
    def __init__(self, window: int = WINDOW) -> None:
        self._lock = threading.Lock()
        self._latencies: deque[float] = deque(maxlen=window)
        self.requests = 0
        self.degraded = 0
        self.timeouts = 0
        self.errors = 0
        self.zero_lexical = 0

    def record(
        self,
        latency_ms: float,
        *,
        degraded: bool = False,
        timed_out: bool = False,
        error: bool = False,
        lexical_hits: int | None = None,
    ) -> None:
        with self._lock:
            self.requests += 1
            self._latencies.append(latency_ms)
            self.degraded += degraded
            self.timeouts += timed_out
            self.errors += error
            self.zero_lexical += lexical_hits == 0

    def snapshot(self) -> dict[str, float | int]:
        """Counts and rates only: never any query or record text."""
        with self._lock:
            lat = np.fromiter(self._latencies, dtype=np.float64)
            requests = self.requests
            out: dict[str, float | int] = {
                "requests": requests,
                "p50_ms": round(float(np.percentile(lat, 50)), 2) if lat.size else 0.0,
                "p95_ms": round(float(np.percentile(lat, 95)), 2) if lat.size else 0.0,
                "degraded_rate": round(self.degraded / requests, 4) if requests else 0.0,
                "timeouts": self.timeouts,
                "errors": self.errors,
                "zero_lexical_hits": self.zero_lexical,
            }
        return out

    def prometheus_lines(self) -> list[str]:
        snap = self.snapshot()
        return [
            "# HELP wakemark_search_requests_total Searches run by this process.",
            "# TYPE wakemark_search_requests_total counter",
            f"wakemark_search_requests_total {snap['requests']}",
            "# HELP wakemark_search_latency_ms Search latency over the recent window.",
            "# TYPE wakemark_search_latency_ms gauge",
            f'wakemark_search_latency_ms{{quantile="0.5"}} {snap["p50_ms"]}',
            f'wakemark_search_latency_ms{{quantile="0.95"}} {snap["p95_ms"]}',
            "# HELP wakemark_search_degraded_ratio Share of searches that fell back to lexical.",
            "# TYPE wakemark_search_degraded_ratio gauge",
            f"wakemark_search_degraded_ratio {snap['degraded_rate']}",
            "# HELP wakemark_search_timeouts_total Searches past the retrieval budget.",
            "# TYPE wakemark_search_timeouts_total counter",
            f"wakemark_search_timeouts_total {snap['timeouts']}",
            "# HELP wakemark_search_errors_total Searches that failed and returned empty.",
            "# TYPE wakemark_search_errors_total counter",
            f"wakemark_search_errors_total {snap['errors']}",
            "# HELP wakemark_search_zero_lexical_total Searches whose lexical leg found nothing.",
            "# TYPE wakemark_search_zero_lexical_total counter",
            f"wakemark_search_zero_lexical_total {snap['zero_lexical_hits']}",
        ]

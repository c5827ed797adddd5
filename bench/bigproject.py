"""One big project on a team server: the 200k-record project of ``bench scale``'s million
searched by a single client through a real API (``wakemark serve``, 2 workers), its query
vectors MiniLM embeddings of the query text (the API's own), with the default vector cache
(too small for the project: the vector side is the HNSW walk in Postgres) and with one
that holds it (the int8 scan in the process), alternating, ``PAIRS`` pairs. With the
larger cache the timed searches start once every worker holds the project (its load is
the first minute of a worker, not the steady state).

Run: ``python -m bench bigproject`` after ``python -m bench scale`` has built the million
(``WAKEMARK_SCALE_DATABASE_URL``; this bench builds it too if it is missing).
``WAKEMARK_BIGPROJECT_CACHE_MB`` sets the larger cache (default 400).
"""

from __future__ import annotations

import os
import random
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench import _scale_data as data
from bench.scale import ADMIN_URL, URL, _Api, _query_texts, _searches
from wakemark.shared.config import Settings

PAIRS = 2
SEARCHES = 200
DEFAULT_MB = str(Settings().vector_cache_mb)
HELD_MB = os.environ.get("WAKEMARK_BIGPROJECT_CACHE_MB", "400")
TARGET_P95_MS = 50.0
# /health reads that must each find the project held before the timed searches: each
# worker answers its own, so one read could see the worker that loaded it while the other
# still searches Postgres (2 workers: each read misses one with odds 1/2).
HEALTH_READS = 8


def _cache(api: _Api) -> dict[str, Any]:
    return dict(api.get("/health").get("search", {}).get("vector_cache") or {})


def _held(api: _Api) -> bool:
    """Whether the worker that answered holds the big project in its cache."""
    return bool(_cache(api).get("rows", 0) >= data.spaces()[0].size)


def _measure(model: Path, cache_mb: str, seed: int) -> dict[str, Any]:
    rng = random.Random(seed)
    small = data.spaces()[1].namespace
    with tempfile.TemporaryDirectory() as home:
        api = _Api(Path(home), model, WAKEMARK_VECTOR_CACHE_MB=cache_mb)
        try:
            api.wait_ready([small])
            before = os.getloadavg()[0]
            # Untimed: the pools' first statements, and (with room for it) the project's
            # vectors loaded into each worker's cache while the database answers.
            _searches(api, [(data.BIG_NS, t) for t in _query_texts(rng, 20)])
            deadline = time.monotonic() + 300
            while cache_mb != DEFAULT_MB and time.monotonic() < deadline:
                if all(_held(api) for _ in range(HEALTH_READS)):
                    break
                _searches(api, [(data.BIG_NS, t) for t in _query_texts(rng, 4)])
                time.sleep(1.0)
            timed = _searches(api, [(data.BIG_NS, t) for t in _query_texts(rng, SEARCHES)])
            return {
                "cache_mb": int(cache_mb),
                "big": timed,
                "vector_cache": _cache(api),
                "rss": api.rss(),
                "load_avg": [round(before, 2), round(os.getloadavg()[0], 2)],
            }
        finally:
            api.close()


def run() -> dict[str, Any]:
    model = Settings.from_env().onnx_model_path
    build = data.build(ADMIN_URL, URL, log=lambda m: print(m, file=sys.stderr))
    runs = [
        _measure(model, cache_mb, 3 + pair)
        for pair in range(PAIRS)
        for cache_mb in (DEFAULT_MB, HELD_MB)
    ]
    return {"build": build, "runs": runs, "target_p95_ms": TARGET_P95_MS}


def markdown(result: dict[str, Any]) -> str:
    lines = [
        "# One big project on a team server",
        "",
        f"The 200k-record project of `bench scale`'s million, {SEARCHES} searches by one client "
        "through `wakemark serve` (2 workers), the API's own query vectors; the default vector "
        "cache (the vector side in Postgres) against one that holds the project (the int8 "
        f"scan in the process), alternating. Target: client p95 <= {result['target_p95_ms']} ms.",
        "",
        "| cache MB | client p50 | client p95 | server p95 | vector side in Postgres | "
        "worker RSS MB (peak) | load average |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in result["runs"]:
        big, cache = r["big"], r["vector_cache"]
        rss = ", ".join(f"{w['rss_mb']} ({w['peak_rss_mb']})" for w in r["rss"].values())
        lines.append(
            f"| {r['cache_mb']} | {big['client']['p50_ms']} | {big['client']['p95_ms']} | "
            f"{big['server']['p95_ms']} | {cache.get('database_searches')} searches | {rss} | "
            f"{r['load_avg']} |"
        )
    return "\n".join(lines) + "\n"

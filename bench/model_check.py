"""What the vector leg's reads of the database cost a search: the stored model
(``legs.MODEL_CHECK_S``) and, without Redis, the change stamp (``Vectors.change_stamp``).

A search from the cache reads the stored model when ``MODEL_CHECK_S`` has passed since
the last read: a busy server pays it on one search in that interval, a local server
whose searches come further apart than that on every one. Both are measured against
the leg that never reads it (the code before the check), in one process, 10k records
per backend (``bench/search.py``'s records and queries), the settings taking turns in
rounds of 50 searches so the machine's drift falls on each alike:

- ``never``: ``MODEL_CHECK_S`` infinite (the baseline of the model's read);
- ``default``: ``MODEL_CHECK_S`` as shipped;
- ``every``: ``MODEL_CHECK_S`` 0, every search reads (the sparse searcher);
- ``no stamp``: as ``never``, without the change stamp's read (the baseline of that read,
  which a process makes at every vector search when no Redis is set).

Beside them: each read alone and the query embedding's
p95 (the issue's yardstick). Postgres: ``WAKEMARK_BENCH_DATABASE_URL`` (default: the test
database), in a fresh schema dropped afterwards.
"""

from __future__ import annotations

import os
import random
import tempfile
import time
from pathlib import Path
from typing import Any

from bench._stats import percentiles
from bench.search import DEFAULT_PG, NS, _drop_schema, _fill, _pg_schema_url, _queries, _vacuum
from wakemark.shared.config import Settings, prepare_home
from wakemark.shared.retrieval import legs
from wakemark.shared.runtime import Runtime
from wakemark.shared.storage import migrate

RECORDS = 10_000
ROUND = 50
ROUNDS = 12
# name -> (MODEL_CHECK_S, the change stamp read)
SETTINGS = {
    "never": (float("inf"), True),
    "default": (legs.MODEL_CHECK_S, True),
    "every": (0.0, True),
    "no stamp": (float("inf"), False),
}


def _measure(settings: Settings) -> dict[str, Any]:
    if settings.backend == "sqlite":
        prepare_home(settings)
    migrate(settings)
    runtime = Runtime.build(settings)
    shipped = legs.MODEL_CHECK_S
    stamp = runtime.storage.change_stamp
    try:
        runtime.embedder.warm()
        _fill(runtime, 0, RECORDS, random.Random(7))
        _vacuum(settings)
        if hasattr(runtime.storage, "memory_index"):
            runtime.storage.memory_index(wait_s=600)
        queries = _queries(random.Random(11))
        while runtime.retriever.search(NS, queries[0]).degraded:  # the matrix loads
            time.sleep(0.05)
        for q in queries[:50]:  # warm
            runtime.retriever.search(NS, q, limit=10)
        samples: dict[str, list[float]] = {name: [] for name in SETTINGS}
        degraded = 0
        for r in range(ROUNDS):
            block = queries[(r * ROUND) % len(queries) :][:ROUND]
            names = list(SETTINGS)
            for name in names[r % len(names) :] + names[: r % len(names)]:  # each first in turn
                legs.MODEL_CHECK_S, reads_stamp = SETTINGS[name]
                runtime.storage.change_stamp = stamp if reads_stamp else lambda ns: 0  # type: ignore[method-assign]
                for q in block:
                    t = time.perf_counter()
                    degraded += runtime.retriever.search(NS, q, limit=10).degraded
                    samples[name].append((time.perf_counter() - t) * 1000.0)
        legs.MODEL_CHECK_S, runtime.storage.change_stamp = shipped, stamp  # type: ignore[method-assign]
        read, stamp_read = [], []
        for _ in range(500):
            t = time.perf_counter()
            runtime.storage.embedding_models()
            read.append((time.perf_counter() - t) * 1000.0)
            t = time.perf_counter()
            stamp(NS)
            stamp_read.append((time.perf_counter() - t) * 1000.0)
        embed = []
        for q in queries[:300]:
            t = time.perf_counter()
            runtime.embedder.embed_query(q)
            embed.append((time.perf_counter() - t) * 1000.0)
    finally:
        legs.MODEL_CHECK_S = shipped
        runtime.close()
    out: dict[str, Any] = {name: percentiles(s) for name, s in samples.items()}
    base = out["never"]["p95_ms"]
    for name in ("default", "every"):
        out[name]["p95_ratio"] = round(out[name]["p95_ms"] / base, 3)
    out["never"]["p95_ratio"] = round(base / out["no stamp"]["p95_ms"], 3)  # the stamp's cost
    out["read_alone"] = percentiles(read, digits=3)
    out["stamp_alone"] = percentiles(stamp_read, digits=3)
    out["embed_query"] = percentiles(embed)
    out["degraded"] = degraded
    return out


def run() -> dict[str, Any]:
    result: dict[str, Any] = {"load_before": [round(x, 2) for x in os.getloadavg()]}
    model = Settings.from_env().onnx_model_path
    base = os.environ.get("WAKEMARK_BENCH_DATABASE_URL", DEFAULT_PG)
    schema, url = _pg_schema_url(base)
    try:
        for backend, database_url in (("sqlite", None), ("postgres", url)):
            with tempfile.TemporaryDirectory(prefix="wakemark-modelcheck-") as home:
                result[backend] = _measure(
                    Settings(home=Path(home), model_path=model, database_url=database_url)
                )
    finally:
        _drop_schema(base, schema)
    result["load_after"] = [round(x, 2) for x in os.getloadavg()]
    return result


def markdown(result: dict[str, Any]) -> str:
    rows = [
        f"| {backend} | {name} | {r[name]['p50_ms']} | {r[name]['p95_ms']} "
        f"| {r[name].get('p95_ratio', 1)} | {r['read_alone']['p95_ms']} "
        f"| {r['stamp_alone']['p95_ms']} | {r['embed_query']['p95_ms']} |"
        for backend, r in ((b, result[b]) for b in ("sqlite", "postgres"))
        for name in SETTINGS
    ]
    return (
        "# model_check: the vector leg's reads on the search path\n\n"
        f"{RECORDS:,} records, {ROUNDS * ROUND} searches per setting, in alternating rounds; "
        f"load average {result['load_before']} before, {result['load_after']} after. "
        "p95 / baseline: default and every against never (the model's read); never against "
        "no stamp (the change stamp's read).\n\n"
        "| backend | setting | p50 ms | p95 ms | p95 / baseline | model read alone p95 ms "
        "| stamp read alone p95 ms | embed_query p95 ms |\n|---|---|---|---|---|---|---|---|\n"
        + "\n".join(rows)
        + "\n"
    )

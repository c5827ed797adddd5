"""The full-text leg at a million records on Postgres: ranked by the index each API
process holds (``WAKEMARK_TEXT_INDEX_RECORDS`` above the million) against ranked by
Postgres (the database past that size), on ``bench scale``'s million (200 projects, one
of 200k: ``bench/_scale_data.py``, built if missing).

The leg is called as the retriever calls it (``search_lexical``, k = 40, the first
``gate.POOL`` records read, the search's deadline) on the scale bench's prose queries,
in the 200k project and in the small ones, the two paths alternating query by query in
one process; the same run's query embedding (MiniLM) is the yardstick the speed targets
scale with. Also: the
index's build time and the RSS it adds, and how far the two paths' answers agree (they
rank alike only approximately: Postgres' own stemmer picks its candidates).

Run: ``python -m bench textindex``.
"""

from __future__ import annotations

import os
import random
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench import _scale_data as data
from bench._stats import percentiles
from bench.scale import ADMIN_URL, URL, _query_texts
from wakemark.shared.config import Settings
from wakemark.shared.heap import release_free_memory
from wakemark.shared.retrieval import gate
from wakemark.shared.retrieval.lexical import search_lexical
from wakemark.shared.runtime import Runtime
from wakemark.shared.storage import Storage
from wakemark.shared.storage.postgres import PostgresStorage

QUERIES = 400  # per namespace kind; the first WARM of each path are not timed
WARM = 20
K = 40
TARGET_P95_MS = 3.0  # at a query-embedding p95 of about 5 ms (issue #27)


def _rss_mb() -> float:
    with open("/proc/self/status") as status:
        kb = next(int(line.split()[1]) for line in status if line.startswith("VmRSS"))
    return round(kb / 1024, 1)


# The retriever gives every leg the search's deadline, which its statements carry as their
# statement_timeout (another way of sending them than a statement without one).
DEADLINE_S = Settings.from_env().retrieval_budget_ms / 1000.0


def _leg(storage: Storage, namespace: str, text: str) -> tuple[float, list[str]]:
    t = time.perf_counter()
    hits = search_lexical(storage, namespace, text, K, read=gate.POOL, timeout_s=DEADLINE_S)
    return (time.perf_counter() - t) * 1000.0, [h.record_id for h in hits]


def _compare(
    held: Storage,
    plain: Storage,
    embed: Callable[[str], object],
    namespaces: list[str],
    texts: list[str],
) -> dict[str, Any]:
    """Each query through both paths and the query embedding, in an order that turns, so
    the yardstick is timed beside the legs on the box as it is that moment."""
    times: dict[str, list[float]] = {"index": [], "postgres": [], "embed_query": []}
    overlap = []
    for i, text in enumerate(texts):
        namespace = namespaces[i % len(namespaces)]
        found: dict[str, list[str]] = {}
        steps = ["index", "postgres", "embed_query"]
        for name in steps[i % 3 :] + steps[: i % 3]:
            if name == "embed_query":
                t = time.perf_counter()
                embed(text)
                ms = (time.perf_counter() - t) * 1000.0
            else:
                ms, found[name] = _leg(held if name == "index" else plain, namespace, text)
            if i >= WARM:
                times[name].append(ms)
        top = set(found["postgres"][:10])
        if top:
            overlap.append(len(top & set(found["index"][:10])) / len(top))
    return {
        **{name: percentiles(ms) for name, ms in times.items()},
        "overlap_at_10": round(sum(overlap) / max(len(overlap), 1), 3),
        "embed_query_ms": times["embed_query"],
    }


def run() -> dict[str, Any]:
    build = data.build(ADMIN_URL, URL, log=lambda m: print(m, file=sys.stderr))
    plain = PostgresStorage(URL, lexicon=False)
    before = _rss_mb()
    held = PostgresStorage(URL, text_index_records=10 * data.TOTAL)
    t = time.perf_counter()
    snap = held.memory_index(wait_s=600)
    built_s = time.perf_counter() - t
    release_free_memory()
    if snap is None:
        raise SystemExit("textindex: the index was not built")
    added = round(_rss_mb() - before, 1)
    rng = random.Random(11)
    load = [round(os.getloadavg()[0], 2)]
    small = [s.namespace for s in data.spaces()[1:]]
    kinds = {"200k project": [data.BIG_NS], "small projects": small}
    with tempfile.TemporaryDirectory() as home:
        model = Settings.from_env().onnx_model_path
        runtime = Runtime.build(Settings(home=Path(home), model_path=model))
        try:
            runtime.embedder.warm()
            embed = runtime.embedder.embed_query
            legs = {
                kind: _compare(held, plain, embed, ns, _query_texts(rng, QUERIES))
                for kind, ns in kinds.items()
            }
        finally:
            runtime.close()
    held.close()
    plain.close()
    load.append(round(os.getloadavg()[0], 2))
    return {
        "build": build,
        "records": data.TOTAL,
        "index_build_s": round(built_s, 1),
        "index_rss_mb": added,
        "legs": legs,
        "embed_query": percentiles(
            [ms for leg in legs.values() for ms in leg.pop("embed_query_ms")]
        ),
        "load_avg": load,
        "target_p95_ms": TARGET_P95_MS,
    }


def markdown(result: dict[str, Any]) -> str:
    embed = result["embed_query"]["p95_ms"]
    scale = embed / 5.0
    lines = [
        "# The full-text leg at a million records (Postgres)",
        "",
        f"{result['records']:,} records over 200 projects (`bench/_scale_data.py`); the leg as "
        f"the retriever calls it (k = {K}, the first {gate.POOL} records read), ranked by the "
        "index each API process holds against ranked by Postgres, alternating query by query "
        f"in one process, each query's embedding timed between them. Query embedding p95 "
        f"{embed} ms in the same run; the target, "
        f"{result['target_p95_ms']} ms at a 5 ms yardstick, is "
        f"{round(scale * result['target_p95_ms'], 2)} "
        f"ms at this one. Load average {result['load_avg'][0]} → {result['load_avg'][1]}.",
        "",
        "| namespaces | index p50 | index p95 | embedding p95 beside it | index / embedding p95 "
        "| Postgres p50 | Postgres p95 | index / Postgres p95 | top-10 overlap |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for kind, leg in result["legs"].items():
        index_p95, embed_p95 = leg["index"]["p95_ms"], leg["embed_query"]["p95_ms"]
        ratio = round(index_p95 / leg["postgres"]["p95_ms"], 3)
        lines.append(
            f"| {kind} | {leg['index']['p50_ms']} | {index_p95} | {embed_p95} | "
            f"{round(index_p95 / embed_p95, 2)} (target 0.6) | "
            f"{leg['postgres']['p50_ms']} | {leg['postgres']['p95_ms']} | {ratio} | "
            f"{leg['overlap_at_10']} |"
        )
    lines += [
        "",
        f"The index: built in {result['index_build_s']} s, {result['index_rss_mb']} MB of RSS "
        "in the process.",
    ]
    return "\n".join(lines) + "\n"

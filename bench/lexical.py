"""The SQLite lexical leg at 50k records: FTS5 against the index held in the process
(``wakemark.shared.storage.sqlite.lexicon``), issue 27 item 2.

Records and queries are ``bench/search.py``'s (one namespace, no vectors). Each query runs
every variant below in turn, rotating the order, so all of them see the same machine load:

- ``fts5``: ``search_lexical`` as the retriever calls it, the storage opened without the
  index (term stats, MATCH, bm25 over the newest ``fts.WINDOW`` matches, records).
- ``leg``: the same call with the index: the ranking in memory, then the same records.
- ``ranking``: the index's ranking alone (no term stats, no records read).
- ``embed_query``: the query embedding, the yardstick the issue scales its targets by.

Also: the index's build time, bytes and the process's RSS growth, the first search after a
one-record write (which refreshes the index), and how the two legs' answers agree (lists
identical, and the top 10 in common).

Run: ``python -m bench lexical``; ``WAKEMARK_BENCH_LEXICAL_RECORDS`` sets the size and
``WAKEMARK_BENCH_LEXICAL_HOME`` keeps the built database there for the next run.
"""

from __future__ import annotations

import os
import random
import tempfile
import time
from collections.abc import Callable
from contextlib import nullcontext
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

from bench.search import BATCH, NS, _queries, _record, _stats
from wakemark.shared.config import Settings, prepare_home
from wakemark.shared.heap import release_free_memory
from wakemark.shared.retrieval.lexical import search_lexical, select_terms
from wakemark.shared.runtime import Runtime
from wakemark.shared.storage import lexical, migrate
from wakemark.shared.storage.sqlite import fts, lexicon
from wakemark.shared.storage.sqlite.storage import SqliteStorage

RECORDS = int(os.environ.get("WAKEMARK_BENCH_LEXICAL_RECORDS", "50000"))
QUERIES = 200
K = 40  # what bench/search.py's lexical stage asks for
WRITES = 5


def _rss_mb() -> float:
    with open("/proc/self/status") as status:
        line = next(x for x in status if x.startswith("VmRSS"))
    return int(line.split()[1]) / 1024


def _build(home: Path) -> Settings:
    settings = Settings(home=home)
    prepare_home(settings)
    migrate(settings)
    if (home / "bench-built").exists():
        return settings
    runtime = Runtime.build(settings)
    storage = runtime.storage
    rng, base = random.Random(7), datetime(2024, 1, 1, tzinfo=UTC)
    try:
        for lo in range(0, RECORDS, BATCH):
            with storage.transaction() as tx:
                for i in range(lo, min(RECORDS, lo + BATCH)):
                    tx.put_memory_record(_record(rng, i, base))
    finally:
        runtime.close()
    (home / "bench-built").write_text(f"{RECORDS}\n")
    return settings


def _phrases(storage: SqliteStorage, query: str) -> list[tuple[str, ...]]:
    """The phrases of the terms the leg asks for first (its rarest)."""
    tokens = lexical.tokenize(query)
    stats = storage.term_stats(tokens)
    assert stats is not None
    terms = select_terms(tokens, lambda _: stats.doc_freq, total=stats.total)
    found = lexicon.phrases(storage._conns.get(), terms)
    return [found[t] for t in terms if t in found]


def _measure(settings: Settings) -> dict[str, Any]:
    model = Settings.from_env().onnx_model_path  # the embedder, for the yardstick
    runtime = Runtime.build(Settings(home=settings.home, model_path=model))
    plain = SqliteStorage(settings.sqlite_path, lexicon=False)
    storage = SqliteStorage(settings.sqlite_path)
    try:
        runtime.embedder.warm()
        queries = _queries(random.Random(11))[:QUERIES]
        release_free_memory()
        rss = _rss_mb()
        began = time.perf_counter()
        index = storage.memory_index(wait_s=600)
        build_s = time.perf_counter() - began
        assert index is not None
        rss_growth = _rss_mb() - rss
        plans = {q: _phrases(storage, q) for q in queries}
        conn = storage._conns.get()
        where = lexicon.Ranking(NS, K, None, None)
        variants: dict[str, Callable[[str], Any]] = {
            "fts5": lambda q: search_lexical(plain, NS, q, K),
            "leg": lambda q: search_lexical(storage, NS, q, K),
            "ranking": lambda q: index.ranked(conn, plans[q], where, fts.WINDOW),
            "embed_query": runtime.embedder.embed_query,
        }
        for q in queries[:20]:  # warm both paths (stems, statements, caches)
            for fn in variants.values():
                fn(q)
        samples: dict[str, list[float]] = {name: [] for name in variants}
        answers: dict[str, dict[str, list[str]]] = {"fts5": {}, "leg": {}}
        names = list(variants)
        for i, q in enumerate(queries):
            for name in names[i % len(names) :] + names[: i % len(names)]:
                t = time.perf_counter()
                out = variants[name](q)
                samples[name].append((time.perf_counter() - t) * 1000.0)
                if name in answers:
                    answers[name][q] = [h.record.record_id for h in out]
        agree = [
            len(set(answers["leg"][q][:10]) & set(answers["fts5"][q][:10])) / 10 for q in queries
        ]
        same = sum(answers["leg"][q] == answers["fts5"][q] for q in queries)
        return {
            "records": RECORDS,
            "queries": len(queries),
            "window": fts.WINDOW,
            **{name: _stats(s) for name, s in samples.items()},
            "index_build_s": round(build_s, 1),
            "index_mb": round(index.nbytes / 2**20, 1),
            "rss_growth_mb": round(rss_growth, 1),
            "first_search_after_write_ms": _after_write(storage, queries),
            "identical_lists": same,
            "agree_at_10": round(float(np.mean(agree)), 3),
        }
    finally:
        storage.close()
        plain.close()
        runtime.close()


def _after_write(storage: SqliteStorage, queries: list[str]) -> float:
    """The median first search after a one-record write: it waits for the refresh."""
    rng, base, times = random.Random(5), datetime(2025, 1, 1, tzinfo=UTC), []
    for i in range(WRITES):
        with storage.transaction() as tx:
            tx.put_memory_record(_record(rng, RECORDS + i, base))
        t = time.perf_counter()
        search_lexical(storage, NS, queries[i], K)
        times.append((time.perf_counter() - t) * 1000.0)
    return round(float(np.median(times)), 1)


def run() -> dict[str, Any]:
    keep = os.environ.get("WAKEMARK_BENCH_LEXICAL_HOME")
    load = [round(x, 2) for x in os.getloadavg()]
    with nullcontext(keep) if keep else tempfile.TemporaryDirectory() as home:
        result = _measure(_build(Path(home)))
    return {**result, "load_before": load, "load_after": [round(x, 2) for x in os.getloadavg()]}


def markdown(result: dict[str, Any]) -> str:
    lines = [
        f"# SQLite lexical leg at {result['records']} records: FTS5 and the index in memory",
        "",
        f"{result['queries']} queries of `bench/search.py`, every variant per query in rotating "
        f"order (same process, same load). Load average {result['load_before']} → "
        f"{result['load_after']} on 2 cores: compare the rows with each other and with "
        "`embed_query` (the issue's yardstick, ~5 ms p95 on a quiet box), not with another run.",
        "",
        "| variant | p50 ms | p95 ms | mean ms |",
        "|---|---|---|---|",
    ]
    for name in ("fts5", "leg", "ranking", "embed_query"):
        m = result[name]
        lines.append(f"| {name} | {m['p50_ms']} | {m['p95_ms']} | {m['mean_ms']} |")
    lines += [
        "",
        f"Index: built in {result['index_build_s']} s, {result['index_mb']} MB of arrays, "
        f"RSS +{result['rss_growth_mb']} MB; first search after a one-record write "
        f"{result['first_search_after_write_ms']} ms (median of {WRITES}, the refresh "
        f"included). Answers: {result['identical_lists']} of {result['queries']} lists "
        f"identical to FTS5's, top 10 in common {result['agree_at_10']}.",
    ]
    return "\n".join(lines) + "\n"

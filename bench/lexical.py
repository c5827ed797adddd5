"""The lexical leg at 50k records: SQLite's FTS5 against the index held in the process
(``wakemark.shared.storage.sqlite.lexicon``), and Postgres' full-text leg, issue 27 item 2.

Records and queries are ``bench/search.py``'s (one namespace, no vectors). Each query runs
every variant below in turn, rotating the order, so all of them see the same machine load:

- ``fts5``: ``search_lexical`` as the retriever calls it, the storage opened without the
  index (term stats, MATCH, bm25 over the newest ``fts.WINDOW`` matches, records).
- ``leg``: the same call with the index: the ranking in memory, then the same records.
- ``ranking``: the index's ranking alone (no term stats, no records read).
- ``postgres``: ``search_lexical`` over Postgres without the index (term stats, then
  the tsvector search ranked by ts_rank over the newest window of matches, put in BM25
  order), the same records in a schema of ``WAKEMARK_BENCH_DATABASE_URL`` (default: the
  test database), vacuumed and analyzed after the load (the test server runs no
  autovacuum).
- ``postgres_index``: the same call with Postgres' index held in the process
  (``wakemark.shared.storage.postgres.lexicon``): a check that it is current, the
  ranking in memory, one round trip for the first ``gate.POOL`` ranked records (those
  the relevance gate reads). It ranks as SQLite does.
- ``embed_query``: the query embedding, the yardstick the issue scales its targets by.

Also: each index's build time, bytes and the process's RSS growth, the first search after
a one-record write (which refreshes the index), and how the legs' answers agree with
FTS5's (lists identical, and the top 10 in common).

Run: ``python -m bench lexical``; ``WAKEMARK_BENCH_LEXICAL_RECORDS`` sets the size,
``WAKEMARK_BENCH_LEXICAL_HOME`` keeps the built SQLite database there for the next run and
``WAKEMARK_BENCH_LEXICAL_SCHEMA`` the Postgres records in that schema (else a fresh schema
is dropped after the run).
"""

from __future__ import annotations

import hashlib
import json
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

from bench.search import (
    BATCH,
    DEFAULT_PG,
    NS,
    _drop_schema,
    _pg_schema_url,
    _queries,
    _record,
    _stats,
    _vacuum,
)
from wakemark.shared.config import Settings, prepare_home
from wakemark.shared.heap import release_free_memory
from wakemark.shared.retrieval.gate import POOL
from wakemark.shared.retrieval.lexical import search_lexical, select_terms
from wakemark.shared.runtime import Runtime
from wakemark.shared.storage import lexical, lexicon, migrate
from wakemark.shared.storage.postgres.storage import PostgresStorage
from wakemark.shared.storage.sqlite import fts
from wakemark.shared.storage.sqlite.storage import SqliteStorage

RECORDS = int(os.environ.get("WAKEMARK_BENCH_LEXICAL_RECORDS", "50000"))
QUERIES = 200
K = 40  # what bench/search.py's lexical stage asks for
WRITES = 5


def _rss_mb() -> float:
    with open("/proc/self/status") as status:
        line = next(x for x in status if x.startswith("VmRSS"))
    return int(line.split()[1]) / 1024


def _measured_build(storage: Any) -> tuple[Any, float, float]:
    """The storage's full-text index built now, the seconds it took and the RSS it added
    (MB, with what malloc can give back given back before and after)."""
    release_free_memory()
    rss = _rss_mb()
    began = time.perf_counter()
    index = storage.memory_index(wait_s=600)
    build_s = time.perf_counter() - began
    assert index is not None
    release_free_memory()
    return index, build_s, _rss_mb() - rss


def _build(settings: Settings) -> None:
    """The records, unless the database already holds them."""
    if settings.backend == "sqlite":
        prepare_home(settings)
    migrate(settings)
    if _built(settings):
        return
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
    _vacuum(settings)
    if settings.backend == "sqlite":
        (settings.home / "bench-built").write_text(f"{RECORDS}\n")


def _built(settings: Settings) -> bool:
    if settings.backend == "sqlite":
        return (settings.home / "bench-built").exists()
    import psycopg

    assert settings.database_url is not None
    with psycopg.connect(settings.database_url) as conn:
        row = conn.execute("SELECT count(*) FROM memory_records").fetchone()
    return row is not None and row[0] >= RECORDS


def _phrases(storage: SqliteStorage, query: str) -> list[tuple[str, ...]]:
    """The phrases of the terms the leg asks for first (its rarest)."""
    tokens = lexical.tokenize(query)
    stats = storage.term_stats(tokens)
    assert stats is not None
    terms = select_terms(tokens, lambda _: stats.doc_freq, total=stats.total)
    found = lexicon.phrases(storage._conns.get(), terms)
    return [found[t] for t in terms if t in found]


def _measure(settings: Settings, pg_url: str) -> dict[str, Any]:
    model = Settings.from_env().onnx_model_path  # the embedder, for the yardstick
    runtime = Runtime.build(Settings(home=settings.home, model_path=model))
    plain = SqliteStorage(settings.sqlite_path, lexicon=False)
    storage = SqliteStorage(settings.sqlite_path)
    pg = PostgresStorage(pg_url, lexicon=False)
    indexed = PostgresStorage(pg_url)
    try:
        runtime.embedder.warm()
        queries = _queries(random.Random(11))[:QUERIES]
        index, build_s, rss_growth = _measured_build(storage)
        pg_index, pg_build_s, pg_rss_growth = _measured_build(indexed)
        plans = {q: _phrases(storage, q) for q in queries}
        conn = storage._conns.get()
        where = lexicon.Ranking(NS, K, None, None)
        variants: dict[str, Callable[[str], Any]] = {
            "fts5": lambda q: search_lexical(plain, NS, q, K, read=POOL),
            "leg": lambda q: search_lexical(storage, NS, q, K, read=POOL),
            "ranking": lambda q: index.ranked(conn, plans[q], where, fts.WINDOW),
            "postgres": lambda q: search_lexical(pg, NS, q, K, read=POOL),
            "postgres_index": lambda q: search_lexical(indexed, NS, q, K, read=POOL),
            "embed_query": runtime.embedder.embed_query,
        }
        for q in queries[:20]:  # warm both paths (stems, statements, caches)
            for fn in variants.values():
                fn(q)
        samples: dict[str, list[float]] = {name: [] for name in variants}
        answers: dict[str, dict[str, list[float]]] = {
            "fts5": {},
            "leg": {},
            "postgres": {},
            "postgres_index": {},
        }
        names = list(variants)
        for i, q in enumerate(queries):
            for name in names[i % len(names) :] + names[: i % len(names)]:
                t = time.perf_counter()
                out = variants[name](q)
                samples[name].append((time.perf_counter() - t) * 1000.0)
                if name in answers:  # by time: each database gave the records its own ids
                    answers[name][q] = [h.created_ts for h in out]

        def agree(leg: str) -> float:
            common = [
                len(set(answers[leg][q][:10]) & set(answers["fts5"][q][:10])) for q in queries
            ]
            return round(float(np.mean(common)) / 10, 3)

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
            "postgres_first_search_after_write_ms": _after_write(indexed, queries),
            "identical_lists": same,
            "agree_at_10": agree("leg"),
            "postgres_agree_at_10": agree("postgres"),
            "postgres_index_agree_at_10": agree("postgres_index"),
            "postgres_index_identical_lists": sum(
                answers["postgres_index"][q] == answers["fts5"][q] for q in queries
            ),
            "postgres_index_top10_vs_postgres": round(
                float(
                    np.mean(
                        [
                            len(
                                set(answers["postgres_index"][q][:10])
                                & set(answers["postgres"][q][:10])
                            )
                            for q in queries
                        ]
                    )
                )
                / 10,
                3,
            ),  # fmt: skip
            "postgres_index_build_s": round(pg_build_s, 1),
            "postgres_index_mb": round(pg_index.index.nbytes / 2**20, 1),
            "postgres_index_rss_growth_mb": round(pg_rss_growth, 1),
            "postgres_index_vs_embed_p95": round(
                _stats(samples["postgres_index"])["p95_ms"]
                / _stats(samples["embed_query"])["p95_ms"],
                2,
            ),
            # Which records the Postgres leg answered, so runs of two versions compare.
            "postgres_answers": hashlib.sha256(
                json.dumps([answers["postgres"][q] for q in queries]).encode()
            ).hexdigest()[:16],
        }
    finally:
        indexed.close()
        pg.close()
        storage.close()
        plain.close()
        runtime.close()


def _after_write(storage: SqliteStorage | PostgresStorage, queries: list[str]) -> float:
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
    schema = os.environ.get("WAKEMARK_BENCH_LEXICAL_SCHEMA")
    pg_base = os.environ.get("WAKEMARK_BENCH_DATABASE_URL", DEFAULT_PG)
    load = [round(x, 2) for x in os.getloadavg()]
    schema, pg_url = _pg_schema_url(pg_base, schema)
    try:
        with nullcontext(keep) if keep else tempfile.TemporaryDirectory() as home:
            settings = Settings(home=Path(home))
            _build(settings)
            _build(Settings(home=Path(home), database_url=pg_url))
            result = _measure(settings, pg_url)
    finally:
        if not os.environ.get("WAKEMARK_BENCH_LEXICAL_SCHEMA"):
            _drop_schema(pg_base, schema)
    return {**result, "load_before": load, "load_after": [round(x, 2) for x in os.getloadavg()]}


def markdown(result: dict[str, Any]) -> str:
    lines = [
        f"# Lexical leg at {result['records']} records: SQLite's FTS5 and index, Postgres",
        "",
        f"{result['queries']} queries of `bench/search.py`, every variant per query in rotating "
        f"order (same process, same load). Load average {result['load_before']} → "
        f"{result['load_after']} on 2 cores: compare the rows with each other and with "
        "`embed_query` (the issue's yardstick, ~5 ms p95 on a quiet box), not with another run.",
        "",
        "| variant | p50 ms | p95 ms | mean ms |",
        "|---|---|---|---|",
    ]
    for name in ("fts5", "leg", "ranking", "postgres", "postgres_index", "embed_query"):
        m = result[name]
        lines.append(f"| {name} | {m['p50_ms']} | {m['p95_ms']} | {m['mean_ms']} |")
    lines += [
        "",
        f"Index: built in {result['index_build_s']} s, {result['index_mb']} MB of arrays, "
        f"RSS +{result['rss_growth_mb']} MB; first search after a one-record write "
        f"{result['first_search_after_write_ms']} ms (median of {WRITES}, the refresh "
        f"included). Answers: {result['identical_lists']} of {result['queries']} lists "
        f"identical to FTS5's, top 10 in common {result['agree_at_10']}.",
        "",
        f"Postgres: its own ranking (ts_rank's window, then BM25 on its lexemes), top 10 in "
        f"common with FTS5's {result['postgres_agree_at_10']}; answers digest "
        f"`{result['postgres_answers']}` (equal digests: the same records in the same order).",
        "",
        f"Postgres' index (`postgres_index`): built in {result['postgres_index_build_s']} s, "
        f"{result['postgres_index_mb']} MB of arrays, RSS +"
        f"{result['postgres_index_rss_growth_mb']} MB; first search after a one-record write "
        f"{result['postgres_first_search_after_write_ms']} ms (median of {WRITES}, the check "
        f"and the refresh included); {result['postgres_index_identical_lists']} of "
        f"{result['queries']} lists identical to FTS5's (top 10 in common "
        f"{result['postgres_index_agree_at_10']}), top 10 in common with the `postgres` "
        f"leg's {result['postgres_index_top10_vs_postgres']}. Leg ratio: `postgres_index` "
        f"p95 / `embed_query` p95 = {result['postgres_index_vs_embed_p95']}.",
    ]
    return "\n".join(lines) + "\n"

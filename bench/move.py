"""Where the time of a Postgres project move goes (``Upkeep.move_namespace``): one project
of ``RECORDS`` records with random unit vectors (``bench.search._fill``) in a fresh
schema, then each statement of the move (``MOVE_ROWS``, ``MERGE_COUNTS``) timed in a
transaction rolled back, so every round moves the same rows. Rounds alternate the
schema as migrated with the same transaction after ``DROP INDEX`` of the HNSW index
(rolled back with it): the difference is what the vector index costs the move. The
tables are vacuumed after each round. Postgres: ``WAKEMARK_BENCH_DATABASE_URL``
(default: the test database). Run: ``python -m bench move``.
"""

from __future__ import annotations

import os
import random
import tempfile
import time
from pathlib import Path
from typing import Any

import psycopg

from bench.search import DEFAULT_PG, NS, _drop_schema, _fill, _pg_schema_url, _vacuum
from wakemark.shared.config import Settings
from wakemark.shared.runtime import Runtime
from wakemark.shared.storage import migrate
from wakemark.shared.storage.postgres.base import LOCK_RECORDS
from wakemark.shared.storage.postgres.upkeep import MERGE_COUNTS, MOVE_ROWS

RECORDS = int(os.environ.get("WAKEMARK_BENCH_MOVE_RECORDS", "10000"))
ROUNDS = 2
SETTINGS = {"as migrated": [], "without the HNSW index": ["DROP INDEX memory_records_embedding"]}
PARAMS = {"old": NS, "new": "/actor/bench/project/moved/"}


def _round(url: str, before: list[str]) -> dict[str, Any]:
    """One move, rolled back: seconds per statement, and the record statement's triggers."""
    out: dict[str, Any] = {"load": round(os.getloadavg()[0], 2)}
    with psycopg.connect(url) as conn:
        for statement in before:
            conn.execute(statement)
        conn.execute(LOCK_RECORDS)
        began = time.perf_counter()
        for kind, sql in MOVE_ROWS.items():
            t = time.perf_counter()
            row = conn.execute("EXPLAIN (ANALYZE, FORMAT JSON) " + sql, PARAMS).fetchone()
            out[kind] = round(time.perf_counter() - t, 2)
            if kind == "records":
                out["triggers"] = {
                    x["Trigger Name"]: round(x["Time"] / 1000, 2)
                    for x in row[0][0].get("Triggers", [])  # type: ignore[index]
                }
        t = time.perf_counter()
        for sql in MERGE_COUNTS:
            conn.execute(sql, PARAMS)
        out["counts"] = round(time.perf_counter() - t, 3)
        out["total"] = round(time.perf_counter() - began, 2)
        conn.rollback()
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("VACUUM memory_records, memory_fts, events, turns, record_history")
    return out


def run() -> dict[str, Any]:
    base = os.environ.get("WAKEMARK_BENCH_DATABASE_URL", DEFAULT_PG)
    schema, url = _pg_schema_url(base)
    try:
        with tempfile.TemporaryDirectory() as home:
            settings = Settings(home=Path(home), database_url=url)
            migrate(settings)
            runtime = Runtime.build(settings)
            try:
                fill_s = _fill(runtime, 0, RECORDS, random.Random(7))
            finally:
                runtime.close()
            _vacuum(settings)
        rounds = [
            {"setting": name, **_round(url, before)}
            for _ in range(ROUNDS)
            for name, before in SETTINGS.items()
        ]
    finally:
        _drop_schema(base, schema)
    return {"records": RECORDS, "fill_s": round(fill_s, 1), "rounds": rounds}


def markdown(result: dict[str, Any]) -> str:
    lines = [
        f"# move: {result['records']} records (filled in {result['fill_s']} s)",
        "",
        "| setting | load | records | FTS trigger | events | counts | whole move |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in result["rounds"]:
        fts = r["triggers"].get("memory_records_fts", 0.0)
        lines.append(
            f"| {r['setting']} | {r['load']} | {r['records']} s | {fts} s | {r['events']} s"
            f" | {r['counts']} s | {r['total']} s |"
        )
    return "\n".join(lines) + "\n"

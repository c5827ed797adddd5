"""Relevance of the search legs and fusions on the labelled set in tests/fixtures/relevance
(scored by ``tests/retrieval/relevance.py``), on both backends.

Reports recall@5 and MRR (over the top 10) for lexical only, vector only, plain RRF,
the tuned fusion, and the shipped configuration end to end through ``Retriever.search``.
Needs the ONNX model (``WAKEMARK_MODEL_PATH`` or ``$WAKEMARK_HOME/models``); Postgres as in
``bench/search.py`` (skipped when unreachable). Run alone:
``python -m bench.relevance``.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any

from bench.search import DEFAULT_PG, _drop_schema, _pg_schema_url
from tests.retrieval.relevance import K, Query, build_runtime, evaluate, load, populate
from wakemark.shared.config import Settings
from wakemark.shared.models import MemoryRecord


def run(database_url: str | None = None, model_path: Path | None = None) -> dict[str, Any]:
    records, queries = load()
    model = model_path or Settings.from_env().onnx_model_path
    pg_base = database_url or os.environ.get("WAKEMARK_BENCH_DATABASE_URL", DEFAULT_PG)
    result: dict[str, Any] = {"records": len(records), "queries": len(queries), "backends": {}}
    try:
        schema, pg_url = _pg_schema_url(pg_base)
    except Exception as exc:  # no Postgres here: SQLite alone still answers the question
        result["postgres_skipped"] = f"{exc.__class__.__name__}: {exc}"[:200]
        schema, pg_url = None, None
    backends = {"sqlite": None, **({"postgres": pg_url} if pg_url else {})}
    try:
        _evaluate_backends(result, backends, records, queries, model)
    finally:
        if schema:
            _drop_schema(pg_base, schema)
    result["shipped_fusion"] = Settings().fusion
    return result


def _evaluate_backends(
    result: dict[str, Any],
    backends: dict[str, str | None],
    records: list[MemoryRecord],
    queries: list[Query],
    model: Path,
) -> None:
    for name, url in backends.items():
        with tempfile.TemporaryDirectory() as home:
            # Quality, not speed: no search may be cut short by the deadline on a busy box.
            settings = Settings(
                home=Path(home), model_path=model, database_url=url, retrieval_budget_ms=10_000
            )
            runtime = build_runtime(settings)
            ids = [r.record_id for r in records]
            try:
                runtime.storage.delete_memory_records(ids)  # a shared Postgres: start clean
                populate(runtime, records)
                result["backends"][name] = evaluate(runtime, queries)
            finally:
                runtime.storage.delete_memory_records(ids)
                runtime.close()


def markdown(result: dict[str, Any]) -> str:
    lines = [
        f"# Relevance: {result['records']} records, {result['queries']} queries",
        "",
        f"Shipped fusion: `{result['shipped_fusion']}`.",
    ]
    for backend, variants in result["backends"].items():
        lines += ["", f"## {backend}", "", f"| variant | recall@{K} | MRR |", "|---|---|---|"]
        for name, m in variants.items():
            lines.append(f"| {name} | {m[f'recall@{K}']:.3f} | {m['mrr']:.3f} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    out = run()
    print(markdown(out))

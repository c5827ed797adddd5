"""Embedding throughput of the job path (``backfill_embeddings``, ``embed_records``) on
real SQLite, as a ratio to the raw embedder's ``embed`` on the same texts, same run.

Target: the job path keeps ≥ 90 % of raw throughput (storage overhead ≤ 10 %).
Rounds alternate raw / backfill / embed_records so drift hits each alike; medians.
"""

from __future__ import annotations

import random
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from wakemark.shared.config import Settings, prepare_home
from wakemark.shared.jobs import backfill_embeddings, embed_records
from wakemark.shared.jobs.tasks import EMBED_BATCH
from wakemark.shared.models import MemoryRecord
from wakemark.shared.runtime import Runtime
from wakemark.shared.storage import migrate

RECORDS = 256
ROUNDS = 5
TARGET = 0.90
NS = "/actor/bench/project/jobs/"
WORDS = [
    "cache",
    "epoch",
    "worker",
    "queue",
    "redis",
    "celery",
    "sqlite",
    "postgres",
    "vector",
    "index",
    "migration",
    "token",
    "embedding",
    "backfill",
    "sweep",
    "retry",
    "timeout",
    "deadlock",
    "pytest",
    "fixture",
    "schema",
    "hook",
    "prompt",
    "session",
    "summary",
    "namespace",
    "record",
    "merge",
    "dedupe",
    "cosine",
    "latency",
    "budget",
    "tokenizer",
    "onnx",
]


def _records(n: int) -> list[MemoryRecord]:
    rng = random.Random(7)

    def sentence(k: int) -> str:
        return " ".join(rng.choice(WORDS) for _ in range(k)).capitalize() + "."

    return [
        MemoryRecord(
            namespace=NS,
            title=sentence(8)[:200],
            summary=" ".join(sentence(14) for _ in range(3)),
            facts=[sentence(10) for _ in range(3)],
            concepts=rng.sample(WORDS, 4),
        )
        for _ in range(n)
    ]


def _model(settings: Settings) -> Path:
    path = settings.onnx_model_path
    from wakemark.shared.embedding import export_onnx, is_valid_export

    if not is_valid_export(path):
        path = export_onnx(Path(tempfile.mkdtemp()) / "all-MiniLM-L6-v2.onnx")
    return path


def _timed(fn: Any, setup: Any = None) -> float:
    if setup:
        setup()
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def run() -> dict[str, Any]:
    model = _model(Settings.from_env())
    records = _records(RECORDS)
    texts = [r.embedding_text() for r in records]
    ids = [r.record_id for r in records]
    with tempfile.TemporaryDirectory() as home:
        settings = Settings(home=Path(home), model_path=model, embedder="onnx")
        prepare_home(settings)
        migrate(settings)
        runtime = Runtime.build(settings)
        try:
            for record in records:
                runtime.storage.put_memory_record(record)
            runtime.embedder.embed(texts[:EMBED_BATCH])  # load the model outside the clock

            def raw() -> None:
                for i in range(0, len(texts), EMBED_BATCH):
                    runtime.embedder.embed(texts[i : i + EMBED_BATCH])

            def backfill() -> None:
                assert backfill_embeddings(runtime, batch=EMBED_BATCH)["embedded"] == RECORDS

            def per_job() -> None:
                for i in range(0, len(ids), EMBED_BATCH):
                    embed_records(runtime, ids[i : i + EMBED_BATCH])

            times: dict[str, list[float]] = {"raw": [], "backfill": [], "embed_records": []}

            def clear() -> None:  # the records again, without vectors
                runtime.storage.delete_memory_records(ids)
                for record in records:
                    runtime.storage.put_memory_record(record)

            for _ in range(ROUNDS):
                times["raw"].append(_timed(raw))
                times["backfill"].append(_timed(backfill, setup=clear))
                times["embed_records"].append(_timed(per_job, setup=clear))
        finally:
            runtime.close()
    rate = {k: RECORDS / statistics.median(v) for k, v in times.items()}
    return {
        "records": RECORDS,
        "batch": EMBED_BATCH,
        "rounds": ROUNDS,
        "records_per_s": {k: round(v, 1) for k, v in rate.items()},
        "ratio_backfill_vs_raw": round(rate["backfill"] / rate["raw"], 3),
        "ratio_embed_records_vs_raw": round(rate["embed_records"] / rate["raw"], 3),
        "target_ratio": TARGET,
    }


def markdown(result: dict[str, Any]) -> str:
    rps = result["records_per_s"]
    lines = [
        f"# Jobs: embedding throughput ({result['records']} records, batch {result['batch']}, "
        f"median of {result['rounds']} rounds, SQLite)",
        "",
        "| path | records/s | ratio to raw |",
        "|---|---|---|",
        f"| raw `embedder.embed` | {rps['raw']} | 1.000 |",
        f"| `backfill_embeddings` | {rps['backfill']} | {result['ratio_backfill_vs_raw']} |",
        f"| `embed_records` jobs | {rps['embed_records']} | "
        f"{result['ratio_embed_records_vs_raw']} |",
        "",
        f"Target: ratio ≥ {result['target_ratio']}.",
    ]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    print(markdown(run()))

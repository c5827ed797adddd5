"""Fit the relevance gate on codemem-dev: the per-record and the per-prompt logistic
models and their two thresholds.

Every query and negative of a project runs through ``Retriever.search`` (the prompt's
depth, ``PROMPT_CANDIDATES``) on the replayed database of ``bench/_codemem.py``. Then:

1. The record model: each hit is one example, its ``gate.Evidence`` and whether it is a
   gold record of the query.
2. The prompt model: each query is one example, ``gate.prompt_vector`` of its hits'
   relevance (under the model of 1) and whether it is a real query (not a negative).
3. The prompt threshold: the smallest prompt relevance at which ``TARGET_REJECT`` of the
   fit project's negatives get nothing.
4. The record floor: the smallest (most recall) at which the fit project's real prompts
   get at most ``BYTES_TARGET`` bytes on average through ``inject.select``.

Each is fitted twice, on the hybrid evidence and on the lexical evidence alone (a runtime
with the embedder off); the lexical models' intercepts are then shifted so that the same
two thresholds serve both (the same share of real queries' hits above the floor, the same
share of negatives rejected). Split: fitted on werkzeug (``FIT``), reported on jinja (held
out); the reverse split is reported too, as a check that the features transfer. Offline
("ungated" is the first five of the candidates; no session dedupe): ``bench/gate.py``
runs the real prompt path. The trade-off curve shows, for other prompt thresholds, the
share of negatives left without context against gated/ungated recall@5.

The constants printed under "shipped" go into ``shared/retrieval/gate.py`` and
``shared/config.py``. Run: ``python -m bench fit_gate``.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from bench import _codemem
from wakemark.shared.retrieval import gate, inject
from wakemark.shared.retrieval.hits import SearchHit
from wakemark.shared.retrieval.retriever import PROMPT_CANDIDATES, PROMPT_LIMIT, Retriever

FIT = "werkzeug"
TARGET_REJECT = 0.91  # of the fit project's negatives left without context (target 0.90)
BYTES_TARGET = 900  # mean injected bytes per real prompt of the fit project (target 1 KB)
MAX_BYTES = 1536  # the default WAKEMARK_PROMPT_MAX_BYTES
FLOORS = tuple(round(0.001 * 1.25**i, 4) for i in range(24))  # 0.001 to ~0.17
CURVE = (0.80, 0.85, 0.88, 0.90, 0.92, 0.95)  # negatives' quantiles of the curve
L2 = 1.0


@dataclass(frozen=True)
class Query:
    qid: str
    gold: frozenset[str]  # empty: a negative
    hits: list[SearchHit]


def warm(retriever: Retriever, namespace: str, embedder_on: bool) -> None:
    """Until the namespace's vectors are loaded: the fit must not see cold searches."""
    deadline = time.monotonic() + 120
    while embedder_on and time.monotonic() < deadline:
        if not retriever.search(namespace, "warm up the vector cache", 1).degraded:
            return
        time.sleep(0.5)


def collect(project_name: str, embedder: str) -> list[Query]:
    project = _codemem.open_project(project_name, embedder=embedder, retrieval_budget_ms=10_000)
    try:
        r = project.runtime.retriever
        warm(r, project.namespace, embedder == "onnx")
        return [
            Query(q.qid, q.gold, r.search(project.namespace, q.text, PROMPT_CANDIDATES).items)
            for q in project.queries + project.negatives
        ]
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


@dataclass(frozen=True)
class Model:
    coef: tuple[float, ...]
    intercept: float

    def __call__(self, x: list[float]) -> float:
        z = self.intercept + sum(c * v for c, v in zip(self.coef, x, strict=True))
        return 1.0 / (1.0 + math.exp(-max(-30.0, min(30.0, z))))

    def shifted(self, old: float, new: float) -> Model:
        """The same model with ``old`` relevance moved to ``new`` (the intercept only)."""
        return Model(self.coef, round(self.intercept + _logit(new) - _logit(old), 4))


def _logit(p: float) -> float:
    p = min(max(p, 1e-9), 1 - 1e-9)
    return math.log(p / (1 - p))


def _fit(x: list[list[float]], y: list[bool]) -> Model:
    coef, intercept = fit_logistic(np.array(x, dtype=float), np.array(y, dtype=float))
    return Model(tuple(round(float(c), 4) for c in coef), round(intercept, 4))


def record_model(queries: list[Query], lexical: bool) -> Model:
    x = [gate.feature_vector(h.evidence, lexical) for q in queries for h in q.hits if h.evidence]
    y = [h.record.record_id in q.gold for q in queries for h in q.hits if h.evidence]
    return _fit(x, y)


def rescored(queries: list[Query], model: Model, lexical: bool) -> list[Query]:
    """The queries with their hits' relevance under ``model``."""
    return [
        replace(
            q,
            hits=[
                replace(h, relevance=model(gate.feature_vector(h.evidence, lexical)))
                for h in q.hits
                if h.evidence
            ],
        )
        for q in queries
    ]


def _prompt_x(q: Query, lexical: bool) -> list[float]:
    cosines = [h.evidence.cosine if h.evidence else None for h in q.hits]
    return gate.prompt_vector([h.relevance for h in q.hits], cosines, lexical)


def prompt_model(queries: list[Query], lexical: bool) -> Model:
    return _fit([_prompt_x(q, lexical) for q in queries], [bool(q.gold) for q in queries])


def negatives_quantile(prompts: list[float], queries: list[Query], share: float) -> float:
    """The smallest prompt threshold that leaves ``share`` of the negatives empty."""
    neg = sorted(p for p, q in zip(prompts, queries, strict=True) if not q.gold)
    keep = int(len(neg) * (1 - share))  # negatives allowed through
    return float(neg[len(neg) - keep - 1]) + 1e-6 if keep < len(neg) else 0.0


def outcome(
    queries: list[Query], prompts: list[float], min_prompt: float, floor: float
) -> dict[str, float]:
    """The gate's selection (``inject.select``, prompt decided by ``prompts``) against the
    first five candidates."""
    ungated = gated = 0.0
    sizes: list[int] = []
    neg = clean = 0
    for q, p in zip(queries, prompts, strict=True):
        if p >= min_prompt:
            sel = inject.select(q.hits, 0.0, floor, set(), MAX_BYTES, PROMPT_LIMIT)
            injected, size = {h.record.record_id for h in sel.injected}, len(sel.context.encode())
        else:
            injected, size = set(), 0
        if not q.gold:
            neg += 1
            clean += not injected
            continue
        ungated += len(q.gold & {h.record.record_id for h in q.hits[:PROMPT_LIMIT]}) / len(q.gold)
        gated += len(q.gold & injected) / len(q.gold)
        sizes.append(size)
    return {
        "negatives_without_context": round(clean / max(1, neg), 4),
        "ungated_r5": round(ungated / max(1, len(sizes)), 4),
        "gated_r5": round(gated / max(1, len(sizes)), 4),
        "ratio": round(gated / ungated, 4) if ungated else 0.0,
        "mean_bytes_real": round(sum(sizes) / max(1, len(sizes)), 1),
    }


def record_floor(queries: list[Query], prompts: list[float], min_prompt: float) -> float:
    for floor in FLOORS:
        if outcome(queries, prompts, min_prompt, floor)["mean_bytes_real"] <= BYTES_TARGET:
            return floor
    return FLOORS[-1]


def _above_share(queries: list[Query], floor: float) -> float:
    rels = [h.relevance for q in queries if q.gold for h in q.hits]
    return sum(r >= floor for r in rels) / max(1, len(rels))


def _floor_for_share(queries: list[Query], share: float) -> float:
    """The relevance above which ``share`` of the real queries' hits lie."""
    rels = sorted((h.relevance for q in queries if q.gold for h in q.hits), reverse=True)
    return rels[min(len(rels) - 1, max(0, round(share * len(rels)) - 1))]


def fit_split(data: dict[tuple[str, str], list[Query]], fit_on: str) -> dict[str, dict[str, Any]]:
    split: dict[str, dict[str, Any]] = {}
    for mode in ("hybrid", "lexical"):
        lexical = mode == "lexical"
        fit_q = data[(fit_on, mode)]
        rec = record_model(fit_q, lexical)
        if lexical:
            # The hybrid floor keeps the same share of the real queries' hits here.
            floor, share = split["hybrid"]["floor"], split["hybrid"]["above_floor"]
            rec = rec.shifted(_floor_for_share(rescored(fit_q, rec, lexical), share), floor)
        scored = rescored(fit_q, rec, lexical)
        pm = prompt_model(scored, lexical)
        prompts = [pm(_prompt_x(q, lexical)) for q in scored]
        min_prompt = negatives_quantile(prompts, scored, TARGET_REJECT)
        if lexical:
            pm = pm.shifted(min_prompt, split["hybrid"]["min_prompt"])
            min_prompt = split["hybrid"]["min_prompt"]
            prompts = [pm(_prompt_x(q, lexical)) for q in scored]
        else:
            floor = record_floor(scored, prompts, min_prompt)
        scores, curve = {}, {}
        for p in _codemem.PROJECTS:
            qs = rescored(data[(p, mode)], rec, lexical)
            ps = [pm(_prompt_x(q, lexical)) for q in qs]
            label = f"{p} ({'fit' if p == fit_on else 'held out'})"
            scores[label] = outcome(qs, ps, min_prompt, floor)
            curve[label] = [
                {"quantile": share, "min_prompt": round(t, 4), **outcome(qs, ps, t, floor)}
                for share in CURVE
                for t in [negatives_quantile(prompts, scored, share)]
            ]
        split[mode] = {
            "record_features": list(gate.LEXICAL_FEATURES if lexical else gate.FEATURES),
            "record": {"coef": list(rec.coef), "intercept": rec.intercept},
            "prompt_features": list(
                gate.LEXICAL_PROMPT_FEATURES if lexical else gate.PROMPT_FEATURES
            ),
            "prompt": {"coef": list(pm.coef), "intercept": pm.intercept},
            "min_prompt": round(min_prompt, 4),
            "floor": floor,
            "above_floor": round(_above_share(scored, floor), 4),
            "scores": scores,
            "curve": curve,
        }
    return split


def constants(shipped: dict[str, Any]) -> str:
    """The lines of ``gate.py`` and ``config.py`` this fit gives."""
    h, lx = shipped["hybrid"], shipped["lexical"]
    return "\n".join(
        [
            f"HYBRID_COEF = {tuple(h['record']['coef'])}",
            f"HYBRID_INTERCEPT = {h['record']['intercept']}",
            f"LEXICAL_COEF = {tuple(lx['record']['coef'])}",
            f"LEXICAL_INTERCEPT = {lx['record']['intercept']}",
            f"PROMPT_COEF = {tuple(h['prompt']['coef'])}",
            f"PROMPT_INTERCEPT = {h['prompt']['intercept']}",
            f"LEXICAL_PROMPT_COEF = {tuple(lx['prompt']['coef'])}",
            f"LEXICAL_PROMPT_INTERCEPT = {lx['prompt']['intercept']}",
            f"DEFAULT_MIN_PROMPT_RELEVANCE = {math.ceil(h['min_prompt'] * 1000) / 1000}"
            "  # config.py",
            f"DEFAULT_MIN_RELEVANCE = {h['floor']}  # config.py",
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
    result: dict[str, Any] = {
        "target_reject": TARGET_REJECT,
        "bytes_target": BYTES_TARGET,
        "l2": L2,
        "splits": {
            f"fit on {p}": fit_split(data, p)
            for p in (FIT, *(p for p in _codemem.PROJECTS if p != FIT))
        },
    }
    result["shipped"] = result["splits"][f"fit on {FIT}"]
    result["constants"] = constants(result["shipped"])
    return result


def _coefs(names: list[str], model: dict[str, Any]) -> str:
    pairs = zip(names, model["coef"], strict=True)
    return ", ".join(f"{f} {c:+.3f}" for f, c in pairs) + f"; intercept {model['intercept']:+.3f}"


def markdown(result: dict[str, Any]) -> str:
    if "skipped" in result:
        return f"# Relevance gate fit\n\nSkipped: {result['skipped']}\n"
    lines = [
        "# Relevance gate: logistic fits on codemem-dev",
        "",
        f"Prompt threshold: the smallest prompt relevance leaving {result['target_reject']:.0%} "
        "of the fit project's negatives without context. Record floor: the smallest "
        f"keeping the fit project's mean injected bytes per real prompt ≤ "
        f"{result['bytes_target']}. L2 {result['l2']}. Offline view over the prompt's "
        "candidates (ungated: their first five; no session dedupe); `bench/gate.py` runs "
        "the real prompt path.",
    ]
    for split, modes in result["splits"].items():
        lines += ["", f"## {split}", ""]
        for mode, m in modes.items():
            lines += [
                f"**{mode}** record model: {_coefs(m['record_features'], m['record'])}. "
                f"Prompt model: {_coefs(m['prompt_features'], m['prompt'])}. Prompt "
                f"threshold {m['min_prompt']:.4f}, record floor {m['floor']}.",
                "",
                "| project | negatives without context | ungated R@5 | gated R@5 | ratio "
                "| bytes / real prompt |",
                "|---|---|---|---|---|---|",
            ]
            for p, s in m["scores"].items():
                lines.append(
                    f"| {p} | {s['negatives_without_context']:.3f} | {s['ungated_r5']:.3f} "
                    f"| {s['gated_r5']:.3f} | {s['ratio']:.3f} | {s['mean_bytes_real']:.0f} |"
                )
            lines += [
                "",
                "Trade-off (prompt threshold at other quantiles of the fit negatives): "
                "negatives without context / ratio / bytes",
                "",
                "| fit negatives' quantile | " + " | ".join(m["curve"]) + " |",
                "|---|" + "---|" * len(m["curve"]),
            ]
            for i, share in enumerate(CURVE):
                cells = [
                    f"{c[i]['negatives_without_context']:.3f} / {c[i]['ratio']:.3f} / "
                    f"{c[i]['mean_bytes_real']:.0f}"
                    for c in m["curve"].values()
                ]
                lines.append(f"| {share:.2f} | " + " | ".join(cells) + " |")
            lines.append("")
    lines += [f"## Shipped (fit on {FIT})", "", "```python", result["constants"], "```"]
    return "\n".join(lines) + "\n"

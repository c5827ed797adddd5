"""Fit the relevance gate on labelled project history: the per-record and the per-prompt
logistic models and their two thresholds.

The projects: codemem-dev's two (werkzeug, jinja) and every set ``bench/_history_set.py``
built (``_codemem.extra_projects()``). Every query and negative of a project runs through
``Retriever.search`` (the prompt's depth, ``PROMPT_CANDIDATES``) on the replayed database
of ``bench/_codemem.py``. Then, on the pooled queries of the fit projects:

1. The record model: each hit is one example, its ``gate.Evidence`` and whether it is a
   gold record of the query.
2. The prompt model: each query is one example, ``gate.prompt_vector`` of its hits
   (relevance under the model of 1, their evidence) and whether it is a real query.
3. The prompt threshold: the smallest prompt relevance at which every fit project leaves
   ``TARGET_REJECT`` of its negatives without context (the strictest project decides).
4. The record floor: the smallest (most recall) at which every fit project's real prompts
   get at most ``BYTES_TARGET`` bytes on average through ``inject.select``.

Each is fitted twice, on the hybrid evidence and on the lexical evidence alone (a runtime
with the embedder off); the lexical models' intercepts are then shifted so that the same
two thresholds serve both (the same share of real queries' hits above the floor, the same
share of negatives rejected). Each project is held out once (fitted on all the others) —
the estimate of how the gate does on a project it never saw — and the shipped constants
are fitted on all of them. Offline ("ungated" is the first five of the candidates; no
session dedupe): ``bench/gate.py`` runs the real prompt path. The trade-off curve shows,
for other prompt thresholds, the share of negatives left without context against
gated/ungated recall@5.

The constants printed under "shipped" go into ``shared/retrieval/gate.py`` and
``shared/config.py``. Run: ``python -m bench fit_gate`` (``python -m bench._history_set``
first, for the extra projects).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from bench import _codemem
from tests.retrieval.relevance import warm
from wakemark.shared.retrieval import gate, inject
from wakemark.shared.retrieval.hits import SearchHit
from wakemark.shared.retrieval.retriever import PROMPT_CANDIDATES, PROMPT_LIMIT

TARGET_REJECT = 0.905  # of the fit project's negatives left without context (target 0.90)
BYTES_TARGET = 1000  # mean injected bytes per real prompt of the fit project (target 1 KB)
MAX_BYTES = 1536  # the default WAKEMARK_PROMPT_MAX_BYTES
FLOORS = tuple(round(0.001 * 1.25**i, 4) for i in range(24))  # 0.001 to ~0.17
CURVE = (0.80, 0.85, 0.88, 0.905, 0.92, 0.95)  # negatives' quantiles of the curve
L2 = 1.0


@dataclass(frozen=True)
class Query:
    qid: str
    gold: frozenset[str]  # empty: a negative
    hits: list[SearchHit]


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
    return gate.prompt_vector([h.relevance for h in q.hits], [h.evidence for h in q.hits], lexical)


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


def record_floor(groups: list[tuple[list[Query], list[float]]], min_prompt: float) -> float:
    """The smallest floor keeping every fit project's real prompts within ``BYTES_TARGET``."""
    for floor in FLOORS:
        if all(
            outcome(qs, ps, min_prompt, floor)["mean_bytes_real"] <= BYTES_TARGET
            for qs, ps in groups
        ):
            return floor
    return FLOORS[-1]


def _above_share(queries: list[Query], floor: float) -> float:
    rels = [h.relevance for q in queries if q.gold for h in q.hits]
    return sum(r >= floor for r in rels) / max(1, len(rels))


def _floor_for_share(queries: list[Query], share: float) -> float:
    """The relevance above which ``share`` of the real queries' hits lie."""
    rels = sorted((h.relevance for q in queries if q.gold for h in q.hits), reverse=True)
    return rels[min(len(rels) - 1, max(0, round(share * len(rels)) - 1))]


def fit_split(
    data: dict[tuple[str, str], list[Query]],
    fit_on: tuple[str, ...],
    modes: tuple[str, ...] = ("hybrid", "lexical"),
) -> dict[str, dict[str, Any]]:
    """Both models fitted on the pooled queries of ``fit_on``; each threshold is the one the
    strictest fit project needs (every fit project leaves ``TARGET_REJECT`` of its negatives
    empty and stays within ``BYTES_TARGET``), then every project is scored."""
    projects = sorted({p for p, _ in data}, key=_order)
    split: dict[str, dict[str, Any]] = {}
    for mode in modes:
        lexical = mode == "lexical"
        pooled = [q for p in fit_on for q in data[(p, mode)]]
        rec = record_model(pooled, lexical)
        if lexical:
            # The hybrid floor keeps the same share of the real queries' hits here.
            floor, share = split["hybrid"]["floor"], split["hybrid"]["above_floor"]
            rec = rec.shifted(_floor_for_share(rescored(pooled, rec, lexical), share), floor)
        scored = {p: rescored(data[(p, mode)], rec, lexical) for p in projects}
        fit_scored = [q for p in fit_on for q in scored[p]]
        pm = prompt_model(fit_scored, lexical)
        prompts = _prompts(scored, pm, lexical)
        min_prompt = _threshold([(scored[p], prompts[p]) for p in fit_on], TARGET_REJECT)
        if lexical:
            pm = pm.shifted(min_prompt, split["hybrid"]["min_prompt"])
            min_prompt = split["hybrid"]["min_prompt"]
            prompts = _prompts(scored, pm, lexical)
        fitted = [(scored[p], prompts[p]) for p in fit_on]
        if not lexical:
            floor = record_floor(fitted, min_prompt)
        scores, curve = {}, {}
        for p in projects:
            qs, ps = scored[p], prompts[p]
            label = f"{p} ({'fit' if p in fit_on else 'held out'})"
            scores[label] = outcome(qs, ps, min_prompt, floor)
            curve[label] = [
                {"quantile": share, "min_prompt": round(t, 4), **outcome(qs, ps, t, floor)}
                for share in CURVE
                for t in [_threshold(fitted, share)]
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
            "above_floor": round(_above_share(fit_scored, floor), 4),
            "scores": scores,
            "curve": curve,
        }
    return split


def _prompts(scored: dict[str, list[Query]], pm: Model, lexical: bool) -> dict[str, list[float]]:
    """Each project's prompt relevance under ``pm``, query by query."""
    return {p: [pm(_prompt_x(q, lexical)) for q in qs] for p, qs in scored.items()}


def _threshold(fitted: list[tuple[list[Query], list[float]]], share: float) -> float:
    """The prompt threshold leaving ``share`` of every fit project's negatives empty."""
    return max(negatives_quantile(ps, qs, share) for qs, ps in fitted)


def _order(project: str) -> tuple[int, str]:
    return (project not in _codemem.PROJECTS, project)


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


def projects() -> list[str]:
    return [*_codemem.PROJECTS, *_codemem.extra_projects()]


def run() -> dict[str, Any]:
    if _codemem.missing():
        return {"skipped": _codemem.missing()}
    names = projects()
    data = {
        (p, mode): collect(p, "onnx" if mode == "hybrid" else "off")
        for p in names
        for mode in ("hybrid", "lexical")
    }
    return fit_all(data, names)


def fit_all(
    data: dict[tuple[str, str], list[Query]],
    names: list[str],
    modes: tuple[str, ...] = ("hybrid", "lexical"),
) -> dict[str, Any]:
    """Each project held out once (fit on all the others), then the shipped fit on all.
    ``modes`` without "lexical": the hybrid gate alone (no shipped constants)."""
    splits = {
        f"without {p}": fit_split(data, tuple(o for o in names if o != p), modes) for p in names
    }
    splits["all projects"] = fit_split(data, tuple(names), modes)
    result: dict[str, Any] = {
        "target_reject": TARGET_REJECT,
        "bytes_target": BYTES_TARGET,
        "l2": L2,
        "projects": names,
        "splits": splits,
    }
    result["shipped"] = splits["all projects"]
    if "lexical" in modes:
        result["constants"] = constants(result["shipped"])
    return result


def _coefs(names: list[str], model: dict[str, Any]) -> str:
    pairs = zip(names, model["coef"], strict=True)
    return ", ".join(f"{f} {c:+.3f}" for f, c in pairs) + f"; intercept {model['intercept']:+.3f}"


def _row(name: str, s: dict[str, float]) -> str:
    return (
        f"| {name} | {s['negatives_without_context']:.3f} | {s['ungated_r5']:.3f} "
        f"| {s['gated_r5']:.3f} | {s['ratio']:.3f} | {s['mean_bytes_real']:.0f} |"
    )


HEAD = [
    "| project | negatives without context | ungated R@5 | gated R@5 | ratio "
    "| bytes / real prompt |",
    "|---|---|---|---|---|---|",
]


def markdown(result: dict[str, Any]) -> str:
    if "skipped" in result:
        return f"# Relevance gate fit\n\nSkipped: {result['skipped']}\n"
    names = result["projects"]
    lines = [
        "# Relevance gate: logistic fits on project history",
        "",
        f"Projects: {', '.join(names)} (codemem-dev's two, then `bench/_history_set.py`'s). "
        f"Prompt threshold: the smallest prompt relevance leaving {result['target_reject']:.1%} "
        "of every fit project's negatives without context. Record floor: the smallest "
        f"keeping every fit project's mean injected bytes per real prompt ≤ "
        f"{result['bytes_target']}. L2 {result['l2']}. Offline view over the prompt's "
        "candidates (ungated: their first five; no session dedupe); `bench/gate.py` runs "
        "the real prompt path.",
    ]
    for mode in ("hybrid", "lexical"):
        lines += [
            "",
            f"## {mode}: each project held out (fitted on all the others)",
            "",
            *HEAD,
        ]
        for p in names:
            lines.append(
                _row(p, result["splits"][f"without {p}"][mode]["scores"][f"{p} (held out)"])
            )
        m = result["shipped"][mode]
        lines += [
            "",
            f"## {mode}: shipped (fitted on all projects)",
            "",
            f"Record model: {_coefs(m['record_features'], m['record'])}. Prompt model: "
            f"{_coefs(m['prompt_features'], m['prompt'])}. Prompt threshold "
            f"{m['min_prompt']:.4f}, record floor {m['floor']}.",
            "",
            *HEAD,
        ]
        lines += [_row(p, s) for p, s in m["scores"].items()]
        lines += [
            "",
            "Trade-off (prompt threshold at other quantiles of the fit negatives): "
            "negatives without context / ratio / bytes",
            "",
            "| fit negatives' quantile | " + " | ".join(names) + " |",
            "|---|" + "---|" * len(names),
        ]
        for i, share in enumerate(CURVE):
            cells = [
                f"{c[i]['negatives_without_context']:.3f} / {c[i]['ratio']:.3f} / "
                f"{c[i]['mean_bytes_real']:.0f}"
                for c in m["curve"].values()
            ]
            lines.append(f"| {share:.3f} | " + " | ".join(cells) + " |")
    lines += ["", "## Shipped constants", "", "```python", result["constants"], "```"]
    return "\n".join(lines) + "\n"

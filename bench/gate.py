"""The relevance gate on codemem-dev, through the real prompt path.

Per project (the replayed, extracted and embedded database of ``bench/_codemem.py``, a
scratch copy of it): search quality of ``Retriever.search`` (recall@5/10, MRR@10; the
gate does not reorder it), then every real query and every negative stored as a prompt
event of its own session and answered by ``Retriever.for_prompt``, the code behind hook
replies and ``POST /v1/events?retrieve=true``. "Ungated" is the prompt path before the
gate: the search's first five records, always. Also: a repeated prompt in one session
(session dedupe), the gate's cost per search, and the audit's cost per prompt.

Where gated recall goes: each gold record of the ungated five is counted once, by what
the prompt path did with it (injected; the prompt rejected as a whole; below the record
floor; not among the prompt's candidates; or the selection's reason: budget, limit,
duplicate, seen).

The shipped gate was fitted (``bench/fit_gate.py``) on codemem-dev and the sets of
``bench/_history_set.py`` together, so both projects here were seen in the fit; each
project's held-out estimate (fitted on all the others) is in ``fit_gate.md``. Both
backends: SQLite (the cached replay) and Postgres (replayed into a fresh schema of
``WAKEMARK_BENCH_DATABASE_URL``, default the test database). Run: ``python -m bench gate``.

``WAKEMARK_GATE_PROJECTS`` chooses the projects: unset, codemem-dev's two; ``all``, those
and every set of ``bench/_history_set.py`` found (``_codemem.extra_projects()``); else a
comma-separated list of names. ``WAKEMARK_GATE_BACKENDS`` (default ``sqlite,postgres``)
chooses the backends.
"""

from __future__ import annotations

import os
import random
import tempfile
import time
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench import _codemem
from bench._stats import mean, nearest_rank
from bench.search import DEFAULT_PG, _drop_schema, _pg_schema_url, _vacuum
from tests.retrieval.relevance import warm
from wakemark.shared.models import Event, Retrieval, new_ulid
from wakemark.shared.retrieval import retriever as retrieval
from wakemark.shared.retrieval.formatting import format_context
from wakemark.shared.retrieval.retriever import PROMPT_CANDIDATES, PROMPT_LIMIT
from wakemark.shared.storage import SearchQuery

DEPTH = 10
COST_QUERIES = 200  # searches timed for the gate's own cost
RESAMPLES = 2000  # of the paired bootstrap behind each ratio's interval


def prompt(project: _codemem.Project, text: str, session: str) -> Event:
    return Event(
        event_id=new_ulid(),
        session_id=session,
        actor_id=_codemem.ACTOR,
        namespace=project.namespace,
        kind="prompt",
        body={"type": "text", "content": text},
        valid_time=datetime.now(UTC),
        source={"surface": "bench"},
    )


def ask(project: _codemem.Project, text: str, session: str) -> tuple[dict[str, Any], float]:
    """The prompt stored, then answered as the API does; (reply, wall ms)."""
    event = prompt(project, text, session)
    project.runtime.storage.put_events([event])
    start = time.perf_counter()
    reply = project.runtime.retriever.for_prompt(project.namespace, event).to_json()
    return reply, (time.perf_counter() - start) * 1000


def search_quality(project: _codemem.Project) -> dict[str, float]:
    r5, r10, rr = [], [], []
    for q in project.queries:
        ids = [
            h.record.record_id
            for h in project.runtime.retriever.search(project.namespace, q.text, DEPTH).items
        ]
        r5.append(len(q.gold & set(ids[:5])) / len(q.gold))
        r10.append(len(q.gold & set(ids[:10])) / len(q.gold))
        rr.append(next((1 / (i + 1) for i, rid in enumerate(ids) if rid in q.gold), 0.0))
    return {"recall@5": mean(r5), "recall@10": mean(r10), "mrr@10": mean(rr)}


def ungated(project: _codemem.Project) -> dict[str, Any]:
    """The prompt path before the gate: the first five hits, every time."""
    recall, sizes, neg_empty = [], [], 0
    for q in project.queries + project.negatives:
        hits = project.runtime.retriever.search(project.namespace, q.text, PROMPT_LIMIT).items
        if q.gold:
            recall.append(len(q.gold & {h.record.record_id for h in hits}) / len(q.gold))
            sizes.append(len(format_context([h.record for h in hits]).encode()))
        else:
            neg_empty += not hits
    return {
        "recall@5": mean(recall),
        "recall@5_per_query": recall,
        "negatives_without_context": round(neg_empty / len(project.negatives), 4),
        "mean_bytes_real": mean(sizes),
    }


def gated(project: _codemem.Project) -> dict[str, Any]:
    recall, records, sizes, overhead = [], [], [], []
    neg_empty, neg_bytes = 0, []
    losses: Counter[str] = Counter()
    storage = project.runtime.storage
    for q in project.queries + project.negatives:
        reply, wall = ask(project, q.text, f"bench-{q.qid}-{new_ulid()}")
        overhead.append(wall - reply["latency_ms"])
        size = len(reply["context"].encode())
        if q.gold:
            recall.append(len(q.gold & set(reply["records"])) / len(q.gold))
            records.append(len(reply["records"]))
            sizes.append(size)
            project.runtime.retriever.flush_audit()  # the audit row is written after the reply
            row = storage.get_retrieval(reply["retrieval_id"])
            assert row is not None
            top = project.runtime.retriever.search(project.namespace, q.text, PROMPT_LIMIT).items
            for rid in q.gold & {h.record.record_id for h in top}:
                losses[_fate(row, rid)] += 1 / len(q.gold)
        else:
            neg_empty += not reply["records"]
            neg_bytes.append(size)
    injected = [s for s in sizes if s]
    overhead.sort()
    n = len(project.queries)
    return {
        "recall@5": mean(recall),
        "recall@5_per_query": recall,
        "bytes_per_query": sizes,
        "negatives_without_context": round(neg_empty / len(project.negatives), 4),
        "negatives_mean_bytes": mean(neg_bytes),
        "real_injected_share": round(len(injected) / len(sizes), 4),
        "mean_records_real": mean(records),
        "mean_bytes_real": mean(sizes),
        "mean_bytes_per_injection": mean(injected),
        "prompt_overhead_ms_p50": round(overhead[len(overhead) // 2], 3),
        "prompt_overhead_ms_p95": round(overhead[int(len(overhead) * 0.95)], 3),
        # recall@5 points (over real queries) of the ungated five, by what became of them
        "ungated_gold_fate": {k: round(v / n, 4) for k, v in sorted(losses.items())},
    }


def _fate(row: Retrieval, record_id: str) -> str:
    if record_id in row.injected:
        return "injected"
    if (row.prompt_relevance or 0.0) < (row.min_prompt_relevance or 0.0):
        return "prompt rejected"
    candidate = next((c for c in row.candidates if c.record_id == record_id), None)
    if candidate is None:
        return "not a candidate"
    if candidate.relevance < row.min_relevance:
        return "below the record floor"
    return candidate.skipped or "unexplained"


def session_repeat(project: _codemem.Project) -> dict[str, int]:
    """Each of the first 50 real queries asked twice in one session."""
    first = again = 0
    for q in project.queries[:50]:
        session = f"bench-repeat-{new_ulid()}"
        a, _ = ask(project, q.text, session)
        b, _ = ask(project, q.text, session)
        first += len(a["records"])
        again += len(set(a["records"]) & set(b["records"]))
    return {"records_first": first, "records_repeated_second": again}


def gate_cost_us(project: _codemem.Project) -> float:
    """Mean µs per search of the gate's evidence and relevance (``_with_relevance``),
    on the legs' real outputs at the prompt's depth."""
    rt = project.runtime
    r = rt.retriever
    k = PROMPT_CANDIDATES * retrieval.CANDIDATES
    total = 0.0
    queries = (project.queries + project.negatives)[:COST_QUERIES]
    for q in queries:
        where = SearchQuery(project.namespace, k)
        ranked = {leg.name: leg.search(where, q.text) for leg in r._legs}
        items = r.search(project.namespace, q.text, PROMPT_CANDIDATES).items
        start = time.perf_counter()
        r._with_relevance(project.namespace, q.text, items, ranked)
        total += time.perf_counter() - start
    return round(total / len(queries) * 1e6, 1)


def project_result(project: _codemem.Project) -> dict[str, Any]:
    warm(project.runtime.retriever, project.namespace, True)
    storage = project.runtime.storage
    if hasattr(storage, "memory_index"):  # the full-text index held in memory, built
        storage.memory_index(wait_s=600)
    return {
        "queries": len(project.queries),
        "negatives": len(project.negatives),
        "search": search_quality(project),
        "ungated": ungated(project),
        "gated": gated(project),
        "session_repeat": session_repeat(project),
        "gate_us_per_search": gate_cost_us(project),
    }


def projects() -> list[str]:
    chosen = os.environ.get("WAKEMARK_GATE_PROJECTS", "").strip()
    if not chosen:
        return list(_codemem.PROJECTS)
    if chosen == "all":
        return [*_codemem.PROJECTS, *_codemem.extra_projects()]
    return [name.strip() for name in chosen.split(",") if name.strip()]


def backends() -> list[str]:
    chosen = os.environ.get("WAKEMARK_GATE_BACKENDS", "sqlite,postgres")
    names = [name.strip() for name in chosen.split(",") if name.strip()]
    unknown = set(names) - {"sqlite", "postgres"}
    if unknown or not names:
        raise SystemExit(f"WAKEMARK_GATE_BACKENDS: sqlite and/or postgres, not {chosen!r}")
    return names


def _backend(database_url: str | None) -> dict[str, Any]:
    out: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as scratch:
        for name in projects():
            project = _codemem.open_project(
                name, scratch=Path(scratch), database_url=database_url, retrieval_budget_ms=10_000
            )
            try:
                if database_url:
                    _vacuum(project.runtime.settings)
                out[name] = project_result(project)
            finally:
                project.runtime.close()
    return out


def run() -> dict[str, Any]:
    if _codemem.missing():
        return {"skipped": _codemem.missing()}
    from wakemark.shared.config import Settings

    settings = Settings.from_env()
    result: dict[str, Any] = {
        "settings": {
            "min_prompt_relevance": settings.min_prompt_relevance,
            "min_relevance": settings.min_relevance,
            "prompt_max_bytes": settings.prompt_max_bytes,
            "consolidate": settings.consolidate,
        },
        "backends": {},
        "load_average": {},  # per backend: before and after its run
    }
    for name in backends():
        before = _load()
        if name == "sqlite":
            result["backends"][name] = _backend(None)
        else:
            base = os.environ.get("WAKEMARK_BENCH_DATABASE_URL", DEFAULT_PG)
            schema, url = _pg_schema_url(base)
            try:
                result["backends"][name] = _backend(url)
            finally:
                _drop_schema(base, schema)
        result["load_average"][name] = [before, _load()]
    return result


def ratio_interval(ungated: list[float], gated: list[float], seed: int = 0) -> tuple[float, float]:
    """The 95 % interval of gated / ungated recall@5, by a paired bootstrap over the real
    queries: in a set of 24 queries one query moves the ratio by about 0.05, so a small
    set's ratio alone cannot tell a gate that keeps 0.95 of recall from one that does not."""
    rng = random.Random(seed)
    n = len(ungated)
    ratios = []
    for _ in range(RESAMPLES):
        drawn = [rng.randrange(n) for _ in range(n)]
        base = sum(ungated[i] for i in drawn)
        if base:
            ratios.append(sum(gated[i] for i in drawn) / base)
    if not ratios:
        return 0.0, 0.0
    return nearest_rank(ratios, 0.025), nearest_rank(ratios, 0.975)


def pooled(projects: dict[str, Any]) -> dict[str, Any]:
    """Every set's real queries and negatives as one: the gate is one model for all."""
    u = [r for p in projects.values() for r in p["ungated"]["recall@5_per_query"]]
    g = [r for p in projects.values() for r in p["gated"]["recall@5_per_query"]]
    negatives = sum(p["negatives"] for p in projects.values())
    clean = sum(p["gated"]["negatives_without_context"] * p["negatives"] for p in projects.values())
    sizes = [b for p in projects.values() for b in p["gated"]["bytes_per_query"]]
    return {
        "queries": len(u),
        "ratio": sum(g) / sum(u) if sum(u) else 0.0,
        "ratio_interval": ratio_interval(u, g),
        "negatives_without_context": clean / negatives if negatives else 0.0,
        "mean_bytes_real": mean(sizes),
    }


def _load() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def markdown(result: dict[str, Any]) -> str:
    if "skipped" in result:
        return f"# Relevance gate\n\nSkipped: {result['skipped']}\n"
    s = result["settings"]
    lines = [
        "# Relevance gate (real prompt path)",
        "",
        "Gate fitted on all projects of `bench/fit_gate.py` (held-out estimates there); "
        f"`WAKEMARK_MIN_PROMPT_RELEVANCE` "
        f"{s['min_prompt_relevance']}, `WAKEMARK_MIN_RELEVANCE` {s['min_relevance']}, "
        f"`WAKEMARK_PROMPT_MAX_BYTES` {s['prompt_max_bytes']}, `WAKEMARK_CONSOLIDATE` "
        f"{s.get('consolidate', 'on')}. Targets: ≥ 90 % of "
        "negatives without context, gated recall@5 ≥ 0.95 × ungated, ≤ 1 KB mean injected "
        "on real queries, search recall@10 not below the pre-gate .925 (werkzeug) / "
        ".842 (jinja).",
    ]
    for backend, projects in result["backends"].items():
        lines += [
            "",
            f"## {backend}",
            "",
            f"Load average {' → '.join(map(str, result['load_average'][backend]))}.",
            "",
            "| project | search R@5 | R@10 | MRR | ungated R@5 | gated R@5 | ratio "
            "| ratio, 95 % interval | negatives without context (ungated → gated) "
            "| records / real prompt | bytes / real prompt (ungated → gated) "
            "| bytes / injection |",
            "|---|---|---|---|---|---|---|---|---|---|---|---|",
        ]
        for name, p in projects.items():
            se, u, g = p["search"], p["ungated"], p["gated"]
            ratio = g["recall@5"] / u["recall@5"] if u["recall@5"] else 0.0
            low, high = ratio_interval(u["recall@5_per_query"], g["recall@5_per_query"])
            lines.append(
                f"| {name} | {se['recall@5']:.3f} | {se['recall@10']:.3f} "
                f"| {se['mrr@10']:.3f} | {u['recall@5']:.3f} | {g['recall@5']:.3f} "
                f"| {ratio:.3f} | {low:.2f}–{high:.2f} "
                f"| {u['negatives_without_context']:.0%} → {g['negatives_without_context']:.1%} "
                f"| {g['mean_records_real']:.2f} | {u['mean_bytes_real']:.0f} → "
                f"{g['mean_bytes_real']:.0f} | {g['mean_bytes_per_injection']:.0f} |"
            )
        if len(projects) > 1:
            a = pooled(projects)
            low, high = a["ratio_interval"]
            lines.append(
                f"| all {len(projects)} sets ({a['queries']} queries) | | | | | "
                f"| {a['ratio']:.3f} | {low:.2f}–{high:.2f} "
                f"| → {a['negatives_without_context']:.1%} | | → {a['mean_bytes_real']:.0f} | |"
            )
        lines += [
            "",
            "| project | queries | negatives | real prompts injected | gate µs / search "
            "| prompt overhead p50 / p95 ms (dedupe read, select, audit write) "
            "| same prompt twice in a session: records repeated "
            "| the ungated five's gold, by fate (recall@5 points) |",
            "|---|---|---|---|---|---|---|---|",
        ]
        for name, p in projects.items():
            g, rep = p["gated"], p["session_repeat"]
            fate = ", ".join(f"{k} {v:.3f}" for k, v in g["ungated_gold_fate"].items())
            lines.append(
                f"| {name} | {p['queries']} | {p['negatives']} | {g['real_injected_share']:.0%} "
                f"| {p['gate_us_per_search']:.0f} | {g['prompt_overhead_ms_p50']:.2f} / "
                f"{g['prompt_overhead_ms_p95']:.2f} | {rep['records_repeated_second']} of "
                f"{rep['records_first']} | {fate} |"
            )
    return "\n".join(lines) + "\n"

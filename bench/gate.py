"""The relevance gate on codemem-dev, through the real prompt path.

Per project (the replayed, extracted and embedded database of ``bench/_codemem.py``, a
scratch copy of it): search quality of ``Retriever.search`` (recall@5/10, MRR@10; the
gate does not reorder it), then every real query and every negative stored as a prompt
event of its own session and answered by ``Retriever.for_prompt``, the code behind hook
replies and ``POST /v1/events?retrieve=true``. "Ungated" is the prompt path before the
gate: the search's first five records, always. Also: a repeated prompt in one session
(session dedupe), the gate's cost per search, and the audit's cost per prompt.

The shipped gate was fitted on werkzeug (``bench/fit_gate.py``): jinja is held out.
SQLite only. Run: ``python -m bench gate``.
"""

from __future__ import annotations

import statistics
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench import _codemem
from bench.fit_gate import FIT, warm
from wakemark.shared.models import Event, new_ulid
from wakemark.shared.retrieval import retriever as retrieval
from wakemark.shared.retrieval.formatting import format_context
from wakemark.shared.retrieval.retriever import PROMPT_CANDIDATES, PROMPT_LIMIT

DEPTH = 10
COST_QUERIES = 200  # searches timed for the gate's own cost


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
    reply = project.runtime.retriever.for_prompt(project.namespace, event)
    return reply, (time.perf_counter() - start) * 1000


def _mean(values: list[float]) -> float:
    return round(statistics.fmean(values), 4) if values else 0.0


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
    return {"recall@5": _mean(r5), "recall@10": _mean(r10), "mrr@10": _mean(rr)}


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
        "recall@5": _mean(recall),
        "negatives_without_context": round(neg_empty / len(project.negatives), 4),
        "mean_bytes_real": _mean(sizes),
    }


def gated(project: _codemem.Project) -> dict[str, Any]:
    recall, records, sizes, overhead = [], [], [], []
    neg_empty, neg_bytes = 0, []
    for q in project.queries + project.negatives:
        reply, wall = ask(project, q.text, f"bench-{q.qid}-{new_ulid()}")
        overhead.append(wall - reply["latency_ms"])
        size = len(reply["context"].encode())
        if q.gold:
            recall.append(len(q.gold & set(reply["records"])) / len(q.gold))
            records.append(len(reply["records"]))
            sizes.append(size)
        else:
            neg_empty += not reply["records"]
            neg_bytes.append(size)
    injected = [s for s in sizes if s]
    overhead.sort()
    return {
        "recall@5": _mean(recall),
        "negatives_without_context": round(neg_empty / len(project.negatives), 4),
        "negatives_mean_bytes": _mean(neg_bytes),
        "real_injected_share": round(len(injected) / len(sizes), 4),
        "mean_records_real": _mean(records),
        "mean_bytes_real": _mean(sizes),
        "mean_bytes_per_injection": _mean(injected),
        "prompt_overhead_ms_p50": round(overhead[len(overhead) // 2], 3),
        "prompt_overhead_ms_p95": round(overhead[int(len(overhead) * 0.95)], 3),
    }


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
        ranked = {leg.name: leg.search(project.namespace, q.text, k) for leg in r._legs}
        items = r.search(project.namespace, q.text, PROMPT_CANDIDATES).items
        start = time.perf_counter()
        r._with_relevance(project.namespace, q.text, items, ranked)
        total += time.perf_counter() - start
    return round(total / len(queries) * 1e6, 1)


def run() -> dict[str, Any]:
    if _codemem.missing():
        return {"skipped": _codemem.missing()}
    result: dict[str, Any] = {"fit_on": FIT, "projects": {}}
    with tempfile.TemporaryDirectory() as scratch:
        for name in _codemem.PROJECTS:
            project = _codemem.open_project(name, scratch=Path(scratch), retrieval_budget_ms=10_000)
            try:
                warm(project.runtime.retriever, project.namespace, True)
                result["settings"] = {
                    "min_relevance": project.runtime.settings.min_relevance,
                    "prompt_max_bytes": project.runtime.settings.prompt_max_bytes,
                }
                result["projects"][name] = {
                    "split": "fit" if name == FIT else "held out",
                    "queries": len(project.queries),
                    "negatives": len(project.negatives),
                    "search": search_quality(project),
                    "ungated": ungated(project),
                    "gated": gated(project),
                    "session_repeat": session_repeat(project),
                    "gate_us_per_search": gate_cost_us(project),
                }
            finally:
                project.runtime.close()
    return result


def markdown(result: dict[str, Any]) -> str:
    if "skipped" in result:
        return f"# Relevance gate\n\nSkipped: {result['skipped']}\n"
    s = result["settings"]
    lines = [
        "# Relevance gate on codemem-dev (real prompt path)",
        "",
        f"Gate fitted on {result['fit_on']}; `WAKEMARK_MIN_RELEVANCE` {s['min_relevance']}, "
        f"`WAKEMARK_PROMPT_MAX_BYTES` {s['prompt_max_bytes']}. SQLite. Targets: ≥ 90 % of "
        "negatives without context, gated recall@5 ≥ 0.95 × ungated, ≤ 1 KB mean injected "
        "on real queries, search recall@10 unchanged.",
        "",
        "| project | split | search R@5 | R@10 | MRR | ungated R@5 | gated R@5 | ratio "
        "| negatives without context (ungated → gated) | records / real prompt "
        "| bytes / real prompt (ungated → gated) | bytes / injection |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name, p in result["projects"].items():
        se, u, g = p["search"], p["ungated"], p["gated"]
        ratio = g["recall@5"] / u["recall@5"] if u["recall@5"] else 0.0
        lines.append(
            f"| {name} | {p['split']} | {se['recall@5']:.3f} | {se['recall@10']:.3f} "
            f"| {se['mrr@10']:.3f} | {u['recall@5']:.3f} | {g['recall@5']:.3f} | {ratio:.3f} "
            f"| {u['negatives_without_context']:.0%} → {g['negatives_without_context']:.0%} "
            f"| {g['mean_records_real']:.2f} | {u['mean_bytes_real']:.0f} → "
            f"{g['mean_bytes_real']:.0f} | {g['mean_bytes_per_injection']:.0f} |"
        )
    lines += [
        "",
        "| project | queries | negatives | real prompts injected | gate µs / search "
        "| prompt overhead p50 / p95 ms (dedupe read, select, audit write) "
        "| same prompt twice in a session: records repeated |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, p in result["projects"].items():
        g, rep = p["gated"], p["session_repeat"]
        lines.append(
            f"| {name} | {p['queries']} | {p['negatives']} | {g['real_injected_share']:.0%} "
            f"| {p['gate_us_per_search']:.0f} | {g['prompt_overhead_ms_p50']:.2f} / "
            f"{g['prompt_overhead_ms_p95']:.2f} | {rep['records_repeated_second']} of "
            f"{rep['records_first']} |"
        )
    return "\n".join(lines) + "\n"

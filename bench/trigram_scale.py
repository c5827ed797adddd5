"""Identifier queries on the 200k-record namespace of ``bench/scale.py``'s database (built
there, reused here): what the trigram leg costs a search on Postgres.

Three query sets of 40: the scale bench's (prose words plus one of the commonest
identifiers), identifiers alone (``cache_deadlock``), and the same in camelCase
(``cacheDeadlock``, a word the full-text index does not hold): the lexical leg then comes
back short of candidates and the retriever adds the trigram leg. Each query is
searched through the retriever (embedder off: lexical and trigram legs only, the default
500 ms budget), then its trigram leg alone with no bound. Reported: search p50/p95, the
share past the deadline (an empty result), the share that ran the trigram
leg, the statements still running in the database when the search had returned, and the
unbounded leg's p50/p95.

The "before" in ``bench/results/trigram_scale.md`` is commit ec4f764 (``git archive``
into a temporary directory, this file copied in): statements unbounded, newest-first
over every match.

Run: ``python -m bench trigram_scale``. To compare with another checkout, run this file
there with ``WAKEMARK_TRIGRAM_OUT=<json>`` and here with ``WAKEMARK_TRIGRAM_BEFORE=<json>``:
the markdown then puts both side by side.
"""

from __future__ import annotations

import json
import os
import random
import time
from pathlib import Path
from typing import Any

import psycopg

from bench import _scale_data as data
from bench._stats import percentiles
from wakemark.shared.config import Settings
from wakemark.shared.retrieval.legs import TrigramLeg
from wakemark.shared.retrieval.lexical import search_lexical
from wakemark.shared.runtime import Runtime
from wakemark.shared.storage import SearchQuery

URL = os.environ.get(
    "WAKEMARK_SCALE_DATABASE_URL", "postgresql://wakemark@127.0.0.1:5432/wakemark_scale"
)
QUERIES = 40
K = 40  # the retriever's depth for 10 hits: the lexical leg short of it adds the trigram leg
RUNNING = """
SELECT count(*) FROM pg_stat_activity
 WHERE state = 'active' AND pid <> pg_backend_pid() AND query LIKE '%%wakemark_trgm_text%%'
"""


def _pct(values: list[float]) -> dict[str, float]:
    return percentiles(values, digits=1, key="p{}")


def _queries() -> dict[str, list[str]]:
    rng = random.Random(3)
    words = data.WORDS[: len(data.WORDS) - len(data.IDENTIFIERS)]
    idents = data.IDENTIFIERS[:QUERIES]
    prose = [" ".join(rng.choices(words, k=rng.randint(2, 5))) for _ in range(QUERIES)]
    return {
        "prose_and_identifier": [f"{p} {rng.choice(idents)}" for p in prose],
        "identifier_alone": list(idents),
        "camel_case_identifier": [_camel(i) for i in idents],
    }


def _camel(identifier: str) -> str:
    head, *rest = identifier.split("_")
    return head + "".join(part.capitalize() for part in rest)


def _measure(rt: Runtime, texts: list[str], probe: psycopg.Connection) -> dict[str, Any]:
    latency, trigram, left_running = [], 0, 0
    before = rt.retriever.metrics()["timeouts"]
    for text in texts:
        trigram += len(search_lexical(rt.storage, data.BIG_NS, text, K)) < K
        result = rt.retriever.search(data.BIG_NS, text, limit=10)
        latency.append(result.latency_ms)
        left_running += probe.execute(RUNNING).fetchone()[0] > 0  # type: ignore[index]
        time.sleep(0.05)
    past = rt.retriever.metrics()["timeouts"] - before
    while probe.execute(RUNNING).fetchone()[0]:  # type: ignore[index]
        time.sleep(0.2)  # the next part starts on a quiet database
    leg, alone = TrigramLeg(rt.storage), []
    for text in texts[:10]:
        t = time.perf_counter()
        leg.search(SearchQuery(data.BIG_NS, K), text)
        alone.append((time.perf_counter() - t) * 1000.0)
    n = len(texts)
    return {
        "searches": n,
        "search_ms": _pct(latency),
        "past_deadline_share": round(past / n, 3),
        "ran_trigram_share": round(trigram / n, 3),
        "left_running_share": round(left_running / n, 3),
        "trigram_leg_unbounded_ms": _pct(alone),
    }


def run() -> dict[str, Any]:
    settings = Settings(home=Path("~/.wakemark-data/trigram-home").expanduser(), embedder="off")
    rt = Runtime.build(settings.replace(database_url=URL))
    out: dict[str, Any] = {"load_avg_before": round(os.getloadavg()[0], 2)}
    try:
        with psycopg.connect(URL, autocommit=True) as probe:
            for name, texts in _queries().items():
                out[name] = _measure(rt, texts, probe)
    finally:
        rt.close()
    out["load_avg_after"] = round(os.getloadavg()[0], 2)
    if target := os.environ.get("WAKEMARK_TRIGRAM_OUT"):
        Path(target).write_text(json.dumps(out, indent=2) + "\n")
    if before := os.environ.get("WAKEMARK_TRIGRAM_BEFORE"):
        out = {"before": json.loads(Path(before).read_text()), "after": out}
    return out


def markdown(result: dict[str, Any]) -> str:
    runs = result if "after" in result else {"this checkout": result}
    lines = [
        "# Trigram leg on the 200k-record namespace (Postgres, `python -m bench trigram_scale`)",
        "",
        "| run | queries | search p50 / p95 ms | past deadline | ran trigram "
        "| left running | leg alone p50 / p95 ms | load avg |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for run_name, r in runs.items():
        for name in ("prose_and_identifier", "identifier_alone", "camel_case_identifier"):
            m = r[name]
            lines.append(
                f"| {run_name} | {name} ({m['searches']}) | {m['search_ms']['p50']} / "
                f"{m['search_ms']['p95']} | {m['past_deadline_share']:.1%} | "
                f"{m['ran_trigram_share']:.1%} | "
                f"{m['left_running_share']:.1%} | {m['trigram_leg_unbounded_ms']['p50']} / "
                f"{m['trigram_leg_unbounded_ms']['p95']} | "
                f"{r['load_avg_before']} -> {r['load_avg_after']} |"
            )
    return "\n".join(lines) + "\n"

"""Search quality on multi-session conversations: REALTALK (``bench/_convo_set.py``).

Each turn of each conversation is one memory record (``speaker: text``, at the turn's
time) in a namespace per conversation, embedded by the real model; the set's questions
are searched in their conversation's namespace as asked at their ``now``. Recall@k is the
share of a question's evidence turns among the first k hits, averaged by kind and by
evidence count (one turn: single-fact; two or more: two-fact). Four configurations in
the same run, on the same database (``CONFIGS``): none of the changes, the defaults
(relative dates), and the defaults with session neighbours or with the topic query.
SQLite; each namespace's vectors are loaded before its questions are searched. The
database is cached under ``$WAKEMARK_CONVO_DIR``.

Run: ``python -m bench._convo_set`` once, then ``python -m bench convo``.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import time
from collections import defaultdict
from datetime import datetime
from pathlib import Path
from typing import Any

from bench import _convo_set
from bench._stats import mean, nearest_rank
from tests.retrieval.relevance import warm
from wakemark.shared.config import Settings
from wakemark.shared.jobs import tasks
from wakemark.shared.models import MemoryRecord
from wakemark.shared.runtime import Runtime
from wakemark.shared.storage import migrate

KS = (5, 10)
# "after" is the shipped defaults; "neighbours" adds the session neighbours (off by
# default: they cost two-fact recall here, bench/results/convo.md); "topic" the topic
# query.
CONFIGS = {
    "before": {"dates": "off", "session_neighbours": 0, "topic_query": "off"},
    "after": {"dates": "on", "session_neighbours": 0, "topic_query": "off"},
    "neighbours": {"dates": "on", "session_neighbours": 1, "topic_query": "off"},
    "topic": {"dates": "on", "session_neighbours": 0, "topic_query": "on"},
}
BUILD_VERSION = "1"  # bump when records() changes: the cached database is rebuilt


def namespace(chat: str) -> str:
    return f"/actor/eval/project/{chat.lower().replace('_', '-')}/"


def _rows(name: str) -> list[dict[str, Any]]:
    path = _convo_set.OUT / name
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def records(turns: list[dict[str, Any]]) -> dict[str, MemoryRecord]:
    return {
        t["id"]: MemoryRecord(
            namespace=namespace(t["chat"]),
            title=f"{t['speaker']}: {t['text']}"[:200],
            summary=t["text"][:4000],
            created_at=datetime.fromisoformat(t["time"]),
        )
        for t in turns
    }


def _home(model: Path | None) -> tuple[Path, dict[str, str]]:
    """The cached database, built on first use, and turn id -> record id."""
    digest = hashlib.sha256((_convo_set.OUT / "turns.jsonl").read_bytes())
    digest.update(BUILD_VERSION.encode())
    home = _convo_set.OUT.parent / f"db-{digest.hexdigest()[:16]}"
    ids = home / "ids.json"
    if not ids.is_file():
        shutil.rmtree(home, ignore_errors=True)
        settings = _settings(home, model)
        home.mkdir(parents=True)
        migrate(settings)
        runtime = Runtime.build(settings)
        try:
            made = records(_rows("turns.jsonl"))
            for record in made.values():
                runtime.storage.put_memory_record(record)
            runtime.embedder.warm()
            tasks.embed_records(runtime, [r.record_id for r in made.values()])
        finally:
            runtime.close()
        ids.write_text(json.dumps({k: r.record_id for k, r in made.items()}))
    return home, json.loads(ids.read_text())


def _settings(home: Path, model: Path | None) -> Settings:
    return Settings(
        home=home,
        model_path=model or Settings.from_env().onnx_model_path,
        retrieval_budget_ms=10_000,
    )


def _recall(gold: set[str], ids: list[str], k: int) -> float:
    return len(gold & set(ids[:k])) / len(gold)


def evaluate(runtime: Runtime, questions: list[dict[str, Any]], ids: dict[str, str]) -> dict:
    by: dict[str, dict[int, list[float]]] = defaultdict(lambda: defaultdict(list))
    latencies = []
    for chat in sorted({q["chat"] for q in questions}):
        warm(runtime.retriever, namespace(chat), True)
    for q in questions:
        gold = {ids[e] for e in q["evidence"]}
        start = time.perf_counter()
        result = runtime.retriever.search(
            namespace(q["chat"]), q["query"], max(KS), now=datetime.fromisoformat(q["now"])
        )
        latencies.append((time.perf_counter() - start) * 1000)
        found = [h.record.record_id for h in result.items]
        facts = "single-fact" if len(gold) == 1 else "two-fact"
        for group in (q["kind"], facts, "all"):
            for k in KS:
                by[group][k].append(_recall(gold, found, k))
    latencies.sort()
    return {
        "recall": {
            g: {f"R@{k}": mean(v) for k, v in ks.items()} | {"n": len(ks[KS[0]])}
            for g, ks in by.items()
        },
        "search_ms_p50": round(nearest_rank(latencies, 0.5), 2),
        "search_ms_p95": round(nearest_rank(latencies, 0.95), 2),
    }


def run() -> dict[str, Any]:
    if not (_convo_set.OUT / "questions.jsonl").is_file():
        return {"skipped": f"no set at {_convo_set.OUT}: run python -m bench._convo_set"}
    model = None
    home, ids = _home(model)
    questions = _rows("questions.jsonl")
    only = os.environ.get("WAKEMARK_CONVO_CONFIGS")
    configs = {n: c for n, c in CONFIGS.items() if not only or n in only.split(",")}
    result: dict[str, Any] = {
        "load_average": [round(x, 2) for x in os.getloadavg()],
        "turns": len(ids),
        "questions": len(questions),
        "configs": {},
    }
    for name, changes in configs.items():
        runtime = Runtime.build(_settings(home, model).replace(**changes))
        try:
            runtime.embedder.warm()
            result["configs"][name] = {"settings": changes, **evaluate(runtime, questions, ids)}
        finally:
            runtime.close()
    result["load_average_after"] = [round(x, 2) for x in os.getloadavg()]
    return result


GROUPS = (
    "relative-date",
    "temporal",
    "multi-hop",
    "commonsense",
    "single-fact",
    "two-fact",
    "all",
)


def markdown(result: dict[str, Any]) -> str:
    if "skipped" in result:
        return f"# Conversations\n\nSkipped: {result['skipped']}\n"
    configs = result["configs"]
    head = " | ".join(f"{c} R@5 | {c} R@10" for c in configs)
    lines = [
        "# Search on multi-session conversations (REALTALK)",
        "",
        f"{result['turns']} turns of 10 conversations, {result['questions']} questions "
        f"(`bench/_convo_set.py`), SQLite, `Retriever.search` with limit 10. Load average "
        f"{result['load_average']} → {result['load_average_after']}. Configurations, same "
        "run: " + "; ".join(f"`{n}` {c['settings']}" for n, c in configs.items()) + ".",
        "",
        "Recall is the share of a question's evidence turns in the first k hits. "
        "`relative-date` questions are the set's temporal ones whose evidence lies in one "
        "day, reworded with a relative date and asked when it names that day; single-fact: "
        "one evidence turn, two-fact: two or more. Search times are the same run's, on a "
        "machine as loaded as stated.",
        "",
        f"| kind | n | {head} |",
        "|---|---|" + "---|" * (2 * len(configs)),
    ]
    for group in GROUPS:
        first = next(iter(configs.values()))["recall"].get(group)
        if first is None:
            continue
        cells = " | ".join(
            f"{c['recall'][group]['R@5']:.3f} | {c['recall'][group]['R@10']:.3f}"
            for c in configs.values()
        )
        lines.append(f"| {group} | {first['n']} | {cells} |")
    lines += [
        "",
        "| configuration | search p50 ms | p95 ms |",
        "|---|---|---|",
        *(f"| {n} | {c['search_ms_p50']} | {c['search_ms_p95']} |" for n, c in configs.items()),
        "",
    ]
    return "\n".join(lines)

"""Consolidation (one current record per subject): the subject rule's precision and recall
on labelled subjects, and extraction throughput with consolidation on vs off, same run.

Labels. codemem-dev's queries link a changelog entry to the commits that did the change
(their ``gold``: commits citing the same issue or pull request). An entry with several
gold commits is one subject done in several turns: those commits are the labelled
subjects, and two commits of different entries are labelled different subjects.

Replay. Each project's commits are replayed in time order as turns through the job path
(``extract_turns``, ONNX embedder, SQLite), once with consolidation off and once on; the
ratio of their turns/s is the throughput figure (target ≥ 0.8). The records of the run
with it off, with their vectors, are then fed in time order to ``subject.match`` (what
extraction calls in its transaction) with a few thresholds, to score them:

- precision: of the merges between two labelled commits, the share within one subject;
- recall: 1 - (duplicate current records of the labelled subjects at the end) / (their
  commits - subjects); duplicates are the target-0 figure;
- merged share: the share of all commits (labelled or not) merged into another one. Most
  commits are distinct changes, so this bounds from above how many distinct subjects the
  rule folds together on real history.

Run: ``python -m bench consolidation`` (about ten minutes on two cores).
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np

from bench import _codemem
from wakemark.shared.config import Settings, prepare_home
from wakemark.shared.extraction import subject
from wakemark.shared.jobs import tasks
from wakemark.shared.models import MemoryRecord
from wakemark.shared.runtime import Runtime
from wakemark.shared.storage import migrate

TARGET_RATIO = 0.8
# SAME_SUBJECT: the shipped value first, then the ones it was chosen among.
GRID = [subject.SAME_SUBJECT, 0.80, 0.86, 0.95]


def _groups(project: str) -> dict[str, int]:
    """Commit → labelled subject, for the entries with several gold commits."""
    path = _codemem.directory(project) / "queries.jsonl"
    out: dict[str, int] = {}
    for n, line in enumerate(path.read_text().splitlines()):
        gold = json.loads(line)["gold"]
        if len(gold) > 1:
            for sha in gold:
                out.setdefault(sha, n)
    return out


def _replay(project: str, home: Path, consolidate: str, model: Path) -> tuple[float, Runtime]:
    settings = Settings(home=home, model_path=model, consolidate=consolidate)
    prepare_home(settings)
    migrate(settings)
    runtime = Runtime.build(settings)
    runtime.embedder.warm()
    rows = _codemem._rows(_codemem.directory(project) / "memories.jsonl")
    rows.sort(key=lambda r: r["date"])
    turns = []
    for start in range(0, len(rows), _codemem.BATCH):
        events = [e for r in rows[start : start + _codemem.BATCH]
                  for e in _codemem.turn_events(project, r)]  # fmt: skip
        results = runtime.storage.put_events(events)
        turns.append(list(dict.fromkeys(t for r in results for t in r.closed_turns)))
    began = time.perf_counter()
    for batch in turns:
        tasks.extract_turns(runtime, batch)
    elapsed = time.perf_counter() - began
    return sum(map(len, turns)) / elapsed, runtime


@contextmanager
def _threshold(same: float) -> Iterator[None]:
    saved, subject.SAME_SUBJECT = subject.SAME_SUBJECT, same
    try:
        yield
    finally:
        subject.SAME_SUBJECT = saved


def _commit(record: MemoryRecord, by_event: dict[str, str]) -> str:
    return next(by_event[e] for e in record.source_event_ids if e in by_event)


def _score(records: list[MemoryRecord], vectors: np.ndarray, commit: list[str],
           groups: dict[str, int]) -> dict[str, Any]:  # fmt: skip
    """Feed the records in time order to ``subject.match``; score its merges."""
    units = vectors / np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12)
    lineage = list(range(len(records)))  # each record's subject, as the rule builds them
    current: list[int] = []
    tp = fp = merged = 0
    for i, record in enumerate(records):
        near: list[tuple[MemoryRecord, float]] = []
        if current:
            cosines = units[current] @ units[i]
            top = np.argsort(-cosines)[: subject.NEIGHBOURS]
            near = [(records[current[int(k)]], float(cosines[int(k)])) for k in top]
        found = subject.match(record, near)
        if found is None:
            current.append(i)
            continue
        j = next(k for k in current if records[k].record_id == found.old.record_id)
        merged += 1
        lineage[i] = lineage[j]
        if not found.repeat:
            current[current.index(j)] = i
        a, b = groups.get(commit[i]), groups.get(commit[j])
        if a is not None and b is not None:
            tp, fp = tp + (a == b), fp + (a != b)
    members: dict[int, set[int]] = {}
    for i, c in enumerate(commit):
        if c in groups:
            members.setdefault(groups[c], set()).add(lineage[i])
    sizes: dict[int, int] = {}
    for c in commit:
        if c in groups:
            sizes[groups[c]] = sizes.get(groups[c], 0) + 1
    duplicates = sum(len(lines) - 1 for lines in members.values())
    possible = sum(n - 1 for n in sizes.values())
    return {
        "merges_labelled": tp + fp,
        "precision": round(tp / (tp + fp), 3) if tp + fp else None,
        "recall": round(1 - duplicates / possible, 3) if possible else None,
        "duplicate_current_per_subject": duplicates,
        "labelled_subjects": len(sizes),
        "labelled_commits": sum(sizes.values()),
        "merged_share": round(merged / len(records), 4),
    }


def _project(project: str, model: Path, scratch: Path, on_first: bool) -> dict[str, Any]:
    runs: dict[str, float] = {}
    off_runtime: Runtime | None = None
    for mode in ("on", "off") if on_first else ("off", "on"):
        rate, runtime = _replay(project, scratch / f"{project}-{mode}", mode, model)
        runs[mode] = rate
        if mode == "off":
            off_runtime = runtime
        else:
            on_stats = runtime.storage.stats(_codemem.namespace(project))
            runtime.close()
    assert off_runtime is not None
    storage = off_runtime.storage
    ns = _codemem.namespace(project)
    records = [r for page in storage.record_pages(ns) for r in page]
    records.sort(key=lambda r: (r.created_at, r.record_id))
    embedded = storage.list_embeddings(ns)
    row = {rid: k for k, rid in enumerate(embedded.record_ids)}
    records = [r for r in records if r.record_id in row]
    vectors = np.asarray(embedded.vectors)[[row[r.record_id] for r in records]]
    rows = _codemem._rows(_codemem.directory(project) / "memories.jsonl")
    by_event: dict[str, str] = {}
    for r in rows:
        for e in _codemem.turn_events(project, r):
            by_event[e.event_id] = r["id"]
    commit = [_commit(r, by_event) for r in records]
    groups = _groups(project)
    grid = []
    for same in GRID:
        with _threshold(same):
            grid.append({"same_subject": same, **_score(records, vectors, commit, groups)})
    off_runtime.close()
    return {
        "turns": len(rows),
        "turns_per_s": {k: round(v, 1) for k, v in runs.items()},
        "ratio_on_vs_off": round(runs["on"] / runs["off"], 3),
        "current_records_on": on_stats["memories"],
        "records_off": len(records),
        "grid": grid,
    }


def run() -> dict[str, Any]:
    reason = _codemem.missing()
    if reason:
        return {"skipped": reason}
    model = Settings.from_env().onnx_model_path
    load = os.getloadavg()
    with tempfile.TemporaryDirectory() as tmp:
        projects = {
            p: _project(p, model, Path(tmp), on_first=bool(i % 2))
            for i, p in enumerate(_codemem.PROJECTS)
        }
    return {
        "load_before": [round(x, 2) for x in load],
        "load_after": [round(x, 2) for x in os.getloadavg()],
        "cpus": os.cpu_count(),
        "target_ratio": TARGET_RATIO,
        "projects": projects,
    }


def markdown(result: dict[str, Any]) -> str:
    if "skipped" in result:
        return f"# Consolidation\n\nskipped: {result['skipped']}\n"
    lines = [
        "# Consolidation: subject rule on labelled subjects, extraction throughput on vs off",
        "",
        f"Load average before {result['load_before']}, after {result['load_after']} "
        f"({result['cpus']} CPUs).",
        "",
        "| project | turns | turns/s off | turns/s on | ratio on/off | current records on / off |",
        "|---|---|---|---|---|---|",
    ]
    for name, p in result["projects"].items():
        lines.append(
            f"| {name} | {p['turns']} | {p['turns_per_s']['off']} | {p['turns_per_s']['on']} | "
            f"{p['ratio_on_vs_off']} | {p['current_records_on']} / {p['records_off']} |"
        )
    lines += [
        "",
        f"Target: ratio ≥ {result['target_ratio']}. First grid row: the shipped thresholds.",
        "",
        "| project | same subject | labelled subjects (commits) | labelled merges | "
        "precision | recall | duplicate current | merged share (all commits) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for name, p in result["projects"].items():
        for g in p["grid"]:
            lines.append(
                f"| {name} | {g['same_subject']} | {g['labelled_subjects']} "
                f"({g['labelled_commits']}) | {g['merges_labelled']} | {g['precision']} | "
                f"{g['recall']} | {g['duplicate_current_per_subject']} | {g['merged_share']} |"
            )
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    print(markdown(run()))

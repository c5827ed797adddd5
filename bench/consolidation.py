"""Consolidation (one current record per subject): the subject rule's precision and recall
on labelled subjects, and extraction throughput with consolidation on vs off, same run.

Labels. codemem-dev's queries link a changelog entry to the commits that did the change
(their ``gold``: commits citing the same issue or pull request). An entry with several
gold commits is one subject done in several turns: those commits are the labelled
subjects, and two commits of different entries are labelled different subjects.

Replay. Each project's commits are replayed in time order as turns through the job path
(``extract_turns``, ONNX embedder, SQLite), once with consolidation off and once on; the
ratio of their turns/s is the throughput figure (target >= 0.8). The records of the run
with it off, with their vectors, are then fed in time order to ``subject.match`` (what
extraction calls in its transaction) with each rule of ``bench/_subjects.GRID``, which
scores them (precision on labelled merges, recall, duplicate current records per labelled
subject, merged share of all commits). Most commits are distinct changes, so the merged
share bounds from above how many distinct subjects a rule folds together.

Held out: the history sets of ``bench/_history_set.py`` (when built) are replayed with
consolidation off and scored the same way; no rule was chosen on them.

Run: ``python -m bench consolidation`` (about ten minutes on two cores, twenty more
with the history sets).
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from bench import _codemem, _subjects
from wakemark.shared.config import Settings, prepare_home
from wakemark.shared.jobs import tasks
from wakemark.shared.models import MemoryRecord
from wakemark.shared.runtime import Runtime
from wakemark.shared.storage import migrate

TARGET_RATIO = 0.8


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


def _commit(record: MemoryRecord, by_event: dict[str, str]) -> str:
    return next(by_event[e] for e in record.source_event_ids if e in by_event)


def _labelled(project: str, runtime: Runtime) -> dict[str, Any]:
    """The grid scored on the records of a run with consolidation off."""
    got = subject_inputs(project, runtime)
    args = got["records"], got["vectors"], got["label"]
    return {
        "turns": got["turns"],
        "records_off": len(got["records"]),
        "grid": [_subjects.score(*args, rule, got["sessions"]) for rule in _subjects.GRID],
    }


def subject_inputs(project: str, runtime: Runtime) -> dict[str, Any]:
    """What ``_subjects.fold`` takes for the records of a run with consolidation off, in
    time order (a commit is a session of one turn: no lineage), with each record's
    labelled subject (label) and the project's turns."""
    storage = runtime.storage
    ns = _codemem.namespace(project)
    records = [r for page in storage.record_pages(ns) for r in page]
    records.sort(key=lambda r: (r.created_at, r.record_id))
    embedded = storage.list_embeddings(ns)
    row = {rid: k for k, rid in enumerate(embedded.record_ids)}
    records = [r for r in records if r.record_id in row]
    vectors = np.asarray(embedded.vectors)[[row[r.record_id] for r in records]]
    rows = _codemem._rows(_codemem.directory(project) / "memories.jsonl")
    by_event = {e.event_id: r["id"] for r in rows for e in _codemem.turn_events(project, r)}
    groups = _groups(project)
    commit = [_commit(r, by_event) for r in records]
    label = [groups.get(c) for c in commit]
    sessions = {r.record_id: c for r, c in zip(records, commit, strict=True)}  # a turn each
    return {
        "turns": len(rows),
        "records": records,
        "vectors": vectors,
        "label": label,
        "sessions": sessions,
    }


def _project(project: str, model: Path, scratch: Path, on_first: bool) -> dict[str, Any]:
    """Throughput on vs off (same run), and the grid on the records of the run off."""
    runs: dict[str, float] = {}
    for mode in ("on", "off") if on_first else ("off", "on"):
        rate, runtime = _replay(project, scratch / f"{project}-{mode}", mode, model)
        runs[mode] = rate
        if mode == "off":
            scored = _labelled(project, runtime)
        else:
            on_stats = runtime.storage.stats(_codemem.namespace(project))
        runtime.close()
    return {
        "turns_per_s": {k: round(v, 1) for k, v in runs.items()},
        "ratio_on_vs_off": round(runs["on"] / runs["off"], 3),
        "current_records_on": on_stats["memories"],
        **scored,
    }


def _held_out(project: str, model: Path, scratch: Path) -> dict[str, Any]:
    """A history set of ``bench/_history_set.py``: the grid only (no rule was chosen on it)."""
    _, runtime = _replay(project, scratch / f"{project}-off", "off", model)
    try:
        return _labelled(project, runtime)
    finally:
        runtime.close()


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
        held_out = {p: _held_out(p, model, Path(tmp)) for p in _codemem.extra_projects()}
    return {
        "load_before": [round(x, 2) for x in load],
        "load_after": [round(x, 2) for x in os.getloadavg()],
        "cpus": os.cpu_count(),
        "target_ratio": TARGET_RATIO,
        "projects": projects,
        "held_out": held_out,
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
        f"Target: ratio ≥ {result['target_ratio']}. First grid row of each project: the "
        "shipped rule. codemem-dev's projects chose it; the held-out history sets "
        "(`bench/_history_set.py`) only check it.",
    ]
    sets = [*result["projects"].items(), *result.get("held_out", {}).items()]
    lines += ["", "Pooled over all sets (codemem-dev's and the held-out ones):", "",
              "| rule | labelled merges (wrong) | precision | duplicate current |",
              "|---|---|---|---|"]  # fmt: skip
    for k, g in enumerate(sets[0][1]["grid"]):
        merges = sum(p["grid"][k]["merges_labelled"] for _, p in sets)
        wrong = sum(p["grid"][k]["wrong_merges"] for _, p in sets)
        duplicates = sum(p["grid"][k]["duplicate_current_per_subject"] for _, p in sets)
        precision = round((merges - wrong) / merges, 3) if merges else None
        rule = _subjects.rule_text(g["rule"])
        lines.append(f"| {rule} | {merges} ({wrong}) | {precision} | {duplicates} |")
    lines += ["", "| project | rule | labelled subjects (records) | labelled merges (wrong) | "
              "precision | recall | duplicate current | merged share (all records) |",
              "|---|---|---|---|---|---|---|---|"]  # fmt: skip
    for name, p in sets:
        for g in p["grid"]:
            lines.append(
                f"| {name} | {_subjects.rule_text(g['rule'])} | {g['labelled_subjects']} "
                f"({g['labelled_records']}) | {g['merges_labelled']} ({g['wrong_merges']}) | "
                f"{g['precision']} | {g['recall']} | {g['duplicate_current_per_subject']} | "
                f"{g['merged_share']} |"
            )
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    print(markdown(run()))

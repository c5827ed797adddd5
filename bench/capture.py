"""Clean capture on real sessions: no record from turns without work, titles that say
what was asked, summaries that give the outcome.

The turns are real Claude Code sessions from public repositories replayed as the hooks
post them (``bench/_capture_set.py`` builds ``~/.wakemark-data/capture/turns.jsonl``);
``bench/capture_labels.json`` labels a sample of them by hand: must-skip with a reason,
or work with the title (and summary) a person would write. Each labelled turn goes
through ``extract_turn`` as it is now and as it was at ``BASE`` (that tree, exported with
``git archive``, run in a subprocess), so the figures compare before and after.

Turns are replayed session by session: an answered turn takes in the unanswered turns
before it that it continues (``extraction.joined_turns``), as the extraction job does.
The replayed events of a turn carry no real times, so every turn counts as following
the one before within the idle window.

Measures: must-skip turns that still yield a record (target 0), work turns skipped
(false skips, target 0), title agreement with the label (content-word F1 ≥ 0.5),
records whose summary opens with interim narration ("Let me…"), records without an
answer or outcome (target 0), and retries that take in the unanswered turns the label
names (``joins``; labels of ``sample: retries`` are interrupted turns, retries and
re-asks as they occur in the sessions). One current record per subject: the records of
all replayed turns go through the subject rule (``bench/_subjects.py``) with the
ONNX embedder, scored on the labelled subjects (``subject``: turns that re-ask, retry or
follow up one request). Run:
``python -m bench._capture_set && python -m bench capture``.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
from collections import Counter
from datetime import UTC, datetime
from itertools import zip_longest
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
LABELS = HERE / "capture_labels.json"
BASE = "b311085690fd081caef59be64f4cc519afa54421"  # the extractor before clean capture
AGREE_F1 = 0.5
_STOP = {
    "the", "a", "an", "to", "of", "in", "on", "for", "and", "or", "is", "are", "it", "this",
    "that", "with", "be", "we", "i", "you", "do", "did", "from", "at", "by", "as", "s",
}  # fmt: skip

# Runs in the interpreter of either tree: turns (JSON lines) in, one result a line out.
_RUNNER = """
import json, sys
from datetime import UTC, datetime
from wakemark.shared.config import Settings
from wakemark.shared.models import StoredEvent
from wakemark.shared.storage import Turn
import wakemark.shared.extraction as extraction

settings = Settings(home=sys.argv[1], embedder="off")
now = datetime.now(UTC)
before = {}  # session -> its turns so far, as the storage would list them
for line in sys.stdin:
    row = json.loads(line)
    events = [StoredEvent.model_validate({**e, "transaction_time": now}) for e in row["events"]]
    turn = Turn(row["id"], events[0].namespace, events[0].session_id, True, False, events)
    session = before.setdefault(row["id"].rsplit("#", 1)[0], [])
    joined, out = [], None
    if hasattr(extraction, "joined_turns"):
        joined = extraction.joined_turns(session, turn, settings.turn_idle_s)
        out = extraction.extract_turn(turn, settings, joined)
        records, skipped = out.records, out.skipped
    elif hasattr(extraction, "extract_turn"):
        out = extraction.extract_turn(turn, settings)
        records, skipped = out.records, out.skipped
    else:
        records = extraction.extract(turn, settings)
        skipped = None if records else "empty"
    session.append(turn)
    print(json.dumps({
        "id": row["id"],
        "skipped": skipped,
        "joined": [t.turn_id for t in joined] if records else [],
        "follows_up": getattr(out, "follows_up", False),
        "carries_on": getattr(out, "carries_on", False),
        "records": [r.model_dump(mode="json") for r in records],
    }))
"""


def _turns(labels: dict[str, Any]) -> list[dict[str, Any]]:
    from bench import _capture_set

    path = _capture_set.OUT / "turns.jsonl"
    if not path.exists():
        _capture_set.main()
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    for row in rows:
        for i, event in enumerate(row["events"]):
            event.update(
                event_id=_ulid(row["id"], i),
                actor_id="bench",
                namespace="/actor/bench/project/capture/",
                source={"surface": "claude-code"},
            )
    return rows


def _ulid(key: str, i: int) -> str:
    import hashlib

    from ulid import ULID

    digest = hashlib.sha256(f"{key}#{i}".encode()).digest()
    return str(ULID.from_bytes(digest[:16]))


def _extract(rows: list[dict[str, Any]], tree: Path) -> dict[str, dict[str, Any]]:
    with tempfile.TemporaryDirectory() as home:
        done = subprocess.run(
            [sys.executable, "-c", _RUNNER, home],
            input="".join(json.dumps(r) + "\n" for r in rows),
            capture_output=True,
            text=True,
            check=True,
            cwd=tree,
            env={"PYTHONPATH": str(tree), "PATH": "/usr/bin:/bin"},
        )
    out = [json.loads(line) for line in done.stdout.splitlines()]
    return {o["id"]: o for o in out}


def _base_tree(tmp: Path) -> Path:
    archive = subprocess.run(
        ["git", "archive", BASE, "shared", "wakemark", "services", "migrations"],
        cwd=ROOT,
        capture_output=True,
        check=True,
    ).stdout
    subprocess.run(["tar", "-x", "-C", str(tmp)], input=archive, check=True)
    return tmp


def _words(text: str) -> set[str]:
    return {w for w in re.findall(r"[a-z0-9]+", text.lower()) if w not in _STOP}


def title_f1(got: str, want: str) -> float:
    a, b = _words(got), _words(want)
    common = len(a & b)
    if not common:
        return 0.0
    precision, recall = common / len(a), common / len(b)
    return 2 * precision * recall / (precision + recall)


def _narration_first(summary: str) -> bool:
    from wakemark.shared.extraction.capture import is_narration

    head = re.split(r"(?<=[.!?:])\s|\n", summary.strip(), maxsplit=1)[0]
    return bool(summary.strip()) and is_narration(head)


def _score(labels: dict[str, Any], got: dict[str, dict[str, Any]]) -> dict[str, Any]:
    skip = [k for k, v in labels.items() if v["label"] == "skip"]
    work = [k for k, v in labels.items() if v["label"] == "work"]
    leaked = [k for k in skip if got[k]["records"]]
    false_skips = [k for k in work if not got[k]["records"]]
    titled = [k for k in work if got[k]["records"]]
    f1 = {k: title_f1(got[k]["records"][0]["title"], labels[k]["title"]) for k in titled}
    agree = [k for k in titled if f1[k] >= AGREE_F1]
    narrated = [k for k in titled if _narration_first(got[k]["records"][0]["summary"])]
    bare = [k for k in labels if any(not r["summary"].strip() for r in got[k]["records"])]
    joins = [k for k in work if "joins" in labels[k]]
    joined = [k for k in joins if _joined(got[k]) == labels[k]["joins"]]
    reasons = Counter(got[k]["skipped"] for k in skip if got[k]["skipped"])
    right_reason = sum(got[k]["skipped"] == labels[k]["reason"] for k in skip)
    return {
        "must_skip": len(skip),
        "must_skip_with_record": len(leaked),
        "must_skip_reason_matches": right_reason,
        "skip_reasons": dict(reasons),
        "work": len(work),
        "work_skipped": len(false_skips),
        "work_skipped_ids": false_skips,
        "title_agreement": len(agree),
        "title_agreement_rate": round(len(agree) / max(len(titled), 1), 3),
        "summary_opens_with_narration": len(narrated),
        "records_without_answer": len(bare),
        "records_without_answer_ids": bare,
        "joins_labelled": len(joins),
        "joins_as_labelled": len(joined),
        "leaked_ids": leaked,
    }


def subject_inputs(
    rows: list[dict[str, Any]], got: dict[str, dict[str, Any]], labels: dict[str, Any]
) -> dict[str, Any]:
    """What ``_subjects.fold`` takes for the records of all replayed turns, each
    repository a project, in replay order: records, vectors, sessions, lineage (previous)
    and carried; their labelled subjects (label) and repositories (repo); and the
    carried records that carry on only as a report or a request to commit."""
    from wakemark.shared.config import Settings
    from wakemark.shared.embedding import Embedder
    from wakemark.shared.extraction.subject import LINEAGE
    from wakemark.shared.models import MemoryRecord

    records, label, repo, sessions = [], [], [], {}
    previous: dict[str, list[list[str]]] = {}
    carried: set[str] = set()
    reported: set[str] = set()  # carried on only as a report on the last change
    committed: set[str] = set()  # carried on only as a request to commit the work
    turns: dict[str, list[list[str]]] = {}  # session -> its turns' record ids so far
    for row in rows:
        session = row["id"].rsplit("#", 1)[0]
        before = turns.setdefault(session, [])
        ids = []
        for data in got[row["id"]]["records"]:
            namespace = f"/actor/bench/project/{row['repo'].replace('/', '-')}/"
            records.append(MemoryRecord.model_validate({**data, "namespace": namespace}))
            label.append(labels.get(row["id"], {}).get("subject"))
            repo.append(row["repo"])
            sessions[records[-1].record_id] = session
            ids.append(records[-1].record_id)
            if got[row["id"]].get("follows_up"):
                lookback = before[-LINEAGE:][::-1]
                previous[ids[-1]] = [turn[::-1] for turn in lookback]
                if got[row["id"]].get("carries_on"):
                    carried.add(ids[-1])
                    if _reports_only(row):
                        reported.add(ids[-1])
                    if _commits_only(row):
                        committed.add(ids[-1])
        before.append(ids)
    embedder = Embedder(Settings.from_env().onnx_model_path)
    vectors = np.asarray(embedder.embed([r.embedding_text() for r in records]), dtype=np.float32)
    return {
        "records": records,
        "vectors": vectors,
        "label": label,
        "repo": repo,
        "sessions": sessions,
        "previous": previous,
        "carried": carried,
        "reported": reported,
        "committed": committed,
    }


def _subjects(
    rows: list[dict[str, Any]], got: dict[str, dict[str, Any]], labels: dict[str, Any]
) -> dict[str, Any]:
    """The subject rule on the records of all replayed turns (``subject_inputs``):
    duplicate current records of the labelled subjects (re-asks and retries as they occur
    in the sessions), for each rule of the grid."""
    from bench import _subjects
    from wakemark.shared.extraction import subject

    got_in = subject_inputs(rows, got, labels)
    records, vectors, label = got_in["records"], got_in["vectors"], got_in["label"]
    sessions, previous, carried = got_in["sessions"], got_in["previous"], got_in["carried"]
    reported, committed = got_in["reported"], got_in["committed"]
    return {
        "records": len(records),
        "grid": [
            _subjects.score(records, vectors, label, rule, sessions, previous, carried)
            for rule in _subjects.GRID
        ],
        # The shipped rule with reports on the last change not carrying on.
        "without_reports": _subjects.score(
            records, vectors, label, subject.RULE, sessions, previous, carried - reported
        ),
        # The shipped rule with a turn of repeats standing for nothing in its session.
        "without_links": _subjects.score(
            records, vectors, label, subject.RULE, sessions, previous, carried, links=False
        ),
        # The shipped rule with requests to commit the work not carrying on.
        "without_commits": _subjects.score(
            records, vectors, label, subject.RULE, sessions, previous, carried - committed
        ),
    }


def _prompt(row: dict[str, Any]) -> str:
    return next(
        (str(e["body"].get("content", "")) for e in row["events"] if e["kind"] == "prompt"), ""
    )


def _reports_only(row: dict[str, Any]) -> bool:
    """The turn carries on only as a report (``capture.reports``), not as a request that
    says little or a retry."""
    from wakemark.shared.extraction.capture import clean_prompt, is_retry, says_little

    prompt = _prompt(row)
    return not (says_little(clean_prompt(prompt)) or is_retry(prompt))


def _commits_only(row: dict[str, Any]) -> bool:
    """The turn carries on only as a request to commit the work (``capture.commits``)."""
    from wakemark.shared.extraction.capture import clean_prompt, commits, is_retry, says_little

    request = clean_prompt(_prompt(row))
    return commits(request) and not (says_little(request) or is_retry(request))


def _joined(out: dict[str, Any]) -> list[int]:
    return [int(t.rsplit("#", 1)[1]) for t in out.get("joined", [])]


_RUN = re.compile(r"ran `(.*)`(?: → exit 0)?", re.S)


def _probe_runs(got: dict[str, dict[str, Any]]) -> dict[str, int]:
    """Records keeping a probe's successful run as a fact, by the probe's kind (``idle``:
    it looked at nothing; ``look``: at files)."""
    from wakemark.shared.extraction.capture import probe

    kinds: Counter[str] = Counter()
    for record in (r for out in got.values() for r in out["records"]):
        runs = [m.group(1) for f in record["facts"] if (m := _RUN.fullmatch(f))]
        found = {probe(c) for c in runs if not c.endswith("…")} - {None}
        kinds.update(k for k in found if k is not None)
    return {"idle": kinds["idle"], "look": kinds["look"]}


def run() -> dict[str, Any]:
    load = [round(x, 2) for x in os.getloadavg()]
    labels = json.loads(LABELS.read_text())
    rows = _turns(labels)
    labelled = [r for r in rows if r["id"] in labels]
    missing = set(labels) - {r["id"] for r in labelled}
    if missing:
        raise SystemExit(f"{len(missing)} labelled turns not in the set: rebuild it")
    after = _extract(rows, ROOT)
    with tempfile.TemporaryDirectory() as tmp:
        before = _extract(labelled, _base_tree(Path(tmp)))
    subjects = _subjects(rows, after, labels)
    sources = Counter(r["repo"] for r in labelled if labels[r["id"]]["label"] != "subject")
    uniform = {k: v for k, v in labels.items() if v.get("sample") == "uniform"}

    def short(record: dict[str, Any]) -> dict[str, Any]:
        return {"title": record["title"], "summary": _clip(record["summary"], 300)}

    pairs = []
    for key in labels:
        b, a = before[key]["records"], after[key]["records"]
        b_title, a_title = (b[0]["title"] if b else None), (a[0]["title"] if a else None)
        if b_title != a_title or (b and a and b[0]["summary"] != a[0]["summary"]):
            pairs.append(
                {
                    "id": key,
                    "label": labels[key],
                    "before": short(b[0]) if b else None,
                    "after": short(a[0]) if a else {"skipped": after[key]["skipped"]},
                }
            )
    return {
        "name": "capture",
        "at": datetime.now(UTC).isoformat(timespec="seconds"),
        "load": {"before": load, "after": [round(x, 2) for x in os.getloadavg()]},
        "base": BASE,
        "set": {
            "turns": len(rows),
            "labelled": len(labels),
            "sources": dict(sources),
            "all_turns_skipped": dict(Counter(a["skipped"] or "record" for a in after.values())),
            "all_records_without_answer": sum(
                not r["summary"].strip() for a in after.values() for r in a["records"]
            ),
            "all_turns_joining_unanswered": sum(bool(a.get("joined")) for a in after.values()),
            "all_records_with_probe_runs": _probe_runs(after),
        },
        "before": _score(labels, before),
        "after": _score(labels, after),
        # A seeded random draw from all turns, labelled apart from the rest: the other
        # turns were drawn by the rules' own verdicts (so many of each kind are seen).
        "uniform_before": _score(uniform, before),
        "uniform_after": _score(uniform, after),
        "examples": pairs,
        "subjects": subjects,
    }


def _clip(text: str | None, n: int = 90) -> str:
    text = " ".join((text or "").split()).replace("|", "\\|")
    return text if len(text) <= n else text[: n - 1] + "…"


def _ten(pairs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    reasons: dict[str, dict[str, Any]] = {}
    for pair in pairs:
        reasons.setdefault(pair["after"].get("skipped") or "", pair)
    skips = [p for r, p in sorted(reasons.items()) if r]
    by_repo: dict[str, list[dict[str, Any]]] = {}
    for pair in pairs:
        if "skipped" not in pair["after"]:
            by_repo.setdefault(pair["id"].split(":")[0], []).append(pair)
    work = [p for row in zip_longest(*by_repo.values()) for p in row if p]  # repo by repo
    return (skips + work)[:10]


def _record_cell(record: dict[str, Any]) -> str:
    return f"**{_clip(record['title'], 60)}** / {_clip(record['summary'], 70)}"


def markdown(result: dict[str, Any]) -> str:
    b, a, s = result["before"], result["after"], result["set"]
    ub, ua = result["uniform_before"], result["uniform_after"]
    rows = [
        ("must-skip turns that gave a record (target 0)", "must_skip_with_record", s),
        ("work turns skipped (target 0)", "work_skipped", s),
        ("work titles agreeing with the label (F1 ≥ 0.5)", "title_agreement", s),
        ("summaries opening with narration", "summary_opens_with_narration", s),
        ("records without an answer or outcome (target 0)", "records_without_answer", s),
    ]
    lines = [
        "# Clean capture",
        "",
        f"{b['must_skip'] + b['work']} hand-labelled turns ({b['must_skip']} must-skip, "
        f"{b['work']} work) "
        f"of {s['turns']} replayed from real Claude Code and Gemini CLI sessions in "
        + ", ".join(f"{k} ({v})" for k, v in s["sources"].items())
        + f". Before = the extractor at `{result['base'][:7]}`.",
        "",
    ]
    if "load" in result:
        lines += [
            f"Run {result['at']}, load average before {result['load']['before']}, after "
            f"{result['load']['after']} ({os.cpu_count()} CPUs).",
            "",
        ]
    lines += [
        "| measure | before | after |",
        "|---|---|---|",
    ]
    for name, key, _ in rows:
        lines.append(f"| {name} | {b[key]} | {a[key]} |")
    lines += [
        f"| skip reason as labelled | – | {a['must_skip_reason_matches']} / {a['must_skip']} |",
        f"| retries taking in the unanswered turns as labelled | – | {a['joins_as_labelled']} / "
        f"{a['joins_labelled']} |",
        "",
        f"Of these, the {ub['must_skip'] + ub['work']} drawn uniformly at random "
        f"({ub['must_skip']} must-skip, {ub['work']} work): must-skip with a record "
        f"{ub['must_skip_with_record']} → {ua['must_skip_with_record']}, work skipped "
        f"{ub['work_skipped']} → {ua['work_skipped']}, titles agreeing "
        f"{ub['title_agreement']} → {ua['title_agreement']}, narration summaries "
        f"{ub['summary_opens_with_narration']} → {ua['summary_opens_with_narration']}.",
        "",
        "All replayed turns now: "
        + ", ".join(f"{k} {v}" for k, v in sorted(s["all_turns_skipped"].items()))
        + f"; records without an answer or outcome {s['all_records_without_answer']}; "
        f"records keeping a probe's run as a fact {s['all_records_with_probe_runs']['idle']} "
        f"(one that looked at files: {s['all_records_with_probe_runs']['look']}); "
        f"answered turns that took in the unanswered turns before them "
        f"{s['all_turns_joining_unanswered']}.",
        "",
        "## Before → after: one skip of each reason, then work records that changed",
        "",
        "| turn | before (title / summary) | after |",
        "|---|---|---|",
    ]
    for pair in _ten(result["examples"]):
        before = pair["before"]
        after = pair["after"]
        b_text = _record_cell(before) if before else "no record"
        a_text = f"skipped: {after['skipped']}" if "skipped" in after else _record_cell(after)
        lines.append(f"| `{_clip(pair['id'].split('/')[-1], 40)}` | {b_text} | {a_text} |")
    return "\n".join(lines + _subjects_table(result["subjects"])) + "\n"


def _subjects_table(subjects: dict[str, Any]) -> list[str]:
    from bench._subjects import rule_text

    shipped = subjects["grid"][0]
    lines = [
        "",
        "## One current record per subject",
        "",
        f"The {subjects['records']} records of all replayed turns, each repository a project, "
        "fed in replay order to the subject rule. Labelled subjects: re-asks, retries and "
        "follow-ups of one request as they occur in the sessions (`subject` in "
        f"`capture_labels.json`): {shipped['labelled_subjects']} subjects, "
        f"{shipped['labelled_records']} records. Duplicate current records per subject "
        f"(target 0): **{shipped['duplicate_current_per_subject']}** with the shipped rule "
        "(first row).",
        "",
        "| rule | labelled merges (wrong) | precision | recall | duplicate current | "
        "merged share (all records) |",
        "|---|---|---|---|---|---|",
    ]
    rows = [(rule_text(g["rule"]), g) for g in subjects["grid"]]
    if "without_links" in subjects:
        rows.insert(1, ("the shipped rule, a turn of repeats standing for nothing",
                        subjects["without_links"]))  # fmt: skip
    if "without_commits" in subjects:
        rows.insert(1, ("the shipped rule, requests to commit the work not carrying on",
                        subjects["without_commits"]))  # fmt: skip
    if "without_reports" in subjects:
        rows.insert(1, ("the shipped rule, reports on the last change not carrying on",
                        subjects["without_reports"]))  # fmt: skip
    for text, g in rows:
        lines.append(
            f"| {text} | {g['merges_labelled']} ({g['wrong_merges']}) | "
            f"{g['precision']} | {g['recall']} | {g['duplicate_current_per_subject']} | "
            f"{g['merged_share']} |"
        )
    return lines


if __name__ == "__main__":
    print(markdown(run()))

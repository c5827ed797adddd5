"""A learned subject model against the subject rule: a logistic model over the evidence
of each (new record, candidate) pair, in place of the rule or on top of it (only where
the rule finds no subject), evaluated held out.

The pairs: the records of the capture replay (``bench/capture.py``, each repository a
project, with the session's lineage) and of the commit sets (``bench/consolidation.py``:
codemem-dev's two projects and the sets of ``bench/_history_set.py``, one turn a
session) go through ``_subjects.fold`` with the shipped rule; each candidate it meets (the
nearest current records, the session's previous and other recent records) is one pair.
Labels: both records in labelled subjects, the same subject or not ("labelled"); or, in
addition, every other pair taken as two subjects ("unlabelled as apart": most commits
are distinct changes; along a session's lineage this is a lower bound, many such pairs
are one request).

Held out: each repository of the capture set and each commit set is scored with the
model fitted on all the others (``_subjects.fold`` with the model as ``match``). Reported
per model and threshold: labelled merges (wrong) and duplicate current records, pooled,
on the capture set and on the commit sets, and the merges (labelled or not) the rule does
not make. Inputs are collected once per run (about 35 minutes on two shared cores);
``WAKEMARK_SUBJECT_INPUTS=FILE`` keeps them (written when absent, read when present).
Run: ``python -m bench fit_subject``.
"""

from __future__ import annotations

import json
import os
import pickle
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from bench import _codemem, _subjects, capture, consolidation
from wakemark.shared.config import Settings
from wakemark.shared.extraction import subject
from wakemark.shared.models import MemoryRecord
from wakemark.shared.retrieval.gate import IDENTIFIER

FEATURES = (
    "cos", "previous", "previous_cos", "recent", "recent_cos", "carries_on_previous",
    "names_previous", "same_session", "other_session", "identifier_shared",
    "files_disjoint", "file_shared", "numbers_apart", "numbers_apart_lineage",
    "title_jaccard", "same_type", "nearest", "follows_up",
)  # fmt: skip
MODELS = (("labelled", (0.5, 0.9)), ("unlabelled as apart", (0.02, 0.05, 0.1, 0.2)))
L2 = 1.0


def evidence(
    new: MemoryRecord,
    old: MemoryRecord,
    cosine: float,
    role: str,
    sessions: tuple[str | None, str | None],
    carries_on: bool,
    follows_up: bool,
) -> np.ndarray:
    """The pair's features; ``role``: "near0".."near4" (rank among the nearest),
    "previous" (the session's previous record) or "recent" (another recent one)."""
    previous, recent = role == "previous", role == "recent"
    a, b = set(new.files_touched), set(old.files_touched)
    words = subject._title_words(new), subject._title_words(old)
    union = words[0] | words[1]
    known = None not in sessions
    same_session = known and sessions[0] == sessions[1]
    return np.array(
        [
            cosine,
            previous,
            cosine * previous,
            recent,
            cosine * recent,
            previous and carries_on,
            bool(set(IDENTIFIER.findall(new.title)) & subject._identifiers(old)),
            same_session,
            known and not same_session,
            bool(subject._identifiers(new) & subject._identifiers(old)),
            bool(a and b and not a & b),
            bool(a & b),
            subject._numbers_apart(new, old, subject.RULE),
            subject._numbers_apart(new, old, subject.RULE, lineage=True),
            len(words[0] & words[1]) / len(union) if all(words) else 0.0,
            new.observation_type == old.observation_type,
            role == "near0",
            follows_up,
        ],
        dtype=float,
    )


Candidates = list[tuple[MemoryRecord, float, np.ndarray]]


def _candidates(
    record: MemoryRecord,
    near: Sequence[tuple[MemoryRecord, float]],
    session_of: Callable[[MemoryRecord], str | None],
    previous: tuple[MemoryRecord, float] | None,
    carries_on: bool,
    recent: Sequence[tuple[MemoryRecord, float]],
) -> Candidates:
    roles = [(r, c, f"near{k}") for k, (r, c) in enumerate(near)]
    if previous is not None:
        roles.append((*previous, "previous"))
    roles += [(r, c, "recent") for r, c in recent]
    out = []
    for old, cosine, role in roles:
        kept = old.namespace == record.namespace and not old.pinned and old.edited_at is None
        if old.record_id != record.record_id and kept:
            sessions = session_of(record), session_of(old)
            x = evidence(record, old, cosine, role, sessions, carries_on, previous is not None)
            out.append((old, cosine, x))
    return out


Model = tuple[np.ndarray, np.ndarray, np.ndarray]


def fit(x: np.ndarray, y: np.ndarray) -> Model:
    """Logistic regression on standardised features, Newton's method, L2 (not the
    intercept)."""
    mean, scale = x.mean(0), x.std(0) + 1e-9
    z = np.hstack([(x - mean) / scale, np.ones((len(x), 1))])
    w = np.zeros(z.shape[1])
    penalty = np.full(z.shape[1], L2)
    penalty[-1] = 0.0
    for _ in range(50):
        p = 1 / (1 + np.exp(-z @ w))
        hessian = z.T @ (z * (p * (1 - p))[:, None]) + np.diag(penalty)
        w -= np.linalg.solve(hessian, z.T @ (p - y) + penalty * w)
    return mean, scale, w


def probability(model: Model, x: np.ndarray) -> np.ndarray:
    mean, scale, w = model
    return 1 / (1 + np.exp(-(((x - mean) / scale) @ w[:-1] + w[-1])))


def learned_match(
    models: dict[str, Model], threshold: float, on_top: bool
) -> Callable[..., subject.Match | None]:
    """``subject.match`` with the decision of the model of the record's namespace: the
    candidate of highest probability, from ``threshold`` on (``on_top``: only where the
    rule finds no subject)."""

    def match(
        record: MemoryRecord,
        near: Sequence[tuple[MemoryRecord, float]],
        rule: subject.Rule,
        session_of: Callable[[MemoryRecord], str | None],
        previous: tuple[MemoryRecord, float] | None,
        carries_on: bool,
        recent: Sequence[tuple[MemoryRecord, float]],
        versions: Sequence[tuple[MemoryRecord, float]] = (),
    ) -> subject.Match | None:
        if on_top:
            found = subject.match(
                record, near, rule, session_of, previous, carries_on, recent, versions
            )
            if found is not None:
                return found
        candidates = _candidates(record, near, session_of, previous, carries_on, recent)
        if not candidates:
            return None
        p = probability(models[record.namespace], np.stack([x for _, _, x in candidates]))
        best = int(np.argmax(p))
        if p[best] < threshold:
            return None
        old, cosine, _ = candidates[best]
        return subject.Match(old, cosine, subject.is_repeat(record, old, cosine))

    return match


def _inputs() -> dict[str, dict[str, Any]]:
    """Each set's ``_subjects.fold`` inputs and labels; ``group``: each record's held-out
    group (a capture repository, a commit set)."""
    keep = os.environ.get("WAKEMARK_SUBJECT_INPUTS")
    if keep and Path(keep).is_file():
        with open(keep, "rb") as f:
            return pickle.load(f)  # noqa: S301 - written by this function
    labels = json.loads(capture.LABELS.read_text())
    rows = capture._turns(labels)
    got = capture.subject_inputs(rows, capture._extract(rows, capture.ROOT), labels)
    sets = {"capture": {**got, "group": got["repo"]}}
    model = Settings.from_env().onnx_model_path
    with tempfile.TemporaryDirectory() as tmp:
        for project in [*_codemem.PROJECTS, *_codemem.extra_projects()]:
            _, runtime = consolidation._replay(project, Path(tmp) / project, "off", model)
            try:
                got = consolidation.subject_inputs(project, runtime)
            finally:
                runtime.close()
            label = [None if g is None else f"{project}:{g}" for g in got["label"]]
            group = [project] * len(label)
            sets[project] = {**got, "label": label, "group": group, "previous": {}}
            sets[project]["carried"] = set()
    if keep:
        with open(keep, "wb") as f:
            pickle.dump(sets, f)
    return sets


def _fold(data: dict[str, Any], match: Callable[..., subject.Match | None]) -> Any:
    args = data["records"], data["vectors"], subject.RULE, data["sessions"]
    return _subjects.fold(*args, data["previous"], data["carried"], match=match)


def _pairs(sets: dict[str, dict[str, Any]]) -> list[tuple[str, np.ndarray, float | None]]:
    """(group, features, label) of each candidate the shipped rule meets; label None: one
    of the two records is in no labelled subject."""
    out: list[tuple[str, np.ndarray, float | None]] = []
    for data in sets.values():
        _fold(data, _logging(data, out))
    return out


def _logging(
    data: dict[str, Any], out: list[tuple[str, np.ndarray, float | None]]
) -> Callable[..., subject.Match | None]:
    """``subject.match``, appending the candidates it meets to ``out``."""
    index = {r.record_id: k for k, r in enumerate(data["records"])}
    label, group = data["label"], data["group"]

    def match(record: MemoryRecord, *args: Any, **versions: Any) -> subject.Match | None:
        near, _, session_of, previous, carries_on, recent = args
        i = index[record.record_id]
        for old, _, x in _candidates(record, near, session_of, previous, carries_on, recent):
            j = index[old.record_id]
            same = None if None in (label[i], label[j]) else float(label[i] == label[j])
            out.append((group[i], x, same))
        return subject.match(record, *args, **versions)

    return match


def _score(data: dict[str, Any], lineage: list[int], merges: list[tuple[int, int]]) -> Any:
    label = data["label"]
    both = [(i, j) for i, j in merges if label[i] is not None and label[j] is not None]
    members: dict[Any, set[int]] = {}
    for i, name in enumerate(label):
        if name is not None:
            members.setdefault(name, set()).add(lineage[i])
    return {
        "merges_labelled": len(both),
        "wrong_merges": sum(label[i] != label[j] for i, j in both),
        "duplicate_current_per_subject": sum(len(v) - 1 for v in members.values()),
        "merges": len(merges),
    }


def run() -> dict[str, Any]:
    load = [round(x, 2) for x in os.getloadavg()]
    sets = _inputs()
    pairs = _pairs(sets)
    groups = np.array([g for g, _, _ in pairs])
    x = np.stack([f for _, f, _ in pairs])
    known = np.array([y is not None for _, _, y in pairs])
    y = np.array([y or 0.0 for _, _, y in pairs])
    rule = {name: _fold(data, subject.match) for name, data in sets.items()}
    rows = [{"model": "rule", **_pool(sets, rule, rule)}]
    for name, thresholds in MODELS:
        use = known if name == "labelled" else np.ones(len(pairs), dtype=bool)
        held = {g: fit(x[use & (groups != g)], y[use & (groups != g)]) for g in set(groups)}
        for on_top in (False, True):
            for t in thresholds:
                folds = {}
                for set_name, data in sets.items():
                    by_ns = {
                        r.namespace: held[g]
                        for r, g in zip(data["records"], data["group"], strict=True)
                    }
                    folds[set_name] = _fold(data, learned_match(by_ns, t, on_top))
                row = {"model": name, "on_top": on_top, "threshold": t}
                rows.append({**row, **_pool(sets, folds, rule)})
        full = fit(x[use], y[use])
        rows[-1]["weights"] = dict(
            zip([*FEATURES, "intercept"], np.round(full[2], 3).tolist(), strict=True)
        )
    return {
        "load_before": load,
        "load_after": [round(v, 2) for v in os.getloadavg()],
        "pairs": len(pairs),
        "pairs_labelled": int(known.sum()),
        "pairs_labelled_same": int(y[known].sum()),
        "rows": rows,
    }


def _pool(sets: dict[str, Any], folds: dict[str, Any], rule: dict[str, Any]) -> dict[str, Any]:
    scored = {name: _score(sets[name], *folds[name]) for name in sets}
    commits = [s for name, s in scored.items() if name != "capture"]
    added = sum(len(set(folds[n][1]) - set(rule[n][1])) for n in sets)
    return {
        "capture": scored["capture"],
        "commit_sets": {k: sum(s[k] for s in commits) for k in commits[0]},
        "merges_not_the_rules": added,
    }


def markdown(result: dict[str, Any]) -> str:
    lines = [
        "# A learned subject model, held out, against the subject rule",
        "",
        f"Load average before {result['load_before']}, after {result['load_after']} "
        f"({os.cpu_count()} CPUs). Candidate pairs {result['pairs']}, of them "
        f"{result['pairs_labelled']} between two labelled records "
        f"({result['pairs_labelled_same']} one subject).",
        "",
        "| model | capture: labelled merges (wrong), duplicates | commit sets: labelled merges "
        "(wrong), duplicates | all merges (capture + commit sets) | merges the rule does not "
        "make |",
        "|---|---|---|---|---|",
    ]
    for row in result["rows"]:
        name = row["model"]
        if name != "rule":
            name += (
                f", {'on top of the rule' if row['on_top'] else 'alone'}, p ≥ {row['threshold']}"
            )
        c, s = row["capture"], row["commit_sets"]
        lines.append(
            f"| {name} | {c['merges_labelled']} ({c['wrong_merges']}), "
            f"{c['duplicate_current_per_subject']} | {s['merges_labelled']} "
            f"({s['wrong_merges']}), {s['duplicate_current_per_subject']} | "
            f"{c['merges']} + {s['merges']} | {row['merges_not_the_rules']} |"
        )
    for row in result["rows"]:
        if "weights" in row:
            lines += ["", f"Weights fitted on all pairs ({row['model']}; standardised features):",
                      "", ", ".join(f"{k} {v}" for k, v in row["weights"].items())]  # fmt: skip
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    print(markdown(run()))

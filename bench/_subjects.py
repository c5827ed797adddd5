"""Score a subject rule on labelled subjects: records fed in time order to
``subject.match`` (what extraction calls in its transaction), as ``consolidation`` and
``capture`` replay them. Not a bench on its own (the leading underscore).

- precision: of the merges between two labelled records, the share within one subject;
- recall: 1 - (duplicate current records of the labelled subjects at the end) / (their
  records - subjects); duplicates are the target-0 figure;
- merged share: the share of all records (labelled or not) merged into another one.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from dataclasses import asdict, replace
from typing import Any

import numpy as np

from wakemark.shared.extraction import subject
from wakemark.shared.models import MemoryRecord

# Candidate rules, the shipped one first, then without the previous record's versions
# standing for it (``versions``), then without a follow-up's request naming
# what the session's previous record names (``follow_named``) or with it from other
# cosines, then without the session's other recent records or with them from other
# cosines (``recent``), then with disjoint files keeping the lineage apart
# (``follow_files_apart``), without its lineage version rule (``follow_numbers``), then
# an earlier one (every title number apart, no carrying on), then their parts and
# neighbours; then the older ones (no lineage, no file veto). Cosine alone, then a lower
# cosine with evidence besides: one session, title words (Jaccard), a code identifier
# both name, or the session's lineage (``follow``, ``carry_on``); and the file veto
# (``files_apart``) from other cosines.
_OFF = 1.01
_PREVIOUS = subject.Rule(
    numbers="all",
    carry_on=False,
    follow_numbers="same",
    follow_files_apart=0.95,
    recent=_OFF,
    follow_named=_OFF,
    versions=False,
)
_BEFORE = replace(_PREVIOUS, follow=_OFF, files_apart=0.0)
GRID = [
    subject.RULE,
    subject.Rule(versions=False),
    subject.Rule(follow_named=_OFF),
    subject.Rule(follow_named=0.50),
    subject.Rule(follow_named=0.60),
    subject.Rule(recent=_OFF),
    subject.Rule(recent=0.70),
    subject.Rule(recent=0.60),
    subject.Rule(follow_files_apart=0.95),
    subject.Rule(follow_files_apart=0.8),
    subject.Rule(follow_numbers="same"),
    _PREVIOUS,
    subject.Rule(numbers="all"),
    subject.Rule(carry_on=False),
    subject.Rule(follow=0.60),
    subject.Rule(follow=0.70),
    subject.Rule(files_apart=0.0),
    subject.Rule(files_apart=0.97),
    subject.Rule(same=0.86),
    _BEFORE,
    replace(_BEFORE, same=0.90, session=_OFF),
    replace(_BEFORE, same=0.86, session=_OFF),
    replace(_BEFORE, same=0.80, session=_OFF),
    replace(_BEFORE, same=0.90, session=0.75),
    replace(_BEFORE, same=0.90, session=_OFF, near=0.80, title_overlap=0.5),
    replace(_BEFORE, same=0.90, session=_OFF, near=0.85, identifiers=True),
]
GRID = list(dict.fromkeys(GRID))


def fold(
    records: Sequence[MemoryRecord],
    vectors: np.ndarray,
    rule: subject.Rule,
    sessions: dict[str, str],
    previous: dict[str, list[list[str]]] | None = None,
    carried: Collection[str] = (),
    links: bool = True,
    match: Callable[..., subject.Match | None] = subject.match,
) -> tuple[list[int], list[tuple[int, int]]]:
    """Each record's subject (the index of its first record) and the merges (new, old),
    feeding ``records`` (time order, one namespace or several) to ``subject.match``;
    ``sessions``: each record's session, by record id; ``previous``: for a record of a
    turn that follows up, the records of each of the ``subject.LINEAGE`` turns of its
    session before it, nearest turn first, newest record first (a turn whose records were all
    repeats stands for the record its newest one repeated; their current records, as
    ``HistoryTx.session_recent`` gives them: the first the session's previous record;
    those now versions of the previous record's subject, as
    ``HistoryTx.session_versions`` gives them);
    ``carried``: the records of turns that carry on (``capture.carries_on``); ``links``:
    False, a turn of repeats stands for nothing (as before the turns kept the link);
    ``match``: the decision, ``subject.match`` or a candidate with its signature
    (``bench/fit_subject.py``)."""
    units = vectors / np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12)
    lineage = list(range(len(records)))
    current: list[int] = []
    repeated: dict[int, int] = {}  # a repeat (not written) -> the record it repeated
    head: dict[int, int] = {}  # subject (its first record) -> its current record
    merges: list[tuple[int, int]] = []
    index = {r.record_id: k for k, r in enumerate(records)}
    for i, record in enumerate(records):
        near: list[tuple[MemoryRecord, float]] = []
        mine = [k for k in current if records[k].namespace == record.namespace]
        if mine:
            cosines = units[mine] @ units[i]
            top = np.argsort(-cosines)[: subject.NEIGHBOURS]
            near = [(records[mine[int(k)]], float(cosines[int(k)])) for k in top]
        written: list[int] = []
        for turn in (previous or {}).get(record.record_id, []):
            ks = [index[r] for r in turn]
            kept = [k for k in ks if k not in repeated]
            written += kept or [repeated[k] for k in ks[:1] if links]
        recent = list(dict.fromkeys(head[lineage[k]] for k in written))
        lead = None if not recent else (records[recent[0]], float(units[recent[0]] @ units[i]))
        # What those turns wrote that is now a version of the previous record's subject.
        versions = [k for k in dict.fromkeys(written) if recent and k != recent[0]
                    and head[lineage[k]] == recent[0]]  # fmt: skip
        found = match(
            record,
            near,
            rule,
            lambda r: sessions.get(r.record_id),
            lead,
            record.record_id in carried,
            [(records[k], float(units[k] @ units[i])) for k in recent[1:]],
            versions=[(records[k], float(units[k] @ units[i])) for k in versions],
        )
        if found is None:
            current.append(i)
            head[i] = i
            continue
        j = index[found.old.record_id]
        merges.append((i, j))
        lineage[i] = lineage[j]
        if found.repeat:
            repeated[i] = j
        else:
            current[current.index(j)] = i
            head[lineage[i]] = i
    return lineage, merges


def score(
    records: Sequence[MemoryRecord],
    vectors: np.ndarray,
    label: Sequence[Any | None],
    rule: subject.Rule,
    sessions: dict[str, str],
    previous: dict[str, list[list[str]]] | None = None,
    carried: Collection[str] = (),
    links: bool = True,
    match: Callable[..., subject.Match | None] = subject.match,
) -> dict[str, Any]:
    """``rule`` scored on ``label`` (each record's labelled subject, None: unlabelled)."""
    lineage, merges = fold(records, vectors, rule, sessions, previous, carried, links, match)
    tp = fp = 0
    for i, j in merges:
        if label[i] is not None and label[j] is not None:
            tp, fp = tp + (label[i] == label[j]), fp + (label[i] != label[j])
    members: dict[Any, set[int]] = {}
    sizes: dict[Any, int] = {}
    for i, name in enumerate(label):
        if name is not None:
            members.setdefault(name, set()).add(lineage[i])
            sizes[name] = sizes.get(name, 0) + 1
    duplicates = sum(len(lines) - 1 for lines in members.values())
    possible = sum(n - 1 for n in sizes.values())
    return {
        "rule": asdict(rule),
        "merges_labelled": tp + fp,
        "wrong_merges": fp,
        "precision": round(tp / (tp + fp), 3) if tp + fp else None,
        "recall": round(1 - duplicates / possible, 3) if possible else None,
        "duplicate_current_per_subject": duplicates,
        "labelled_subjects": len(sizes),
        "labelled_records": sum(sizes.values()),
        "merged_share": round(len(merges) / max(len(records), 1), 4),
    }


def rule_text(rule: dict[str, Any]) -> str:
    """A grid row's rule, as the tables print it."""
    text = f"cos ≥ {rule['same']}"
    evidence = []
    if rule["title_overlap"] <= 1:
        evidence.append(f"title Jaccard ≥ {rule['title_overlap']}")
    if rule["identifiers"]:
        evidence.append("a shared identifier")
    if rule["near"] <= 1 and evidence:
        text += f", or ≥ {rule['near']} with {' or '.join(evidence)}"
    if rule["session"] <= 1:
        text += f", or ≥ {rule['session']} in one session"
    if rule.get("follow", _OFF) <= 1:
        text += f", or ≥ {rule['follow']} with the session's previous record"
    if rule.get("follow_named", _OFF) <= 1 and rule.get("follow", _OFF) <= 1:
        text += f" (≥ {rule['follow_named']} when its title names an identifier that one names)"
    if rule.get("versions") and rule.get("follow", _OFF) <= 1:
        text += ", or with a version of its subject that the session's recent turns wrote"
    if rule.get("recent", _OFF) <= 1 and rule.get("follow", _OFF) <= 1:
        text += f", or ≥ {rule['recent']} with another recent record of the session"
    if rule.get("carry_on") and rule.get("follow", _OFF) <= 1:
        text += ", or a follow-up naming nothing of its own"
    if rule.get("follow_numbers") == "versions" and rule.get("follow", _OFF) <= 1:
        text += " (a version one title names alone no bar)"
    if rule.get("files_apart", 0) > 0:
        text += f"; disjoint files below {rule['files_apart']}"
        lineage = rule.get("follow_files_apart", rule["files_apart"])
        if rule.get("follow", _OFF) <= 1 and lineage != rule["files_apart"]:
            text += f" (along the lineage {f'below {lineage}' if lineage else 'none'})"
    return text + ("; any title numbers apart" if rule.get("numbers") == "all" else "")

"""The subject rule's scoring (``bench/_subjects.py``) on records whose cosines are set."""

from __future__ import annotations

import numpy as np

from bench import _subjects
from wakemark.shared.extraction import subject
from wakemark.shared.models import MemoryRecord

NS = "/actor/a/project/p/"


def _records(titles: list[str]) -> list[MemoryRecord]:
    return [MemoryRecord(namespace=NS, title=t, summary=f"{t}, done") for t in titles]


def test_merges_duplicates_and_precision_follow_the_rule() -> None:
    # 0 and 1 point the same way (one subject, merged); 2 is close to them but labelled
    # apart (a wrong merge once the bar is lowered); 3 is far (a duplicate left over).
    vectors = np.array([[1.0, 0.0, 0.0], [0.99, 0.1, 0.0], [0.88, 0.47, 0.0], [0.0, 0.0, 1.0]])
    records = _records(["font cache fix", "font cache fixed again", "upload retry", "font"])
    label = ["font", "font", "upload", "font"]
    shipped = _subjects.score(records, vectors, label, subject.Rule(session=1.01), {})
    assert (shipped["merges_labelled"], shipped["wrong_merges"]) == (1, 0)
    assert shipped["duplicate_current_per_subject"] == 1  # record 3 stays its own subject
    assert shipped["recall"] == 0.5 and shipped["precision"] == 1.0
    low = _subjects.score(records, vectors, label, subject.Rule(same=0.8, session=1.01), {})
    assert (low["merges_labelled"], low["wrong_merges"]) == (2, 1) and low["precision"] == 0.5


def test_one_session_lowers_the_bar_only_within_it() -> None:
    vectors = np.array([[1.0, 0.0], [0.87, 0.49]])  # cosine 0.87: below 0.90, above 0.85
    records = _records(["start session spins", "still spinning"])
    rule = subject.Rule(same=0.90, session=0.85)
    apart = {records[0].record_id: "s1", records[1].record_id: "s2"}
    together = {r.record_id: "s1" for r in records}
    assert _subjects.fold(records, vectors, rule, apart)[1] == []
    assert _subjects.fold(records, vectors, rule, together)[1] == [(1, 0)]


def test_a_learned_decision_replaces_the_rule_in_the_fold() -> None:
    from bench import fit_subject

    # Pairs whose evidence is the cosine alone: one subject from 0.8 on.
    cosines = np.linspace(0.0, 1.0, 41)
    x = np.zeros((len(cosines), len(fit_subject.FEATURES)))
    x[:, fit_subject.FEATURES.index("cos")] = cosines
    model = fit_subject.fit(x, (cosines >= 0.8).astype(float))
    vectors = np.array([[1.0, 0.0], [0.85, 0.527], [0.2, 0.98]])  # cosines 0.85, 0.2
    records = _records(["font cache fix", "font cache again", "upload retry"])
    assert _subjects.fold(records, vectors, subject.RULE, {})[1] == []  # the rule: < 0.90
    match = fit_subject.learned_match({NS: model}, 0.5, on_top=False)
    assert _subjects.fold(records, vectors, subject.RULE, {}, match=match)[1] == [(1, 0)]
    never = fit_subject.learned_match({NS: model}, 1.01, on_top=False)
    assert _subjects.fold(records, vectors, subject.RULE, {}, match=never)[1] == []


def test_the_fold_gives_a_follow_up_the_versions_of_the_previous_subject_only() -> None:
    # 0: counts; 1: "nope" carries that subject on (0 becomes its version); then a
    # follow-up near the counts and far from "nope" supersedes "nope". With a request on
    # another subject (2) in between, the counts are no version of the previous subject.
    counts, nope, other = [1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 1.0]
    near_counts = [0.8, 0.0, 0.6]  # cosine 0.8 with the counts, 0.6 with the other request
    records = _records(["4 messages?", "nope", "add dates to file names", "set the threshold"])
    sessions = {r.record_id: "s1" for r in records}

    def fold(
        vectors: list[list[float]], rule: subject.Rule = subject.RULE
    ) -> list[tuple[int, int]]:
        # One record a turn, each turn following up the one before.
        chosen = records[: len(vectors) - 1] + records[3:]
        turns = [[r.record_id] for r in chosen]
        previous = {r.record_id: turns[:i][::-1] for i, r in enumerate(chosen) if i}
        carried = {records[1].record_id}
        return _subjects.fold(chosen, np.array(vectors), rule, sessions, previous, carried)[1]

    assert fold([counts, nope, near_counts]) == [(1, 0), (2, 1)]
    assert fold([counts, nope, near_counts], subject.Rule(versions=False)) == [(1, 0)]
    assert fold([counts, nope, other, near_counts]) == [(1, 0)]

"""Which current record a new one is about: one current record per subject.

The evidence, in one project (namespace): the cosine of the two records' embeddings
(their title, summary and facts, ``MemoryRecord.embedding_text``) and the numbers they
name. Shared files are no evidence: on real history most changes to one file are
different subjects (``python -m bench consolidation`` measured it).

A new record about the subject of a current one supersedes it (the old one is kept as a
version, ``wakemark.shared.storage.ports.history``); one that says the same
again (a re-asked question with the same answer) adds nothing. The threshold is set on
codemem-dev's real commit history (``python -m bench consolidation`` reports the rule's
precision and recall on its labelled subjects, and how many commits it folds together).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from wakemark.shared.models import MemoryRecord

NEIGHBOURS = 5  # nearest current records the rule looks at
SAME_SUBJECT = 0.90  # cosine from which two records are about the same subject
REPEAT = 0.97  # cosine from which the new record says nothing the old one does not


@dataclass(frozen=True)
class Match:
    old: MemoryRecord
    cosine: float
    repeat: bool  # the new record adds nothing: it is not written


def _words(text: str) -> str:
    return " ".join(re.findall(r"\w+", text.lower()))


def _numbers(record: MemoryRecord) -> set[str]:
    return set(re.findall(r"\d+(?:\.\d+)*", f"{record.title} {record.summary}"))


def same_subject(new: MemoryRecord, old: MemoryRecord, cosine: float) -> bool:
    """The rule. A record a person pinned or corrected is never superseded: it was kept
    as it is on purpose. Records that name different numbers are different subjects."""
    if old.namespace != new.namespace or old.pinned or old.edited_at is not None:
        return False
    # Numbers tell close texts apart that an embedding does not: issue #12 and #13,
    # version 3.0.0 and 3.0.3, cache 1 and cache 2.
    if _numbers(old) != _numbers(new):
        return False
    return cosine >= SAME_SUBJECT


def is_repeat(new: MemoryRecord, old: MemoryRecord, cosine: float) -> bool:
    """The same answer again: same type, no file the old one did not touch, and the
    same words or a near-identical embedding."""
    if not set(new.files_touched) <= set(old.files_touched):
        return False
    same_text = _words(new.summary) == _words(old.summary) and _words(new.title) == _words(
        old.title
    )
    return new.observation_type == old.observation_type and (same_text or cosine >= REPEAT)


def match(new: MemoryRecord, neighbours: Sequence[tuple[MemoryRecord, float]]) -> Match | None:
    """The current record ``new`` is about (its nearest neighbour the rule accepts), or
    None: ``new`` starts a subject of its own."""
    for old, cosine in neighbours:
        if old.record_id != new.record_id and same_subject(new, old, cosine):
            return Match(old, cosine, is_repeat(new, old, cosine))
    return None

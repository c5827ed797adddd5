"""Which current record a new one is about: one current record per subject.

The evidence, in one project (namespace): the cosine of the two records' embeddings
(their title, summary and facts, ``MemoryRecord.embedding_text``), and the files they
touched. A new record about the subject of a current one supersedes it (the old one is
kept as a version, ``wakemark.shared.storage.ports.history``); one that says the same
again (a re-asked question with the same answer) adds nothing. The thresholds are set
on labelled subject pairs of real sessions (``python -m bench capture``, which reports
the rule's precision and recall).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from wakemark.shared.models import MemoryRecord

NEIGHBOURS = 5  # nearest current records the rule looks at
SAME_SUBJECT = 0.86  # cosine from which two records are about the same subject
SAME_CODE = 0.70  # the bar when both touched the same file
REPEAT = 0.97  # cosine from which the new record says nothing the old one does not


@dataclass(frozen=True)
class Match:
    old: MemoryRecord
    cosine: float
    repeat: bool  # the new record adds nothing: it is not written


def _words(text: str) -> str:
    return " ".join(re.findall(r"\w+", text.lower()))


def _numbers(record: MemoryRecord) -> set[str]:
    return set(re.findall(r"\d+", f"{record.title} {record.summary}"))


def same_subject(new: MemoryRecord, old: MemoryRecord, cosine: float) -> bool:
    """The rule. A record a person pinned or corrected is never superseded: it was kept
    as it is on purpose. Records that name different numbers are different subjects."""
    if old.namespace != new.namespace or old.pinned or old.edited_at is not None:
        return False
    # Numbers tell close texts apart that an embedding does not: issue #12 and #13,
    # version 2 and 3, cache 1 and cache 2.
    if _numbers(old) != _numbers(new):
        return False
    if cosine >= SAME_SUBJECT:
        return True
    return cosine >= SAME_CODE and bool(set(old.files_touched) & set(new.files_touched))


def is_repeat(new: MemoryRecord, old: MemoryRecord, cosine: float) -> bool:
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

"""Which current record a new one is about: one current record per subject.

The evidence, in one project (namespace): the cosine of the two records' embeddings
(their title, summary and facts, ``MemoryRecord.embedding_text``), whether they come
from one session, the session's lineage (a turn following up the one before it goes on
with its subject: ``continues``), the numbers their titles name and the files they touch
or cite (``Rule``). Shared files and code identifiers are no evidence for a merge on
their own: on real history most changes to one file are different subjects, and a lower
cosine with a shared identifier folds such changes together without finding more of the
labelled ones (``python -m bench consolidation``). Along the session's lineage they are:
a follow-up whose request names what the answer before it named ("CloudKitError" after
an answer about it) asks about that answer. Disjoint files are evidence against a merge,
but not along the session's lineage.

A new record about the subject of a current one supersedes it (the old one is kept as a
version, ``wakemark.shared.storage.ports.history``); one that says the same
again (a re-asked question with the same answer) adds nothing. The thresholds are set
on labelled subjects: codemem-dev's commit history and real agent sessions (``python -m
bench consolidation`` and ``python -m bench capture`` report each candidate rule's
precision and recall, and how many records it folds together).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from wakemark.shared.models import MemoryRecord
from wakemark.shared.retrieval.gate import IDENTIFIER, STOPWORDS

NEIGHBOURS = 5  # nearest current records the rule looks at
LINEAGE = 6  # turns back a follow-up looks for the session's previous record
REPEAT = 0.97  # cosine from which the new record says nothing the old one does not


@dataclass(frozen=True)
class Rule:
    """When two records of one project, naming the same numbers, are about the same
    subject: their cosine reaches ``same``; or they come from one session (a later turn
    going on with the same request: a retry, a follow-up) and it reaches ``session``;
    or it reaches ``near`` and they share evidence besides: at least ``title_overlap``
    of their title words (Jaccard), or a code identifier both name (``identifiers``).
    A record of a turn that follows up the previous turn of its session continues the
    subject of the session's previous record when their cosine reaches ``follow``
    (``continues``), or ``follow_named`` when the new title (the request) names a code
    identifier or file name that record names, else that of the nearest of the session's
    other recent records (those of its ``LINEAGE`` turns before it) that reaches
    ``recent``: a request going back to what the turns before the last one were about
    ("now we're back with the original issue", the threshold after a side question).
    Two records whose files are disjoint (both name some) are one subject only from
    ``files_apart`` on: a request re-asked or retried touches the files it touched.
    Along the lineage that bound is ``follow_files_apart``: the next step of one request
    often moves on to other files (the tests' mocks after the sources, a new component
    after the old one). A bound above 1 turns its evidence off (``files_apart``,
    ``follow_files_apart`` 0: no veto).
    The shipped values are the grid row of ``python -m bench consolidation`` and
    ``python -m bench capture`` with the best recall at precision >= 0.95."""

    same: float = 0.90
    near: float = 1.01
    title_overlap: float = 1.01
    identifiers: bool = False
    session: float = 0.85
    follow: float = 0.65
    follow_named: float = 0.55
    recent: float = 0.65
    files_apart: float = 0.95
    follow_files_apart: float = 0.0
    # A turn that carries on (``capture.carries_on``: its request names nothing of its
    # own) continues the session's previous record whatever their cosine.
    carry_on: bool = True
    # Along the lineage, the versions of the previous record's subject that the session's
    # recent turns wrote stand for it too (``match``'s ``versions``).
    versions: bool = True
    # The numbers of the titles that tell subjects apart: "named" (a number naming a
    # thing, ``_named``), or "all" (any two different sets of numbers).
    numbers: str = "named"
    # Along the lineage, a version one title names and the other does not keeps them
    # apart only with "same" (as ``numbers``); with "versions" it does not (a pasted
    # error's "v3.4.1", "Remove support for Swift 6.0" and "delete Package@swift-5.10").
    follow_numbers: str = "versions"


RULE = Rule()


@dataclass(frozen=True)
class Match:
    old: MemoryRecord
    cosine: float
    repeat: bool  # the new record adds nothing: it is not written


def _words(text: str) -> str:
    return " ".join(re.findall(r"\w+", text.lower()))


# Numbers that name nothing: in URLs and paths, IP addresses, host:port and file:line,
# dates and times.
_NAMELESS = re.compile(
    r"\S*(?:://|/)\S*|\b\d+(?:\.\d+){3}\b|\S*\w:\d+\S*|\b\d{1,4}[-/:]\d{1,2}[-/:]\d{1,4}\b"
)
# An issue or pull request: #12, GH-735, pr/438, PR105.
_ISSUE = re.compile(r"(?:#|\b(?:gh|pr|issue|pull)[-/ ]?#?)(\d+)\b", re.I)
_NAMED = re.compile(r"(?:\b([A-Za-z][\w-]*)\s+)?\bv?(\d+(?:\.(?:\d+|x))*(?:[a-z]+\d*)?)\b(?!\.?\d)")


def _named(title: str) -> dict[str, set[str]]:
    """The numbers of a title that name a thing, by what they name: an issue or pull
    request (``#12``, ``GH-735``, ``pr/438``), a version (``3.0.3``, ``v2.0.0rc1``: every
    version, also under the word before it, so Python 3.8 and Python 2 differ) or the
    word before the number (task 3, phase 2, cache 1). Not a count ("3 messages", "with 4
    tests": no word or a stopword before it) and nothing in a URL, a path, an address or
    a timestamp."""
    out: dict[str, set[str]] = {}
    for number in _ISSUE.findall(title):
        out.setdefault("#", set()).add(number)
    for word, number in _NAMED.findall(_NAMELESS.sub(" ", _ISSUE.sub(" ", title))):
        named = word and word.lower() not in STOPWORDS
        if "." in number:
            out.setdefault("version", set()).add(number)
        if named:
            out.setdefault(word.lower(), set()).add(number)
    return out


def _numbers_apart(new: MemoryRecord, old: MemoryRecord, rule: Rule, lineage: bool = False) -> bool:
    """The titles name different numbers: issue #12 and #13 (or #12 and none), version
    3.0.0 and 3.0.3, task 3 and task 4 ("named": the numbers of ``_named``; "all": any
    two different sets of numbers). Along the session's lineage (``lineage``), with
    ``follow_numbers`` "versions", a version only one of the titles names does not: a
    turn going on with a request often names the version the turn before it left out
    (of the build a pasted error came from, of the toolchain a change drops). A section,
    task or phase only one names still does ("yes" answered by "Design Section 6")."""
    if lineage and rule.follow_numbers == "versions":
        a, b = _named(new.title), _named(old.title)
        one_sided = (a.keys() | b.keys()) - (a.keys() & b.keys())
        versions = all("." in n for kind in one_sided for n in a.get(kind, b.get(kind, ())))
        return any(a[kind] != b[kind] for kind in a.keys() & b.keys()) or not versions
    if rule.numbers == "all":
        found = [set(re.findall(r"\d+(?:\.\d+)*", r.title)) for r in (new, old)]
        return found[0] != found[1]
    return _named(new.title) != _named(old.title)


def _title_words(record: MemoryRecord) -> set[str]:
    return {w for w in re.findall(r"[a-z0-9_]+", record.title.lower()) if w not in STOPWORDS}


def _identifiers(record: MemoryRecord) -> set[str]:
    return set(IDENTIFIER.findall(" ".join([record.title, record.summary, *record.facts])))


def _names_previous(new: MemoryRecord, previous: MemoryRecord) -> bool:
    """The new title, mostly the request, names an identifier the previous record names."""
    return bool(set(IDENTIFIER.findall(new.title)) & _identifiers(previous))


def _evidence(new: MemoryRecord, old: MemoryRecord, rule: Rule) -> bool:
    a, b = _title_words(new), _title_words(old)
    if a and b and len(a & b) / len(a | b) >= rule.title_overlap:
        return True
    return rule.identifiers and bool(_identifiers(new) & _identifiers(old))


def _files_apart(
    new: MemoryRecord, old: MemoryRecord, cosine: float, rule: Rule, lineage: bool = False
) -> bool:
    a, b = set(new.files_touched), set(old.files_touched)
    bound = rule.follow_files_apart if lineage else rule.files_apart
    return bool(a and b and not a & b) and cosine < bound


def _mergeable(
    new: MemoryRecord, old: MemoryRecord, cosine: float, rule: Rule, lineage: bool = False
) -> bool:
    """Nothing keeps the two apart: one project, the old one neither pinned nor corrected
    by a person (kept as it is on purpose), the same numbers named (``lineage``: the
    session's lineage, ``_numbers_apart``), and files that are not disjoint below
    ``files_apart`` (along the lineage ``follow_files_apart``)."""
    if old.namespace != new.namespace or old.pinned or old.edited_at is not None:
        return False
    # Numbers tell close texts apart that an embedding does not: issue #12 and #13,
    # version 3.0.0 and 3.0.3, cache 1 and cache 2.
    apart = _numbers_apart(new, old, rule, lineage)
    return not (apart or _files_apart(new, old, cosine, rule, lineage))


def same_subject(
    new: MemoryRecord,
    old: MemoryRecord,
    cosine: float,
    rule: Rule = RULE,
    same_session: bool = False,
) -> bool:
    """The rule, for a current record near the new one (``_mergeable`` first)."""
    if not _mergeable(new, old, cosine, rule):
        return False
    if cosine >= rule.same or (same_session and cosine >= rule.session):
        return True
    return cosine >= rule.near and _evidence(new, old, rule)


def continues(
    new: MemoryRecord,
    previous: MemoryRecord,
    cosine: float,
    rule: Rule = RULE,
    carries_on: bool = False,
) -> bool:
    """The lineage rule: ``new``, of a turn that follows up the one before it in its
    session (``capture.follows_up``), goes on with the subject of ``previous`` (the
    session's previous current record, ``HistoryTx.session_recent``): a retry, the
    next step of one request, the answer to "still fails", a question about a name the
    answer gave (``follow_named``). ``carries_on``: the turn's request names nothing of
    its own ("yes", "nope", "same error", a resumed session), so the subject can only be
    the conversation's, whatever the cosine."""
    if carries_on and rule.carry_on:
        # Nor do other files say otherwise ("yes" to "shall I update the tests too?").
        return _mergeable(new, previous, 1.0, rule, lineage=True)
    named = cosine >= rule.follow_named and _names_previous(new, previous)
    return (cosine >= rule.follow or named) and _mergeable(
        new, previous, cosine, rule, lineage=True
    )


def is_repeat(new: MemoryRecord, old: MemoryRecord, cosine: float) -> bool:
    """The same answer again: same type, no file the old one did not touch, and the
    same words or a near-identical embedding."""
    if not set(new.files_touched) <= set(old.files_touched):
        return False
    same_text = _words(new.summary) == _words(old.summary) and _words(new.title) == _words(
        old.title
    )
    return new.observation_type == old.observation_type and (same_text or cosine >= REPEAT)


def match(
    new: MemoryRecord,
    neighbours: Sequence[tuple[MemoryRecord, float]],
    rule: Rule = RULE,
    session_of: Callable[[MemoryRecord], str | None] = lambda record: None,
    previous: tuple[MemoryRecord, float] | None = None,
    carries_on: bool = False,
    recent: Sequence[tuple[MemoryRecord, float]] = (),
    versions: Sequence[tuple[MemoryRecord, float]] = (),
) -> Match | None:
    """The current record ``new`` is about (its nearest neighbour the rule accepts, else
    the session's previous record it ``continues``, or one of that record's ``versions``
    it continues, else the nearest of the session's other recent records reaching
    ``recent``), or None: ``new`` starts a subject of its own. ``session_of``: a record's
    session, when known; ``previous``: the session's previous current record and its
    cosine, for a turn that follows up; ``carries_on``: that turn's request names nothing
    of its own; ``recent``: the session's other current records of its ``LINEAGE`` turns
    before the turn, with their cosines; ``versions``: the records those turns wrote that
    are now versions of ``previous`` (``HistoryTx.session_versions``), with their
    cosines. A subject's current record may be a reply that says little ("nope" carried
    it on) while what the session asked and found stays in its versions; a match with
    one of them supersedes ``previous``, the subject's current record. Versions of the
    session's other subjects are not looked at: going back to those takes the words of
    their current records (``recent``)."""
    session = session_of(new) if rule.session <= 1 else None
    for old, cosine in neighbours:
        # Looked up only when it could decide: a session may cost a read.
        same_session = cosine >= rule.session and session is not None
        same_session = same_session and session_of(old) == session
        if old.record_id != new.record_id and same_subject(new, old, cosine, rule, same_session):
            return Match(old, cosine, is_repeat(new, old, cosine))
    if previous is not None and rule.follow <= 1:
        old, cosine = previous
        if old.record_id != new.record_id and continues(new, old, cosine, rule, carries_on):
            return Match(old, cosine, is_repeat(new, old, cosine))
        if rule.versions and _mergeable(new, old, cosine, rule, lineage=True):
            for version, near in sorted(versions, key=lambda pair: -pair[1]):
                if continues(new, version, near, rule):
                    return Match(old, cosine, is_repeat(new, old, cosine))
        # Carrying on is about the last turn only: an earlier record needs the words.
        for old, cosine in sorted(recent, key=lambda pair: -pair[1]):
            if cosine < rule.recent:
                break
            if old.record_id != new.record_id and _mergeable(new, old, cosine, rule, True):
                return Match(old, cosine, is_repeat(new, old, cosine))
    return None

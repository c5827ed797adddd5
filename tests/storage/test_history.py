"""Record history, the storage contract: each test runs on each backend (``storage``)."""

from __future__ import annotations

import numpy as np
import pytest

from tests.storage.conftest import NS, T0, event, record, vec
from tests.storage.test_anchors import anchors
from wakemark.shared.models import MemoryRecord, new_record_id
from wakemark.shared.retrieval.lexical import search_lexical
from wakemark.shared.storage import NotFoundError, Storage, Version


def _supersede(storage: Storage, old: MemoryRecord, new: MemoryRecord) -> bool:
    with storage.transaction() as tx:
        tx.lock_subjects(new.namespace)
        tx.put_memory_record(new)
        tx.put_embedding(new.record_id, vec(2))
        return tx.supersede(old.record_id, new.record_id, T0)


def _chain(storage: Storage, record_id: str) -> list[str]:
    return [v.record.record_id for v in storage.get_history(record_id)]


def test_a_superseded_record_leaves_the_records_and_joins_the_chain(storage: Storage) -> None:
    old = record("invoice PDF crash: fix font path", summary="fonts were missing")
    storage.put_memory_record(old)
    storage.put_embedding(old.record_id, vec(1))
    with storage.transaction() as tx:
        tx.put_anchors(anchors(old.record_id))
    new = record("invoice PDF crash: embed the font", summary="embedding the font", minutes=5)
    assert _supersede(storage, old, new)
    assert storage.get_memory_record(old.record_id) is None
    listed = [r.record_id for r in storage.list_memory_records(NS).items]
    assert listed == [new.record_id]
    assert [h.record.title for h in search_lexical(storage, NS, "invoice font", 5)] == [new.title]
    (version,) = storage.get_history(new.record_id)
    assert version.record == old
    assert (version.current_id, version.superseded_by) == (new.record_id, new.record_id)
    assert version.anchors == anchors(old.record_id)
    assert storage.get_version(old.record_id) == version
    assert storage.get_version(new.record_id) is None
    assert storage.get_anchors([old.record_id]) == {}


def test_a_chain_follows_its_newest_record_and_goes_with_it(storage: Storage) -> None:
    a, b, c = (record(t, minutes=i) for i, t in enumerate(["v1", "v2", "v3"]))
    storage.put_memory_record(a)
    assert _supersede(storage, a, b)
    assert _supersede(storage, b, c)
    assert _chain(storage, c.record_id) == [b.record_id, a.record_id]
    assert storage.get_version(a.record_id).superseded_by == b.record_id  # type: ignore[union-attr]
    assert not _supersede(storage, a, record("again"))  # no longer current
    assert storage.delete_memory_records([c.record_id]) == [c.record_id]
    assert storage.get_version(a.record_id) is None and storage.get_version(b.record_id) is None


def test_split_restores_a_version_with_what_it_had_replaced(storage: Storage) -> None:
    a, b, c = (record(t, minutes=i) for i, t in enumerate(["v1", "v2", "v3"]))
    storage.put_memory_record(a)
    with storage.transaction() as tx:
        tx.put_anchors(anchors(a.record_id))
    _supersede(storage, a, b)
    _supersede(storage, b, c)
    restored = storage.split_version(b.record_id)
    assert restored == b
    assert storage.get_memory_record(b.record_id) == b
    assert not storage.has_embedding(b.record_id)  # the embed job redoes it
    assert _chain(storage, b.record_id) == [a.record_id]
    assert _chain(storage, c.record_id) == []
    assert storage.split_version(a.record_id) == a
    assert storage.get_anchors([a.record_id]) == {a.record_id: anchors(a.record_id)}
    with pytest.raises(NotFoundError):
        storage.split_version(a.record_id)
    with pytest.raises(NotFoundError):
        storage.split_version(new_record_id())


def test_subject_neighbours_are_exact_current_and_of_one_namespace(storage: Storage) -> None:
    near, far, other = record("near"), record("far"), record("other", ns="/actor/a/project/b/")
    for rec, seed in ((near, 1), (far, 3), (other, 1)):
        storage.put_memory_record(rec)
        storage.put_embedding(rec.record_id, vec(seed))
    storage.put_memory_record(record("no vector yet"))
    with storage.transaction() as tx:
        tx.lock_subjects(NS)
        found, flipped = tx.subject_neighbours(NS, np.stack([vec(1), -vec(3)]), 5)
        assert tx.subject_neighbours("/actor/a/project/c/", vec(1)[None, :], 5) == [[]]
    assert [r.record_id for r, _ in found] == [near.record_id, far.record_id]
    assert found[0][1] == pytest.approx(1.0, abs=1e-5)
    assert found[1][1] < 0.5
    assert [r.record_id for r, _ in flipped] == [near.record_id, far.record_id]
    assert flipped[1][1] == pytest.approx(-1.0, abs=1e-5)


def test_put_version_needs_its_current_record_and_pages(storage: Storage) -> None:
    head = record("head")
    storage.put_memory_record(head)
    versions = [Version(record(f"v{i}"), head.record_id, head.record_id, T0) for i in range(3)]
    with pytest.raises(NotFoundError), storage.transaction() as tx:
        tx.put_version(Version(record("x"), new_record_id(), new_record_id(), T0))
    with storage.transaction() as tx:
        for v in versions:
            tx.put_version(v)
    ids = sorted(v.record.record_id for v in versions)
    page = storage.list_versions(NS, limit=2)
    assert [v.record.record_id for v in page] == ids[:2]
    rest = storage.list_versions(NS, limit=2, after=page[-1].record.record_id)
    assert [v.record.record_id for v in rest] == ids[2:]
    assert storage.list_versions("/actor/a/project/b/") == []


def _turn(storage: Storage, session: str, ns: str = NS) -> str:
    storage.put_event(event("prompt", "fix the invoice crash", session, ns))
    turn_id = storage.put_event(event("session_summary", "fixed", session, ns)).turn_id
    assert turn_id is not None
    return turn_id


def _extracted(storage: Storage, turn_id: str, *records: MemoryRecord) -> None:
    with storage.transaction() as tx:
        for r in records:
            tx.put_memory_record(r)
            tx.put_embedding(r.record_id, vec(len(r.title)))
        assert tx.mark_turn_extracted(turn_id, [r.record_id for r in records], None)


def _recent(storage: Storage, turn_id: str, lookback: int = 6) -> list[tuple[str, float]]:
    with storage.transaction() as tx:
        found = tx.session_recent(turn_id, vec(1), lookback)
    return [(r.record_id, cosine) for r, cosine in found]


def _previous(storage: Storage, turn_id: str, lookback: int = 6) -> tuple[str, float] | None:
    found = _recent(storage, turn_id, lookback)
    return found[0] if found else None


def test_the_session_previous_record_is_the_newest_of_the_nearest_turn_that_wrote_one(
    storage: Storage,
) -> None:
    first, second = record("first try"), record("second try, a longer title")
    older = _turn(storage, "s1")
    _extracted(storage, older, first, second)
    between = [_turn(storage, "s1") for _ in range(2)]  # skipped turns: no record
    with storage.transaction() as tx:
        for turn_id in between:
            assert tx.mark_turn_extracted(turn_id, [], "meta")
    other = _turn(storage, "s2")  # another session's record is never the previous one
    _extracted(storage, other, record("other session"))
    now = _turn(storage, "s1")
    found = _previous(storage, now)
    assert found is not None and found[0] == second.record_id
    a, b = vec(len(second.title)), vec(1)
    assert found[1] == pytest.approx(float(a @ b / np.linalg.norm(a) / np.linalg.norm(b)), abs=1e-4)
    assert _previous(storage, now, lookback=2) is None  # only the skipped turns are that near
    assert _previous(storage, older) is None  # the session's first turn
    assert _previous(storage, "no-such-turn") is None


def test_the_session_recent_records_are_current_once_each_nearest_turn_first(
    storage: Storage,
) -> None:
    fix, tests = record("fix the invoice crash"), record("the invoice tests, a longer title")
    first = _turn(storage, "s1")
    _extracted(storage, first, fix)
    second = _turn(storage, "s1")
    _extracted(storage, second, tests)
    retried = record("fix the invoice crash again: embed the font", minutes=1)
    assert _supersede(storage, fix, retried)  # the first turn's subject is current elsewhere
    no_vector = record("no embedding yet")
    third = _turn(storage, "s1")
    with storage.transaction() as tx:
        tx.put_memory_record(no_vector)
        assert tx.mark_turn_extracted(third, [no_vector.record_id], None)
    found = _recent(storage, _turn(storage, "s1"))
    assert [rid for rid, _ in found] == [tests.record_id, retried.record_id]
    a, b = vec(2), vec(1)  # the vector _supersede gave the retry
    cosine = float(a @ b / np.linalg.norm(a) / np.linalg.norm(b))
    assert found[1][1] == pytest.approx(cosine, abs=1e-4)


def test_a_turn_of_repeats_stands_for_the_record_it_repeated(storage: Storage) -> None:
    # A re-asked question with the same answer writes nothing; the next turn of the
    # session still finds what the session was about.
    answer = record("why the invoice PDF crashes: the font is missing")
    _extracted(storage, _turn(storage, "s0"), answer)  # asked in an earlier session
    repeat = _turn(storage, "s1")
    with storage.transaction() as tx:
        assert tx.mark_turn_extracted(repeat, [], "repeat", answer.record_id)
    later = _turn(storage, "s1")
    assert [rid for rid, _ in _recent(storage, later)] == [answer.record_id]
    newer = record("invoice PDF: the font embedded", minutes=1)
    assert _supersede(storage, answer, newer)
    assert [rid for rid, _ in _recent(storage, later)] == [newer.record_id]
    skipped = _turn(storage, "s2")  # a turn skipped for another reason stands for nothing
    with storage.transaction() as tx:
        assert tx.mark_turn_extracted(skipped, [], "meta")
    assert _recent(storage, _turn(storage, "s2")) == []


def test_the_session_previous_record_is_its_subject_current_record(storage: Storage) -> None:
    old = record("first try")
    before = _turn(storage, "s1")
    _extracted(storage, before, old)
    new = record("the fix from another session")
    assert _supersede(storage, old, new)  # another session's record took the subject over
    found = _previous(storage, _turn(storage, "s1"))
    assert found is not None and found[0] == new.record_id
    storage.delete_memory_records([new.record_id])
    assert _previous(storage, _turn(storage, "s1")) is None


def _versions(storage: Storage, turn_id: str, current_id: str, lookback: int = 6) -> list[str]:
    with storage.transaction() as tx:
        found = tx.session_versions(turn_id, current_id, vec(1), lookback)
    a = vec(1) / np.linalg.norm(vec(1))
    for r, cosine in found:  # each with its cosine to the vector asked, as written
        b = vec(len(r.title))
        assert cosine == pytest.approx(float(a @ b / np.linalg.norm(b)), abs=1e-4)
    cosines = [cosine for _, cosine in found]
    assert cosines == sorted(cosines, reverse=True)  # nearest first
    return [r.record_id for r, _ in found]


def test_a_version_keeps_its_vector_for_the_session_follow_ups(storage: Storage) -> None:
    storage.claim_model("model-a")
    crash, font = record("the invoice PDF crashes"), record("the font lacks accented glyphs")
    first = _turn(storage, "s1")
    _extracted(storage, first, crash, font)
    nope = record("nope, a longer title for another vector")
    second = _turn(storage, "s1")
    _extracted(storage, second, nope)
    with storage.transaction() as tx:  # "nope" carried the subject on: both are versions
        tx.lock_subjects(NS)
        assert tx.supersede(crash.record_id, nope.record_id, T0)
        assert tx.supersede(font.record_id, nope.record_id, T0)
    elsewhere = record("the invoice PDF crash, as another session saw it")
    _extracted(storage, _turn(storage, "s2"), elsewhere)
    with storage.transaction() as tx:  # another session's record is no version of s1's
        tx.lock_subjects(NS)
        assert tx.supersede(elsewhere.record_id, nope.record_id, T0)
    now = _turn(storage, "s1")
    # Not the current record itself, nor the other session's version.
    assert sorted(_versions(storage, now, nope.record_id)) == [crash.record_id, font.record_id]
    assert _versions(storage, now, nope.record_id, lookback=1) == []  # only "nope" is that near
    other = record("another subject of the project")
    storage.put_memory_record(other)
    assert _versions(storage, now, other.record_id) == []  # versions of another record only
    assert _versions(storage, first, nope.record_id) == []  # the session's first turn
    # The searched vectors are the current records' only.
    assert not storage.has_embedding(crash.record_id)
    # Split out, a version is a current record again, and no longer a version.
    storage.split_version(font.record_id)
    assert _versions(storage, now, nope.record_id) == [crash.record_id]
    # A vector another model made does not compare (here: the stored model changed).
    storage.start_rebuild("model-b")
    with storage.transaction() as tx:
        for r in storage.list_memory_records(NS).items:
            tx.put_staged(r.record_id, vec(3))
    assert storage.swap_staged("model-b")
    assert _versions(storage, now, nope.record_id) == []
    # Deleting the current record deletes its versions, vectors and all.
    storage.delete_memory_records([nope.record_id])
    assert storage.get_version(crash.record_id) is None


def test_an_imported_version_has_no_vector_to_compare(storage: Storage) -> None:
    storage.claim_model("model-a")
    old = record("the invoice PDF crashes")
    turn = _turn(storage, "s1")
    _extracted(storage, turn, old)
    new = record("the invoice PDF crash, fixed", minutes=1)
    _extracted(storage, _turn(storage, "s1"), new)
    with storage.transaction() as tx:
        tx.lock_subjects(NS)
        assert tx.supersede(old.record_id, new.record_id, T0)
    now = _turn(storage, "s1")
    assert _versions(storage, now, new.record_id) == [old.record_id]
    version = storage.get_version(old.record_id)
    assert version is not None
    with storage.transaction() as tx:  # imported again into its own database: as it was
        tx.put_version(version)
    assert _versions(storage, now, new.record_id) == [old.record_id]
    with storage.transaction() as tx:  # imported where it was not: from its body alone
        assert tx.take_version(old.record_id) == version
        tx.put_version(version)
    assert storage.get_version(old.record_id) == version
    assert _versions(storage, now, new.record_id) == []

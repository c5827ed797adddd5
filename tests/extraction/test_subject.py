"""The subject rule (``wakemark.shared.extraction.subject``) on records and cosines."""

from __future__ import annotations

from datetime import UTC, datetime

from wakemark.shared.extraction import subject
from wakemark.shared.models import MemoryRecord

NS = "/actor/a/project/p/"


def _rec(title: str, summary: str = "", **extra: object) -> MemoryRecord:
    return MemoryRecord(namespace=NS, title=title, summary=summary, **extra)  # type: ignore[arg-type]


def test_the_nearest_current_record_past_the_bar_is_the_subject() -> None:
    new = _rec("invoice PDF crash: embed the font", "embedding the font fixed it")
    near, nearer = _rec("invoice PDF crash"), _rec("invoice PDF crash on accents")
    found = subject.match(new, [(nearer, 0.93), (near, 0.91)])
    assert found is not None and found.old is nearer and not found.repeat
    assert subject.match(new, [(near, subject.SAME_SUBJECT - 0.01)]) is None
    assert subject.match(new, []) is None


def test_numbers_pins_corrections_and_projects_keep_subjects_apart() -> None:
    new = _rec("release version 3.0.3")
    assert subject.match(new, [(_rec("release version 3.0.0"), 0.99)]) is None
    assert (
        subject.match(_rec("cache 1 drops entries"), [(_rec("cache 2 drops entries"), 0.99)])
        is None
    )
    assert subject.match(new, [(_rec("release version 3.0.3", pinned=True), 0.99)]) is None
    edited = _rec("release version 3.0.3", edited_at=datetime.now(UTC))
    assert subject.match(new, [(edited, 0.99)]) is None
    elsewhere = MemoryRecord(namespace="/actor/a/project/q/", title="release version 3.0.3")
    assert subject.match(new, [(elsewhere, 0.99)]) is None


def test_a_repeat_says_nothing_new() -> None:
    old = _rec("Why is the weather cold?", "It is winter.", files_touched=["a.py"])
    again = _rec("why is the weather cold", "it is winter", files_touched=["a.py"])
    found = subject.match(again, [(old, 0.92)])
    assert found is not None and found.repeat
    more = _rec("why is the weather cold", "it is winter", files_touched=["a.py", "b.py"])
    found = subject.match(more, [(old, 0.99)])
    assert found is not None and not found.repeat  # a new file: new work on the subject
    other_type = _rec("Why is the weather cold?", "It is winter.", observation_type="bugfix")
    found = subject.match(other_type, [(old, 0.99)])
    assert found is not None and not found.repeat

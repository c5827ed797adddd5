"""The subject rule (``wakemark.shared.extraction.subject``) on records and cosines."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

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
    assert subject.match(new, [(near, subject.RULE.same - 0.01)]) is None
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


def test_a_later_turn_of_the_same_session_joins_its_subject_from_a_lower_cosine() -> None:
    tried = _rec("start session spins", "rebuilt with debug logging; reload and retry")
    again = _rec("still spinning", "deployed a simpler version without async handlers")
    cosine = (subject.RULE.session + subject.RULE.same) / 2
    sessions = {tried.record_id: "s1", again.record_id: "s1"}
    found = subject.match(again, [(tried, cosine)], session_of=lambda r: sessions[r.record_id])
    assert found is not None and found.old is tried
    sessions[tried.record_id] = "s0"  # the same words from another session: no evidence
    assert (
        subject.match(again, [(tried, cosine)], session_of=lambda r: sessions[r.record_id]) is None
    )
    assert subject.match(again, [(tried, cosine)]) is None  # sessions unknown


def test_a_session_is_looked_up_only_when_it_could_decide() -> None:
    asked: list[str] = []

    def session_of(record: MemoryRecord) -> str:
        asked.append(record.record_id)
        return "s1"

    new, far = _rec("font cache path"), _rec("upload retries")
    assert subject.match(new, [(far, subject.RULE.session - 0.01)], session_of=session_of) is None
    assert asked == [new.record_id]  # the new record's own session, not the far one's


def test_numbers_are_compared_in_titles_not_in_summaries() -> None:
    # A backport names the commit it copies; two tries at one fix name other counts.
    change = _rec("always set accept-ranges header", "always set accept-ranges header")
    backport = _rec(
        "always set accept-ranges header", "(cherry picked from commit 664deb6a58c8ff60)"
    )
    assert subject.match(backport, [(change, 0.93)]) is not None


@pytest.mark.parametrize(
    ("old", "new", "apart"),
    [
        ("Fix #12: crash on empty cart", "Fix #13: crash on empty cart", True),
        ("Drop support for Python 3.7", "Drop support for Python 3.8", True),
        ("Task 3 done: seam tests pass", "Task 4 done: seam tests pass", True),
        ("Design Section 4: Technical Architecture", "Design Section 5: Technical Architecture",
         True),
        ("Fix typo (#531)", "Fix typo", True),
        ("add changelog for GH-735", "add changelog for GH-1358", True),
        ("Remove support for Swift 6.0", "Remove support for Xcode 16.2", True),
        # Counts, addresses and timestamps name nothing.
        ("What about 3 messages?", "Give me an example of one with 4 messages", False),
        ("The video is only 3 seconds long", "trigger the video sooner", False),
        ('forward request failed: Post "http://127.0.0.1:8081/session/start"',
         "URL: http://192.168.86.60:8081/session/start Response: {}", False),
        ("main-1 | E 2025/12/01 23:32:32 package.go:493: parse theme.json failed",
         "main-1 | E 2025/12/02 00:06:27 package.go:493: parse theme.json failed", False),
        ("Bump the github-actions group with 3 updates",
         "Bump the github-actions group with 2 updates", False),
        ("Sprint 8 is complete", "Sprint 8 retro: 42 commits, 3 sprints", False),
    ],
)  # fmt: skip
def test_numbers_that_name_things_tell_subjects_apart(old: str, new: str, apart: bool) -> None:
    found = subject.match(_rec(new), [(_rec(old), 0.99)])
    assert (found is None) is apart
    every = subject.Rule(numbers="all")  # before: any two different sets of numbers
    assert subject.match(_rec(new), [(_rec(old), 0.99)], every) is None


def test_a_follow_up_continues_the_session_previous_record_from_a_low_cosine() -> None:
    tried = _rec("Start Session spins", "rebuilt with debug logging", files_touched=["main.ts"])
    next_step = _rec("read the console lines", "the handler awaits a promise never resolved")
    cosine = subject.RULE.follow + 0.05
    found = subject.match(next_step, [], previous=(tried, cosine))
    assert found is not None and found.old is tried and not found.repeat
    assert subject.match(next_step, [], previous=(tried, subject.RULE.follow - 0.01)) is None
    assert subject.match(next_step, []) is None  # no follow-up: no lineage
    pinned = _rec("Start Session spins", pinned=True)
    assert subject.match(next_step, [], previous=(pinned, 0.8)) is None
    off = subject.Rule(follow=1.01)
    assert subject.match(next_step, [], off, previous=(tried, 0.8)) is None


def test_a_near_neighbour_wins_over_the_lineage() -> None:
    new = _rec("invoice PDF crash: embed the font")
    neighbour, last = _rec("invoice PDF crash"), _rec("deploy the docs")
    found = subject.match(new, [(neighbour, subject.RULE.same)], previous=(last, 0.6))
    assert found is not None and found.old is neighbour


def test_disjoint_files_keep_weaker_evidence_apart_but_not_along_the_lineage() -> None:
    tried = _rec("plugin load fails", files_touched=["plugin/index.js"])
    other = _rec("plugin load fails", files_touched=["server/app.py"])
    shared = _rec("plugin load fails", files_touched=["plugin/index.js", "server/app.py"])
    unknown = _rec("plugin load fails")  # no files: no evidence either way
    below = subject.RULE.files_apart - 0.01
    assert subject.match(other, [(tried, below)]) is None
    assert subject.match(shared, [(tried, below)]) is not None
    assert subject.match(unknown, [(tried, below)]) is not None
    assert subject.match(other, [(tried, subject.RULE.files_apart)]) is not None
    no_veto = subject.Rule(files_apart=0)
    assert subject.match(other, [(tried, below)], no_veto) is not None
    # A session going on: after the sources, the request's next step is the tests' mocks.
    sources = _rec(
        "Look through the throws in MistKit and let's replace as many as we can with typed throws",
        files_touched=["Sources/MistKit/Authentication/TokenManager.swift"],
    )
    mocks = _rec(
        "Please update all the mock TokenManager classes in the Tests directory to use typed "
        "throws (TokenManagerError)",
        files_touched=["Tests/MistKitTests/Mocks/MockTokenManagerWithRetry.swift"],
    )
    found = subject.match(mocks, [], previous=(sources, subject.RULE.follow))
    assert found is not None and found.old is sources
    vetoed = subject.Rule(follow_files_apart=0.95)
    assert subject.match(mocks, [], vetoed, previous=(sources, subject.RULE.follow)) is None


def test_a_turn_naming_nothing_of_its_own_carries_the_subject_on_at_any_cosine() -> None:
    tried = _rec("start session spins", "rebuilt with debug logging", files_touched=["a.ts"])
    nope = _rec("Now test the full flow:", "1. reload 2. tap Start", files_touched=["b.ts"])
    low = subject.RULE.follow - 0.5
    assert subject.match(nope, [], previous=(tried, low)) is None  # a request of its own
    found = subject.match(nope, [], previous=(tried, low), carries_on=True)
    assert found is not None and found.old is tried
    # Numbers that name things still keep the next task of a plan apart.
    task3, task4 = _rec("Task 3 done: 7 seam tests"), _rec("Task 4 done: input mapping")
    assert subject.match(task4, [], previous=(task3, low), carries_on=True) is None
    off = subject.Rule(carry_on=False)
    assert subject.match(nope, [], off, previous=(tried, low), carries_on=True) is None


def test_along_the_lineage_a_version_only_one_title_names_does_not_keep_them_apart() -> None:
    kept = _rec("No need to edit Package.swift", "deleted Package@swift-5.10.swift")
    xcode = _rec("Remove support for Xcode 16.2", "dropped it from the CI matrix")
    cosine = subject.RULE.follow
    found = subject.match(xcode, [], previous=(kept, cosine))
    assert found is not None and found.old is kept
    # Among the nearest records versions still tell subjects apart, and so do two versions.
    assert subject.match(xcode, [(kept, 0.99)]) is None
    xcode_15 = _rec("Remove support for Xcode 15.4", "dropped it from the CI matrix")
    assert subject.match(xcode, [], previous=(xcode_15, cosine)) is None
    # A section, task or phase only one title names still does.
    section = _rec("Design Section 6: AI Facilitation Modes", "the modes and their prompts")
    configs = _rec("the working configs are in .mcp.json", "found the research stack")
    assert subject.match(section, [], previous=(configs, 1.0), carries_on=True) is None
    same = subject.Rule(follow_numbers="same")
    assert subject.match(xcode, [], same, previous=(kept, cosine)) is None


def test_a_follow_up_may_go_back_to_an_earlier_record_of_the_session_by_its_words() -> None:
    # The transcript clean-up of a real session: a side question between two steps of
    # one request, then the request goes on ("5 messages?" after an example of 4).
    counts = _rec("4 messages?", "82 transcripts, all subagent: set the threshold there?")
    example = _rec("Give me an example of one with 4 messages", "a stale task echo: noise")
    more = _rec("5 messages?", "17 transcripts, all subagent, zero main sessions")
    bar = subject.RULE.recent
    low = subject.RULE.follow - 0.2
    found = subject.match(more, [], previous=(example, low), recent=[(counts, bar)])
    assert found is not None and found.old is counts
    # The nearest of those reaching the bar; below it the request starts its own subject.
    other = _rec("3 messages?", "63 transcripts")
    found = subject.match(
        more, [], previous=(example, low), recent=[(other, bar), (counts, bar + 0.1)]
    )
    assert found is not None and found.old is counts
    below = [(counts, bar - 0.01)]
    assert subject.match(more, [], previous=(example, low), recent=below) is None
    # Carrying on is about the last turn only: "yes" goes on with the side question.
    yes = _rec("Threshold set", "248 transcripts remain")
    found = subject.match(yes, [], previous=(example, low), carries_on=True, recent=below)
    assert found is not None and found.old is example
    # Named numbers still keep the session's other tasks apart, and the rule can be off.
    task3, task4 = _rec("Task 3 done: seam tests"), _rec("Task 4 done: input mapping")
    assert subject.match(task4, [], previous=(example, low), recent=[(task3, 0.9)]) is None
    off = subject.Rule(recent=1.01)
    assert subject.match(more, [], off, previous=(example, low), recent=[(counts, 0.9)]) is None


def test_a_follow_up_naming_what_the_previous_record_names_continues_it_from_lower() -> None:
    # A real session's shape: typed throws converted across the package, then "I think
    # CloudKitResponseProcessor should only throw CloudKitError", an error type the
    # answer before had made public.
    converted = _rec(
        "update the mock TokenManager classes to use typed throws",
        "Converted the protocols to typed throws; made CloudKitError public.",
    )
    narrower = _rec(
        "I think CloudKitResponseProcessor should only throw CloudKitError",
        "Its six methods now declare throws(CloudKitError); 161 tests pass.",
    )
    cosine = subject.RULE.follow_named
    assert cosine < subject.RULE.follow
    found = subject.match(narrower, [], previous=(converted, cosine))
    assert found is not None and found.old is converted
    assert subject.match(narrower, [], previous=(converted, cosine - 0.01)) is None
    # The name must be the request's (the title's), and the previous record's.
    unnamed = _rec("I think the response processor should throw one error type", narrower.summary)
    assert subject.match(unnamed, [], previous=(converted, cosine)) is None
    other = _rec("typed throws across the package", "Converted the protocols to typed throws.")
    assert subject.match(narrower, [], previous=(other, cosine)) is None
    # Lineage only: a record of another session naming it is no evidence, nor when off.
    assert subject.match(narrower, [(converted, cosine)]) is None
    off = subject.Rule(follow_named=1.01)
    assert subject.match(narrower, [], off, previous=(converted, cosine)) is None


def test_a_follow_up_near_a_version_of_the_previous_subject_supersedes_its_current_record() -> None:
    # The transcript clean-up of a real session: counts of short transcripts, then "nope"
    # carried the subject on (its record, now current, says little), then the request
    # the counts led to. Far from "nope", it is near the counts, a version of the subject.
    counts = _rec("4 messages?", "82 transcripts with 4 messages, all subagent: a threshold?")
    nope = _rec("nope", "Then the example was not representative; here is another one.")
    threshold = _rec("Set the threshold at 4 or fewer messages", "248 transcripts remain")
    low = subject.RULE.follow - 0.2
    bar = subject.RULE.follow
    found = subject.match(threshold, [], previous=(nope, low), versions=[(counts, bar)])
    assert found is not None and found.old is nope and not found.repeat
    # The nearest version decides; below the bar, or with the rule off, it does not.
    other = _rec("3 messages?", "63 transcripts")
    found = subject.match(
        threshold, [], previous=(nope, low), versions=[(other, bar - 0.1), (counts, bar)]
    )
    assert found is not None and found.old is nope
    assert (
        subject.match(threshold, [], previous=(nope, low), versions=[(counts, bar - 0.01)]) is None
    )
    off = subject.Rule(versions=False)
    assert subject.match(threshold, [], off, previous=(nope, low), versions=[(counts, bar)]) is None
    # A look-alike: a version naming another task, or a current record a person pinned.
    head, task4 = _rec("Task 4: go on", "Started."), _rec("Task 4: seam tests for input")
    task3, started = _rec("Task 3 done: seam tests"), _rec("Task 4 started: seam tests")
    assert subject.match(task4, [], previous=(head, low), versions=[(task3, 0.9)]) is None
    found = subject.match(task4, [], previous=(head, low), versions=[(started, 0.9)])
    assert found is not None and found.old is head
    pinned = _rec("nope", nope.summary, pinned=True)
    assert subject.match(threshold, [], previous=(pinned, low), versions=[(counts, 0.9)]) is None

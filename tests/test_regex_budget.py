"""Every regex on the capture path runs in linear time on inputs made to stall it.

The patterns are found in the code (``tests/regex_bait.capture_patterns``: the scrub's
modules, the JSON checks, the agents' payload mapping, the event model), so one added
later is baited too, and each gets the inputs ``regex_bait.baits`` derives from its own
parts.

The budget is relative, so a loaded machine does not fail it. Times are the thread's
CPU time (another process's load does not count), and each input is judged twice: by
its growth, the time on eight times the text against the time on the text (a linear
scan grows eight times, a quadratic one sixty-four), and by its cost against a plain
linear pass over as many characters in the same run (a rule costs a few such passes).
"""

from __future__ import annotations

import gc
import re
import time
from collections.abc import Callable
from typing import Any

import pytest

from tests.regex_bait import baits, capture_patterns
from wakemark.shared.privacy import scrub, scrub_text

SIZE = 4_000
SCALE = 8
# From SIZE to SCALE * SIZE a linear scan grows 8 times, a quadratic one 64; a core
# shared with a busy neighbour can double one of the two times.
GROWTH = 24
PASSES = 40  # linear passes at SCALE * SIZE (the slowest rule measured costs a few)
FLOOR_S = 0.002  # below this at SCALE * SIZE, timer and interpreter noise; no backtracking
# rule seen stays under it (a class scanned in C from each start is already over).
PATTERNS = capture_patterns()
_LINEAR = re.compile(r".", re.DOTALL)


def _cpu(fn: Callable[[], object]) -> float:
    gc.disable()  # a collection of the whole test process is not the regex's time
    try:
        start = time.thread_time()
        fn()
        return time.thread_time() - start
    finally:
        gc.enable()


def _consume(pattern: re.Pattern[Any], text: Any) -> None:
    for _ in pattern.finditer(text):
        pass


@pytest.fixture(scope="module")
def per_char() -> float:
    """Seconds a character of a linear pass (the engine stepping over every character,
    one match object each), the fastest of five runs."""
    text = "x" * SIZE * SCALE
    return min(_cpu(lambda: _consume(_LINEAR, text)) for _ in range(5)) / len(text)


def _verdict(run: Callable[[Any], object], small: Any, large: Any, per_char: float) -> str:
    """'' when ``run`` is linear on the input, else why not. Load only adds time, so one
    run within budget passes, and one far past it fails; near the limit, the fastest of
    three runs of each size, interleaved so that both see the same load."""
    passes_budget = PASSES * per_char * len(large)
    t_large = _cpu(lambda: run(large))
    if t_large <= FLOOR_S:
        return ""
    t_small = _cpu(lambda: run(small))
    if t_large <= min(GROWTH * t_small, passes_budget):
        return ""
    if t_large < 3 * max(GROWTH * t_small, passes_budget):
        for _ in range(2):
            t_small = min(t_small, _cpu(lambda: run(small)))
            t_large = min(t_large, _cpu(lambda: run(large)))
    growth = t_large / max(t_small, 1e-6)
    if growth > GROWTH:
        return f"grows x{growth:.1f} on {SCALE}x the text"
    if t_large > passes_budget:
        return f"costs {t_large / (per_char * len(large)):.0f} linear passes"
    return ""


def _sized(pattern: re.Pattern[Any], size: int = SIZE) -> list[tuple[str, Any, Any]]:
    small, large = baits(pattern, size), baits(pattern, SCALE * size)
    return [(name, small[name], large[name]) for name in small if name in large]


def test_the_capture_path_patterns_are_found() -> None:
    names = {name for name, _ in PATTERNS}
    sources = {p.pattern for _, p in PATTERNS}
    assert "shared.privacy._TAG[0]" in names
    assert any(name.startswith("shared.secrets.RULES") for name in names)
    assert any(name.startswith("services.agents.") for name in names)
    assert any(isinstance(source, bytes) for source in sources)  # params' byte patterns
    assert any("_authToken" in str(source) for source in sources)  # a detect-secrets rule


@pytest.mark.parametrize(("name", "pattern"), PATTERNS, ids=[name for name, _ in PATTERNS])
def test_every_pattern_is_linear_on_its_baits(
    name: str, pattern: re.Pattern[Any], per_char: float
) -> None:
    inputs = _sized(pattern)
    assert inputs
    slow = {
        bait: why
        for bait, small, large in inputs
        if (why := _verdict(lambda t: _consume(pattern, t), small, large, per_char))
    }
    assert not slow, f"{pattern.pattern!r}: {slow}"


@pytest.mark.parametrize(("name", "pattern"), PATTERNS, ids=[name for name, _ in PATTERNS])
def test_the_whole_scrub_is_linear_on_each_patterns_baits(
    name: str, pattern: re.Pattern[Any], per_char: float
) -> None:
    # Every rule and what runs around it (anchors, gates, the name before an ``=``, the
    # value's randomness) on each pattern's worst shapes.
    def text(raw: Any) -> str:
        return raw.decode("utf-8") if isinstance(raw, bytes) else raw

    slow = {
        bait: why
        for bait, small, large in _sized(pattern)
        if (why := _verdict(scrub_text, text(small), text(large), per_char))
    }
    assert not slow, f"{pattern.pattern!r}: {slow}"


def test_the_budget_catches_backtracking(per_char: float) -> None:
    # Not too loose to see the stalls this test exists for: the tag and JWT patterns as
    # they were, and a quadratic whose every start is a cheap scan in C; on smaller texts
    # (the old tag pattern takes seconds at the full size).
    for old in (
        re.compile(r"<\s*(/?)\s*private\s*>", re.IGNORECASE | re.ASCII),
        re.compile(r"eyJ[A-Za-z0-9_-]{8,}={0,2}\.[A-Za-z0-9_-]+={0,2}\.[A-Za-z0-9_-]*"),
        re.compile(r"\{\{[^}]*\}\}"),
    ):
        assert any(
            _verdict(lambda t: _consume(old, t), small, large, per_char)  # noqa: B023
            for _, small, large in _sized(old, SIZE // 4)
        ), old.pattern


def test_a_nested_body_is_scanned_once_per_rule() -> None:
    # Depth no longer multiplies the scan: a credential at the bottom of a deep value
    # costs about what the same strings cost side by side.
    value = "Zq8xK2" + "mP4vLr9TbW"  # not one literal a scan of this file would flag
    secret = "DB_PASSWORD=" + value
    filler = "plain words " * 2000
    flat: Any = [filler] * 40 + [secret]
    deep: Any = secret
    for _ in range(40):
        deep = [filler, deep]
    flat_s = min(_cpu(lambda: scrub(flat)) for _ in range(3))
    deep_s = min(_cpu(lambda: scrub(deep)) for _ in range(3))
    assert value not in repr(scrub(deep))
    assert deep_s < 3 * flat_s + FLOOR_S, (deep_s, flat_s)

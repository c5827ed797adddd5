"""``AnchoredPattern.finditer`` finds exactly what ``re``'s own ``finditer`` does."""

from __future__ import annotations

import re
from unittest import mock

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.test_secrets import CREDENTIALS
from wakemark.shared import anchored, secrets
from wakemark.shared.anchored import AnchoredPattern

PATTERNS = [p for _, p in secrets._plugin_rules()] + [
    secrets._PRIVATE_KEY,
    secrets._BEARER,
    re.compile(r"(?:(?<=\W)|(?<=^))(?:cl|clou)(?:_|-|)(?:key|pw) *= *([a-z]{8})", re.I),
    re.compile(r"ab(?:cd|ef)+g"),
]
# Pieces that make near-misses likely: each credential cut at random, keywords, operators.
PIECES = [line for _, _, line in CREDENTIALS] + [
    "AKIA", "ghp_", "glpat-", "xoxb-", "Bearer ", "eyJ", "-----BEGIN ", "://u:p@", "cl_key =",
    "CLOU-PW = abcdefgh", "abcdcdefg", "12345678:", "12:15:18.123", "M" + "a" * 24 + ".",
    ".abcdef.", "K", "é", "İ", "ſ", "\n", " ", "=", ":",
    "plain words between them " * 8,
]  # fmt: skip


@st.composite
def texts(draw: st.DrawFn) -> str:
    parts = draw(st.lists(st.sampled_from(PIECES) | st.text(max_size=8), max_size=12))
    out = []
    for part in parts:
        cut = draw(st.integers(0, len(part)))
        out.append(part[cut:] if draw(st.booleans()) else part)
    return "".join(out)


@pytest.mark.parametrize("pattern", PATTERNS, ids=lambda p: p.pattern[:30])
@settings(max_examples=60, deadline=None)
@given(text=texts())
def test_same_matches_as_re(pattern: re.Pattern[str], text: str) -> None:
    want = [m.span() for m in pattern.finditer(text)]
    assert [m.span() for m in AnchoredPattern(pattern).finditer(text)] == want
    # Always from the candidate positions, however many there are:
    with mock.patch.object(anchored, "_MATCH_COST_CHARS", 0):
        assert [m.span() for m in AnchoredPattern(pattern).finditer(text)] == want


def test_a_pattern_with_a_literal_is_anchored() -> None:
    pattern = AnchoredPattern(re.compile(r"aws.{0,20}?(?:key|pwd)", re.I))
    assert pattern.anchors[0].strings == ("aws",)
    assert list(pattern.finditer("no match here" * 50)) == []
    assert [m.group() for m in pattern.finditer("x AWS_key y")] == ["AWS_key"]


def test_a_common_anchor_gets_a_gate_from_the_first_literal() -> None:
    # ``:`` is in every timestamp: the gate wants ``:`` and the 35 characters after it.
    pattern = AnchoredPattern(re.compile(r"\d{8,10}:[0-9A-Za-z_-]{35}"))
    assert pattern.gate is not None
    assert pattern.gate.search("at 2026-12-01T12:15:18.123 " * 20) is None
    bot = "123456789:" + "A" * 35
    assert [m.group() for m in pattern.finditer(f"x {bot} y")] == [bot]
    assert AnchoredPattern(re.compile(r"ab(?:cd|ef)+g")).gate is None  # starts with one
    assert AnchoredPattern(re.compile(r"(a)[0-9]x\1")).gate is None  # refers back

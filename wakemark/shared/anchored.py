r"""``finditer`` that tries a regex only near the literal text every match must hold.

Python's ``re`` scans a pattern that starts with an alternation or a look-behind (most of
detect-secrets' keyword-style rules) at every position. But any match
of ``aws.{0,20}?(?:key|pwd|...)`` holds ``aws``: ``AnchoredPattern`` reads such literals
off the parsed pattern, returns at once when the text lacks one, and otherwise tries
``match`` only at the few positions from which a match could reach an occurrence. The
matches are exactly ``pattern.finditer``'s (``tests/test_anchored.py`` checks it).

An anchor as common as ``.`` or ``:`` rejects little, and the engine then tries a pattern
that starts with a character class (``[MNO][\w-]{23,25}\.``, ``\d{8,10}:``) at every
position. Such a pattern also gets a gate: the pattern's tail from its first literal,
which every match holds and which ``re`` finds by scanning for that literal; a text it
does not match cannot match the pattern. Only a tail of bounded width is a gate: each of
its starts then reads a bounded stretch, and the gate stays linear.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from re import _compiler as sre_compile  # type: ignore[attr-defined]
from re import _constants as sre  # type: ignore[attr-defined]
from re import _parser as sre_parse  # type: ignore[attr-defined]

# A candidate position (its ``match`` call and the loop around it) costs about as much as
# the engine's own scan of this many characters; past that, a plain ``finditer`` is cheaper.
_MATCH_COST_CHARS = 24


@dataclass(frozen=True)
class _Anchor:
    strings: tuple[str, ...]  # one of these occurs in every match
    reach: int | None  # a match's start is at most this far before an occurrence's end
    lead: int  # and at least this far before its start (the items ahead of the anchor's)

    def window(self) -> int:
        return (self.reach or 0) - self.lead


def _literal_runs(parsed: sre_parse.SubPattern) -> list[tuple[object, object]]:
    """The items, each run of single literals joined into one ``("LITERALS", text)``."""
    items: list[tuple[object, object]] = []
    run = ""
    for op, av in parsed.data:
        if op is sre.LITERAL:
            run += chr(av)
            continue
        if run:
            items.append(("LITERALS", run))
            run = ""
        items.append((op, av))
    if run:
        items.append(("LITERALS", run))
    return items


def _item_factor(op: object, av: object) -> set[str] | None:
    """Strings one of which every match of this item holds (None: none known)."""
    if op == "LITERALS":
        return {str(av)}
    if op is sre.SUBPATTERN:
        return _best(av[-1])  # type: ignore[index]
    if op is sre.BRANCH:
        alternatives = [_best(b) for b in av[1]]  # type: ignore[index]
        return set().union(*alternatives) if all(alternatives) else None  # type: ignore[arg-type]
    if op in (sre.MAX_REPEAT, sre.MIN_REPEAT) and av[0] >= 1:  # type: ignore[index]
        return _best(av[2])  # type: ignore[index]
    return None


def _best(parsed: sre_parse.SubPattern) -> set[str] | None:
    """The factor of a sequence's item whose shortest string is longest."""
    found = [f for op, av in _literal_runs(parsed) if (f := _item_factor(op, av))]
    return max(found, key=lambda f: min(map(len, f)), default=None)


def _refers_back(data: object) -> bool:
    if isinstance(data, (list, tuple, sre_parse.SubPattern)):
        return any(_refers_back(item) for item in data)
    return data is sre.GROUPREF or data is sre.GROUPREF_EXISTS


def _gate(pattern: re.Pattern[str]) -> re.Pattern[str] | None:
    r"""The tail from the first literal after the start, compiled (None: the pattern
    starts with one, has none, the tail may refer back to a group before it, or it is
    unbounded: without the items before it, a tail such as ``AP[A-Z0-9]{8,}\s`` would
    start at every ``AP`` of one long run and scan to its end)."""
    parsed = sre_parse.parse(pattern.pattern, pattern.flags)
    first = next((i for i, (op, _) in enumerate(parsed.data) if op is sre.LITERAL), 0)
    tail = parsed.data[first:]
    if first == 0 or _refers_back(tail):
        return None
    if sre_parse.SubPattern(parsed.state, tail).getwidth()[1] >= sre.MAXREPEAT:
        return None
    compiled: re.Pattern[str] = sre_compile.compile(
        sre_parse.SubPattern(parsed.state, tail), pattern.flags
    )
    return compiled


def _anchors(pattern: re.Pattern[str]) -> list[_Anchor]:
    parsed = sre_parse.parse(pattern.pattern, pattern.flags)
    fold = bool(pattern.flags & re.IGNORECASE)
    items = _literal_runs(parsed)
    anchors = []
    least = most = 0  # the width of the items so far
    for op, av in items:
        found = _item_factor(op, av)
        if op == "LITERALS":
            lo = hi = len(str(av))
        else:
            lo, hi = sre_parse.SubPattern(parsed.state, [(op, av)]).getwidth()
        if found:
            strings = tuple(sorted(s.lower() if fold else s for s in found))
            reach = most + hi
            anchors.append(_Anchor(strings, reach if reach < sre.MAXREPEAT else None, least))
        least, most = least + lo, most + hi
    return anchors


class AnchoredPattern:
    def __init__(self, pattern: re.Pattern[str]) -> None:
        self.pattern = pattern
        self.fold = bool(pattern.flags & re.IGNORECASE)
        self.anchors = _anchors(pattern)
        # ``re`` itself searches fast for a pattern that starts with a literal: past the
        # gate, a plain ``finditer`` beats any candidate positions.
        first = _literal_runs(sre_parse.parse(pattern.pattern, pattern.flags))[:1]
        self.literal_start = bool(first) and first[0][0] == "LITERALS" and not self.fold
        self.gate = _gate(pattern)

    def finditer(self, text: str, lower: str | None = None) -> Iterable[re.Match[str]]:
        """``lower``: ``text.lower()`` if the caller has it (one per text, not per rule)."""
        if not self.anchors:
            return self.pattern.finditer(text)
        exact = not self.fold or text.isascii()  # else lower() may move or miss characters
        if not self.fold:
            hay = text
        elif exact:
            hay = text.lower() if lower is None else lower
        else:
            hay = text.casefold()
        for anchor in self.anchors:
            for s in anchor.strings:
                if s in hay:
                    break
            else:
                return ()
        if self.gate is not None and self.gate.search(text) is None:
            return ()
        if not exact or self.literal_start:
            return self.pattern.finditer(text)
        starts = self._starts(hay)
        if starts is None:
            return self.pattern.finditer(text)
        return self._matches(text, starts)

    def _starts(self, hay: str) -> list[int] | None:
        bounded = [a for a in self.anchors if a.reach is not None]
        if not bounded:
            return None
        costs = [sum(hay.count(s) for s in a.strings) * (a.window() + 1) for a in bounded]
        cost = min(costs)
        anchor = bounded[costs.index(cost)]
        if cost * _MATCH_COST_CHARS > len(hay):
            return None
        reach = anchor.reach or 0
        starts: set[int] = set()
        for s in anchor.strings:
            at = hay.find(s)
            while at >= 0:
                starts.update(range(max(0, at + len(s) - reach), max(0, at - anchor.lead) + 1))
                at = hay.find(s, at + 1)
        return sorted(starts)

    def _matches(self, text: str, starts: list[int]) -> Iterator[re.Match[str]]:
        cursor = 0
        for start in starts:
            if start < cursor:
                continue
            m = self.pattern.match(text, start)
            if m is not None:
                yield m
                cursor = m.end() if m.end() > m.start() else m.end() + 1

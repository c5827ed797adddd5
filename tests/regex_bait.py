"""Pathological inputs for a regex, derived from the pattern itself, and the capture path's
regexes found in the code (``capture_patterns``), so a pattern added later is baited too.

A backtracking engine goes quadratic (or worse) when many start positions each scan far
before failing, or when nested quantifiers split one run many ways. Both need text that
looks like the pattern: its literal prefixes and separators repeated, runs of the
characters its repetitions take, a match cut short. ``baits`` builds those from the parsed
pattern: for every cut of the pattern's top-level items, the items before the cut (each
repetition at its least, one character and a long run, each alternation's every branch)
repeated to fill the size (and the same broken at its very end), each item's run alone
after the items before it, and a whole match cut short or repeated.
"""

from __future__ import annotations

import importlib
import re
import sys
from collections.abc import Iterator
from re import _compiler as sre_compile  # type: ignore[attr-defined]
from re import _constants as sre  # type: ignore[attr-defined]
from re import _parser as sre_parse  # type: ignore[attr-defined]
from typing import Any

# Modules whose regexes run over a request body before it is stored: the scrub, the JSON
# checks, the agents' payload mapping and the event model's own checks.
CAPTURE_MODULES = (
    "wakemark.shared.secrets",
    "wakemark.shared.privacy",
    "wakemark.services.api.params",
    "wakemark.shared.models",
)

# Characters tried for a class: ASCII, whitespace, and a few non-ASCII ones.
_POOL = [chr(c) for c in range(32, 127)] + ["\n", "\t", "é", "ı", "\u00a0"]
_RUN = 64  # a "long" repetition inside a repeated unit


def capture_patterns() -> list[tuple[str, re.Pattern[Any]]]:
    """Every compiled regex held by the capture path's modules (globals, and lists or
    tuples of them such as the secret rules), named by module and attribute."""
    from wakemark.services import agents

    modules = [importlib.import_module(name) for name in CAPTURE_MODULES]
    # Each agent's module (from the registry the hook route uses) and the shared helpers.
    modules += [sys.modules[type(agent).__module__] for agent in agents.every()]
    modules.append(importlib.import_module("wakemark.services.agents.base"))
    found: dict[tuple[Any, int], tuple[str, re.Pattern[Any]]] = {}
    for module in modules:
        short = module.__name__.removeprefix("wakemark.")
        for attr, value in vars(module).items():
            for i, pattern in enumerate(_patterns_in(value)):
                key = (pattern.pattern, pattern.flags)
                found.setdefault(key, (f"{short}.{attr}[{i}]", pattern))
    return sorted(found.values(), key=lambda item: item[0])


def _patterns_in(value: Any, depth: int = 0) -> Iterator[re.Pattern[Any]]:
    if isinstance(value, re.Pattern):
        yield value
    elif isinstance(value, list | tuple) and depth < 2:
        for item in value:
            yield from _patterns_in(item, depth + 1)


def baits(pattern: re.Pattern[Any], size: int) -> dict[str, Any]:
    """Named inputs of about ``size`` characters (bytes for a bytes pattern)."""
    source = pattern.pattern
    parsed = sre_parse.parse(
        source.decode("latin-1") if isinstance(source, bytes) else source, pattern.flags
    )
    items = list(parsed.data)
    width = max([1, *(_branch_width(item) for item in items)])
    out: dict[str, str] = {}
    for branch in range(width):
        for run in (0, 1, _RUN):
            pieces = [_sample(item, parsed, branch, run) for item in items]
            for cut in range(1, len(items) + 1):
                unit = "".join(pieces[:cut])
                if unit:
                    text = _fill(unit, size)
                    out.setdefault(f"repeat:b{branch}:r{run}:cut{cut}", text)
                    # The same, failing only at its very end.
                    out.setdefault(
                        f"repeat-broken:b{branch}:r{run}:cut{cut}", text[:-1] + _breaker(text[-1])
                    )
        head = ""
        for i, item in enumerate(items):
            char = _first_char(item, parsed, branch)
            if char:
                out.setdefault(f"run:b{branch}:item{i}", _fill(head + char * size, size))
                # The run broken off by every character the pool holds that ends it.
                out.setdefault(
                    f"runs:b{branch}:item{i}", _fill(head + char * 512 + _breaker(char), size)
                )
            head += _sample(item, parsed, branch, 1)
        whole = "".join(_sample(item, parsed, branch, 1) for item in items)
        if len(whole) > 1:
            out.setdefault(f"near-miss:b{branch}", _fill(whole[:-1] + _breaker(whole[-1]), size))
            out.setdefault(f"match:b{branch}", _fill(whole + " ", size))
    unique = {text: name for name, text in reversed(out.items())}  # the first name of each
    if isinstance(pattern.pattern, bytes):
        return {name: text.encode("utf-8") for text, name in unique.items()}
    return {name: text for text, name in unique.items()}


def _fill(unit: str, size: int) -> str:
    return (unit * (size // len(unit) + 1))[:size]


def _breaker(char: str) -> str:
    return "\x01" if char != "\x01" else "\x02"


def _branch_width(item: tuple[Any, Any]) -> int:
    op, av = item
    if op is sre.BRANCH:
        return max(len(av[1]), *(_branch_width(i) for b in av[1] for i in b.data))
    if op is sre.SUBPATTERN or op is sre.ATOMIC_GROUP:
        sub = av[-1] if op is sre.SUBPATTERN else av
        return max([1, *(_branch_width(i) for i in sub.data)])
    if op in (sre.MAX_REPEAT, sre.MIN_REPEAT, sre.POSSESSIVE_REPEAT):
        return max([1, *(_branch_width(i) for i in av[2].data)])
    return 1


def _member(item: tuple[Any, Any], parsed: Any) -> str:
    """A character the one-character item accepts ('' if none in the pool)."""
    compiled = sre_compile.compile(sre_parse.SubPattern(parsed.state, [item]), parsed.state.flags)
    for c in _POOL:
        if compiled.fullmatch(c):
            return c
    return ""


def _first_char(item: tuple[Any, Any], parsed: Any, branch: int) -> str:
    op, av = item
    if op in (sre.MAX_REPEAT, sre.MIN_REPEAT, sre.POSSESSIVE_REPEAT):
        inner = list(av[2].data)
        return _first_char(inner[0], parsed, branch) if len(inner) == 1 else ""
    if op in (sre.LITERAL, sre.NOT_LITERAL, sre.IN, sre.ANY):
        return _member(item, parsed)
    return ""


def _sample(item: tuple[Any, Any], parsed: Any, branch: int, run: int) -> str:
    """Text the item matches: each repetition ``run`` times (at least its minimum, at most
    its maximum), the ``branch``-th alternative of each alternation."""
    op, av = item
    if op in (sre.LITERAL, sre.NOT_LITERAL, sre.IN, sre.ANY):
        return _member(item, parsed)
    if op in (sre.MAX_REPEAT, sre.MIN_REPEAT, sre.POSSESSIVE_REPEAT):
        lo, hi, sub = av
        count = min(max(lo, run), hi)
        return "".join(_sample(i, parsed, branch, run) for i in sub.data) * count
    if op is sre.SUBPATTERN:
        return "".join(_sample(i, parsed, branch, run) for i in av[-1].data)
    if op is sre.ATOMIC_GROUP:
        return "".join(_sample(i, parsed, branch, run) for i in av.data)
    if op is sre.BRANCH:
        alternatives = av[1]
        chosen = alternatives[branch % len(alternatives)]
        return "".join(_sample(i, parsed, branch, run) for i in chosen.data)
    return ""  # anchors, look-arounds, group references: no text of their own

"""The privacy scrub, run on everything before it is stored: ``<private>…</private>``
becomes ``[REDACTED]``, then credentials become ``[REDACTED:<kind>]`` (``secrets``).

This is the only module that knows the tag. Rules: the tag is matched case-insensitively
(and tolerates whitespace inside the angle brackets), nested tags redact as one span
(the outermost wins), an unclosed tag redacts to the end of the string, and a stray
closing tag is left alone. ``scrub`` walks any JSON-like value: strings, list items, dict
values and dict keys at any depth.

The credential scan costs tens of µs a string whatever its length (a few dozen rules, each
called once), and an event has many short strings: ``scrub`` scans them joined, and goes
down into a list or dict only where its joined strings hold a match, so a request with no
credential is scanned once (every rule still matches in the joined text, so the joined
scan misses nothing a string-by-string one would find: ``tests/test_secrets.py``).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from typing import Any

from wakemark.shared import secrets
from wakemark.shared.models import MemoryRecord

REDACTED = "[REDACTED]"

# ASCII-only case folding, so the cheap ``"private" in text.lower()`` pre-check below is
# exactly as wide as the pattern (Unicode folding would also match e.g. a dotless ı).
_TAG = re.compile(r"<\s*(/?)\s*private\s*>", re.IGNORECASE | re.ASCII)


def scrub_text(text: str) -> str:
    return secrets.redact(_scrub_tags(text))


def _scrub_tags(text: str) -> str:
    # Cheap pre-check: nearly every string has no tag, and this keeps ingest fast.
    if "<" not in text or "private" not in text.lower():
        return text
    out: list[str] = []
    depth = 0
    cursor = 0  # end of the text already copied to ``out``
    for match in _TAG.finditer(text):
        closing = match.group(1) == "/"
        if not closing:
            if depth == 0:
                out.append(text[cursor : match.start()])
            depth += 1
        elif depth > 0:
            depth -= 1
            if depth == 0:
                out.append(REDACTED)
                cursor = match.end()
        # A closing tag at depth 0 is stray: it stays as ordinary text.
    if depth > 0:
        # Unclosed: everything from the outermost opening tag to the end is private.
        out.append(REDACTED)
        return "".join(out)
    out.append(text[cursor:])
    return "".join(out)


def scrub(value: Any) -> Any:
    """A copy of a JSON-like value with every string scrubbed (keys included)."""
    return _redact_secrets(_walk(value, _scrub_tags))


def _redact_secrets(value: Any) -> Any:
    """Descends only into the parts whose strings, joined, hold a credential."""
    if not secrets.any_secret("\n".join(_strings(value))):
        return value
    if isinstance(value, str):
        return secrets.redact(value)
    if isinstance(value, dict):
        out = {}
        for k, v in value.items():
            if isinstance(k, str) and secrets.any_secret(k):
                k = secrets.redact(k)
            out[k] = _redact_secrets(v)
        return out
    return [_redact_secrets(v) for v in value]


RECORD_TEXT = ("title", "summary", "facts", "concepts", "files_touched")


def scrub_record(record: MemoryRecord) -> MemoryRecord:
    """The record with its text fields scrubbed (the same object if nothing changed)."""
    text = {name: getattr(record, name) for name in RECORD_TEXT}
    clean = scrub(text)
    return record if clean == text else record.model_copy(update=clean)


def _walk(value: Any, fn: Callable[[str], str]) -> Any:
    if isinstance(value, str):
        return fn(value)
    if isinstance(value, dict):
        return {(fn(k) if isinstance(k, str) else k): _walk(v, fn) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_walk(v, fn) for v in value]
    return value


def _strings(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for k, v in value.items():
            if isinstance(k, str):
                yield k
            yield from _strings(v)
    elif isinstance(value, list | tuple):
        for v in value:
            yield from _strings(v)

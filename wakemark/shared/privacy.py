"""The privacy scrub, run on everything before it is stored: ``<private>…</private>``
becomes ``[REDACTED]``, a string whose JSON key names a secret becomes
``[REDACTED:secret-assignment]``, then credentials in any string become
``[REDACTED:<kind>]`` (``secrets``).

This is the only module that knows the tag. Rules: the tag is matched case-insensitively
(and tolerates whitespace inside the angle brackets), nested tags redact as one span
(the outermost wins), an unclosed tag redacts to the end of the string, and a stray
closing tag is left alone. ``scrub`` walks any JSON-like value: strings, list items, dict
values and dict keys at any depth.

A value's strings are scanned for credentials together (``secrets.redact_each``): each
rule reads them joined once, and a rule that finds a credential reads each string once
more, alone; whatever the nesting, a body is read at most twice by any rule.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from wakemark.shared import secrets
from wakemark.shared.models import MemoryRecord

REDACTED = "[REDACTED]"

# ASCII-only case folding, so the cheap ``"private" in text.lower()`` pre-check below is
# exactly as wide as the pattern (Unicode folding would also match e.g. a dotless ı).
# Possessive: with ``\s*`` on both sides of an optional ``/``, a ``<`` before a long run
# of spaces was tried at every split of the run.
_TAG = re.compile(r"<\s*+(/?)\s*+private\s*>", re.IGNORECASE | re.ASCII)


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
    clean = _tags_and_fields(value)
    strings = _strings(clean, [])
    redacted = secrets.redact_each(strings)
    if all(a is b for a, b in zip(strings, redacted, strict=True)):
        return clean
    replacement = iter(redacted)
    return _walk(clean, lambda _: next(replacement))


SECRET_FIELD = "[REDACTED:secret-assignment]"


def _tags_and_fields(value: Any) -> Any:
    if isinstance(value, str):
        return _scrub_tags(value)
    if isinstance(value, dict):
        hidden = set(secrets.secret_fields(value))
        return {
            (_scrub_tags(k) if isinstance(k, str) else k): (
                SECRET_FIELD if k in hidden else _tags_and_fields(v)
            )
            for k, v in value.items()
        }
    if isinstance(value, list | tuple):
        return [_tags_and_fields(v) for v in value]
    return value


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


def _strings(value: Any, out: list[str]) -> list[str]:
    """Every string of ``value`` into ``out``, in ``_walk``'s order. Not a generator: a
    string at depth d would pass up through d nested ``yield from`` frames, so a body of
    small strings 60 levels deep cost ten times what a flat one does."""
    if isinstance(value, str):
        out.append(value)
    elif isinstance(value, dict):
        for k, v in value.items():
            if isinstance(k, str):
                out.append(k)
            _strings(v, out)
    elif isinstance(value, list | tuple):
        for v in value:
            _strings(v, out)
    return out

"""The privacy scrub: ``<private>…</private>`` becomes ``[REDACTED]`` before anything is stored.

This is the only module that knows the tag. Rules: the tag is matched case-insensitively
(and tolerates whitespace inside the angle brackets), nested tags redact as one span
(the outermost wins), an unclosed tag redacts to the end of the string, and a stray
closing tag is left alone. ``scrub`` walks any JSON-like value: strings, list items, dict
values and dict keys at any depth.
"""

from __future__ import annotations

import re
from typing import Any

REDACTED = "[REDACTED]"

# ASCII-only case folding, so the cheap ``"private" in text.lower()`` pre-check below is
# exactly as wide as the pattern (Unicode folding would also match e.g. a dotless ı).
_TAG = re.compile(r"<\s*(/?)\s*private\s*>", re.IGNORECASE | re.ASCII)


def scrub_text(text: str) -> str:
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


def may_contain_tag(raw_json: bytes) -> bool:
    """False only if no string decoded from this JSON text can hold a tag: the letters of
    the tag appear neither literally (any case) nor as ``\\u00XX`` escapes. Lets ingest
    skip the walk for the common request while staying exact."""
    return b"\\u00" in raw_json or b"private" in raw_json.lower()


def scrub(value: Any) -> Any:
    """A copy of a JSON-like value with every string scrubbed (keys included)."""
    if isinstance(value, str):
        return scrub_text(value)
    if isinstance(value, dict):
        return {(scrub_text(k) if isinstance(k, str) else k): scrub(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [scrub(v) for v in value]
    return value

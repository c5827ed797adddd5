"""Plain-text helpers for extraction: body text, sentences, trimming."""

from __future__ import annotations

import json
import re
from typing import Any

from wakemark.shared.models import JsonBody, MessageBody, TextBody

_WS = re.compile(r"\s+")
_SENTENCE_END = re.compile(r"[.!?](?=\s|$)")
_TEXT_KEYS = (
    "prompt",
    "last_assistant_message",
    "content",
    "text",
    "message",
    "summary",
    "note",
    "response",
    "output",
)


def collapse(text: str) -> str:
    return _WS.sub(" ", text).strip()


def clip(text: str, limit: int) -> str:
    """Cut at a word boundary with an ellipsis when ``text`` is longer than ``limit``."""
    if len(text) <= limit:
        return text
    cut = text[: limit - 1]
    space = cut.rfind(" ")
    if space > limit // 2:
        cut = cut[:space]
    return cut.rstrip(" ,;:-") + "…"


def first_sentence(text: str, limit: int = 200) -> str:
    """The first sentence of the first non-empty line, whitespace collapsed, ≤ ``limit``."""
    for line in text.splitlines():
        line = collapse(line)
        if line:
            match = _SENTENCE_END.search(line)
            if match:
                line = line[: match.end()]
            return clip(line, limit)
    return ""


def trim_to_sentence(text: str, limit: int) -> str:
    """``text`` stripped; if longer than ``limit``, cut at the last sentence end that fits
    (or at a word boundary when no sentence ends in the second half)."""
    text = text.strip()
    if len(text) <= limit:
        return text
    head = text[:limit]
    ends = [m.end() for m in _SENTENCE_END.finditer(head)]
    if ends and ends[-1] > limit // 2:
        return head[: ends[-1]]
    return clip(text, limit)


def body_text(body: TextBody | MessageBody | JsonBody, role: str | None = None) -> str:
    """The human text of a body: ``text`` content, the last ``role`` turn of a message
    (or the last turn), or a well-known text field of a json body."""
    if isinstance(body, TextBody):
        return body.content
    if isinstance(body, MessageBody):
        turns = [t for t in body.turns if role is None or t.role == role] or body.turns
        return turns[-1].content
    return json_text(body.data)


def json_text(data: dict[str, Any]) -> str:
    for key in _TEXT_KEYS:
        value = data.get(key)
        if isinstance(value, str) and value.strip():
            return value
    return ""


def as_text(value: Any, limit: int = 20_000) -> str:
    """Any json value as text (strings verbatim, the rest serialized), capped."""
    if value is None:
        return ""
    if isinstance(value, str):
        return value[:limit]
    try:
        return json.dumps(value, ensure_ascii=False, default=str)[:limit]
    except (TypeError, ValueError):
        return str(value)[:limit]

"""Turn a prompt (event, body or plain text) into the query text a search runs on."""

from __future__ import annotations

import json
from typing import Any

from pydantic import BaseModel

# Longer prompts add nothing the lexical cap (32 terms) or the model's 256 tokens keep.
MAX_QUERY_CHARS = 4000


def query_text(source: Any) -> str:
    """``text`` verbatim, ``message`` its last turn, ``json`` its data serialized.

    Accepts an Event, a body model, a body dict or a string; anything else is "".
    """
    if isinstance(source, BaseModel):
        source = source.model_dump(mode="json")
    if isinstance(source, dict) and "body" in source and "type" not in source:
        source = source["body"]
    if isinstance(source, str):
        text = source
    elif isinstance(source, dict):
        text = _body_text(source)
    else:
        text = ""
    return text.strip()[:MAX_QUERY_CHARS]


def _body_text(body: dict[str, Any]) -> str:
    kind = body.get("type")
    if kind == "text":
        content = body.get("content")
        return content if isinstance(content, str) else ""
    if kind == "message":
        turns = body.get("turns") or []
        last = turns[-1] if isinstance(turns, list) and turns else {}
        content = last.get("content") if isinstance(last, dict) else None
        return content if isinstance(content, str) else ""
    if kind == "json":
        data = body.get("data")
        return json.dumps(data, ensure_ascii=False, sort_keys=True) if data else ""
    return ""

"""Turn a prompt (event, body or plain text) into the query text a search runs on."""

from __future__ import annotations

import json
import re
from typing import Any, TypeAlias

from pydantic import BaseModel

# What a search may be asked with: an Event, an event body (model or dict), or plain text.
QuerySource: TypeAlias = "str | BaseModel | dict[str, Any]"

# Longer prompts add nothing the lexical cap (32 terms) or the model's 256 tokens keep.
MAX_QUERY_CHARS = 4000

# Han, Hiragana, Katakana (with the prolonged sound mark) and Hangul: scripts written
# without spaces, where a word index sees a whole sentence as one token.
CJK_RUN = re.compile(
    "[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\u3040-\u30ff\u31f0-\u31ff"
    "\u1100-\u11ff\u3130-\u318f\uac00-\ud7af]+"
)


def has_cjk(text: str) -> bool:
    return CJK_RUN.search(text) is not None


def cjk_bigrams(text: str) -> list[str]:
    """Each run of CJK characters as its two-character pieces, in order, deduplicated."""
    # Two characters is the common length of a Chinese word and the shortest that says
    # something; a run of one is itself.
    out: dict[str, None] = {}
    for run in CJK_RUN.findall(text):
        for i in range(max(len(run) - 1, 1)):
            out.setdefault(run[i : i + 2], None)
    return list(out)


# A word, its possessive ("Kate's") apart; a sentence's end (after which a capital is not
# a name).
_WORD = re.compile(r"(\w+(?:[.\-]\w+)*)(?:['\u2019]s?)?|([.!?])(?!\S)")


def topic_text(text: str, stopwords: frozenset[str]) -> str:
    """The query without its names and function words ("What movies did Paola watch?" ->
    "movies watch"), or "" when it names no one (or nothing else is left).

    A name is a capitalised word of letters (``Paola``; not ``RuntimeError``, ``HTTP``,
    ``Request.form`` or ``I``) that does not open a sentence: a guess, and a code query's
    ``Flask`` is one too."""
    kept: list[str] = []
    named = False
    first = True
    for word, end in _WORD.findall(text):
        if end:
            first = True
            continue
        if not first and word.isalpha() and word[0].isupper() and word[1:].islower():
            named = True
        elif word.lower() not in stopwords:
            kept.append(word)
        first = False
    return " ".join(kept) if named else ""


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

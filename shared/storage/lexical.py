"""Turning user text into safe full-text and LIKE queries (shared by both backends)."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence

MAX_TERMS = 32

# \w keeps identifiers whole (foo_bar, parse_args); dots, slashes and dashes split file
# names and paths into their parts (src/app/config.py -> src, app, config, py).
_WORD = re.compile(r"\w+")
# A token needs at least one letter or digit: "___" would be an empty phrase.
_ALNUM = re.compile(r"[^\W_]")

DocFreq = Callable[[Sequence[str]], Mapping[str, int]]


def encodable(text: str) -> str:
    """The text without lone surrogates (JSON ``"\\ud800"``), which no driver can encode."""
    return text.encode("utf-8", "ignore").decode("utf-8")


def tokenize(text: str) -> list[str]:
    """Lowercased word tokens, deduplicated in first-seen order, 1-char tokens dropped."""
    seen: dict[str, None] = {}
    for token in _WORD.findall(text.lower()):
        if len(token) > 1 and _ALNUM.search(token):
            seen.setdefault(token, None)
    return list(seen)


def select_terms(tokens: Sequence[str], doc_freq: DocFreq, max_terms: int = MAX_TERMS) -> list[str]:
    """At most ``max_terms`` tokens, the rarest (highest IDF) kept, in query order.

    ``doc_freq`` maps tokens to their document frequency in the index; a token it does
    not know counts as 0 (rarest). It is only consulted when there are too many tokens.
    """
    if len(tokens) <= max_terms:
        return list(tokens)
    freq = doc_freq(tokens)
    order = {t: i for i, t in enumerate(tokens)}
    keep = sorted(tokens, key=lambda t: (freq.get(t, 0), order[t]))[:max_terms]
    return sorted(keep, key=order.__getitem__)


def quote_term(term: str) -> str:
    return '"' + term.replace('"', '""') + '"'


def or_query(terms: Sequence[str]) -> str:
    """Each term quoted (so no operator survives), OR-joined: FTS5 MATCH syntax."""
    return " OR ".join(quote_term(t) for t in terms)


def escape_like(text: str) -> str:
    """Escape ``\\``, ``%`` and ``_`` for ``LIKE ... ESCAPE '\\'``."""
    return text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")


def substring_pattern(text: str) -> str | None:
    """``%text%`` for the substring fallback; None when nothing is left to match.

    NUL is dropped: Postgres text cannot hold it and no stored text contains it.
    """
    needle = text.replace("\x00", "").strip()
    return "%" + escape_like(needle) + "%" if needle else None


def namespace_pattern(namespace: str | None) -> str:
    """The LIKE pattern of a namespace or actor prefix; None means every namespace."""
    if namespace is None:
        return "%"
    if not namespace.endswith("/"):
        raise ValueError(f"namespace prefix must end in '/': {namespace!r}")
    return escape_like(namespace) + "%"

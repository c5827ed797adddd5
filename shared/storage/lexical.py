"""Turning user text into safe full-text and LIKE queries (shared by both backends)."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from typing import TypeVar

MAX_TERMS = 32
# Above this share of the documents BM25 clamps a term's IDF to ~0 (log((N-n)/n) <= 0).
COMMON_FRACTION = 0.5

# \w keeps identifiers whole (foo_bar, parse_args); dots, slashes and dashes split file
# names and paths into their parts (src/app/config.py -> src, app, config, py).
_WORD = re.compile(r"\w+")
# A token needs at least one letter or digit: "___" would be an empty phrase.
_ALNUM = re.compile(r"[^\W_]")

T = TypeVar("T")
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


def select_terms(
    tokens: Sequence[str],
    doc_freq: DocFreq,
    max_terms: int = MAX_TERMS,
    total: int | None = None,
    common: float = COMMON_FRACTION,
) -> list[str]:
    """At most ``max_terms`` tokens, the rarest (highest IDF) kept, in query order.

    ``doc_freq`` maps tokens to their document frequency in the index; a token it does
    not know counts as 0 (rarest) for the cap, and as rare but present for pruning. Given
    the index's document count ``total``, a token in more than ``common`` of the documents
    is dropped as long as a rarer one remains: BM25 weighs such a term (near) zero, yet
    matching it means ranking almost every row.
    """
    if not tokens or (total is None and len(tokens) <= max_terms):
        return list(tokens)
    freq = doc_freq(tokens)
    if total is not None:
        # Only a rarer token that matches something (or whose frequency is unknown) may
        # stand in for the common ones.
        rare = [t for t in tokens if freq.get(t, 1) <= common * total]
        if any(freq.get(t, 1) > 0 for t in rare):
            tokens = rare
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


def namespace_range(namespace: str | None) -> dict[str, str]:
    """``{"ns_lo", "ns_hi"}``: the names starting with ``namespace`` (a prefix ending in
    '/') are exactly those in [ns_lo, ns_hi) in code point order, since '0' follows '/';
    None means every namespace (each starts with '/')."""
    prefix = "/" if namespace is None else namespace
    if not prefix.endswith("/"):
        raise ValueError(f"namespace prefix must end in '/': {namespace!r}")
    return {"ns_lo": prefix, "ns_hi": prefix[:-1] + "0"}


def fill(
    best: list[T], more: Callable[[], list[T]], key: Callable[[T], str], limit: int
) -> list[T]:
    """``best`` (the hits of the rarer terms), topped up to ``limit`` from ``more()`` (the
    hits of all terms) when short: common terms weigh ~0, so their hits rank after."""
    if len(best) >= limit:
        return best
    seen = {key(b) for b in best}
    return best + [m for m in more() if key(m) not in seen][: limit - len(best)]

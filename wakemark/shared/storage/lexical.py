"""Primitives for turning user text into safe full-text and LIKE queries (shared by both
backends): tokens, quoting, escaping, namespace ranges. Which terms a search asks for is
retrieval's (``wakemark.shared.retrieval.lexical``)."""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from wakemark.shared.models import MemoryRecord

# \w keeps identifiers whole (foo_bar, parse_args); dots, slashes and dashes split file
# names and paths into their parts (src/app/config.py -> src, app, config, py).
_WORD = re.compile(r"\w+")
# A token needs at least one letter or digit: "___" would be an empty phrase.
_ALNUM = re.compile(r"[^\W_]")
# A trigram index serves a substring of three characters or more; a shorter fragment
# scans the namespace's rows instead (a CJK bigram is the common case).
TRIGRAM_CHARS = 3
# Per fragment, only its newest matches are counted: a fragment in every record would
# otherwise read them all.
FRAGMENT_WINDOW = 200
# ... of its first matches in the index's order: sorting every match of a common fragment
# by age took seconds on a 200k-record namespace (bench/results/scale.md). A namespace
# with fewer matches than this gets exactly its newest.
FRAGMENT_CANDIDATES = 4 * FRAGMENT_WINDOW
# A substring no index serves is looked for in this many of the namespace's newest rows.
SUBSTRING_ROWS = 20_000


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


def rank_fragments(found: Iterable[Sequence[MemoryRecord]], limit: int) -> list[MemoryRecord]:
    """Each fragment's matches merged: records holding more fragments first, then newest
    (then by id, so the order is stable)."""
    counts: dict[str, int] = {}
    records: dict[str, MemoryRecord] = {}
    for matches in found:
        for record in {r.record_id: r for r in matches}.values():
            counts[record.record_id] = counts.get(record.record_id, 0) + 1
            records[record.record_id] = record
    order = sorted(
        records.values(),
        key=lambda r: (-counts[r.record_id], -r.created_at.timestamp(), r.record_id),
    )
    return order[: max(limit, 0)]

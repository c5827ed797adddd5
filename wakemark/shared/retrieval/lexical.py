"""The lexical search: which of a query's terms to search for, over storage's full-text
primitives, and the substring match when the engine refuses them.

Storage knows how to tokenize, quote and escape (``wakemark.shared.storage.lexical``) and
runs the queries; the rules of what to ask for live here.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, TypeVar

from wakemark.shared.storage import Match, SearchQuery
from wakemark.shared.storage.lexical import encodable, tokenize

if TYPE_CHECKING:
    from wakemark.shared.models import MemoryRecord
    from wakemark.shared.storage import Search

MAX_TERMS = 32
# Above this share of the documents BM25 clamps a term's IDF to ~0 (log((N-n)/n) <= 0).
COMMON_FRACTION = 0.5

T = TypeVar("T")
DocFreq = Callable[[Sequence[str]], Mapping[str, int]]


@dataclass(frozen=True)
class LexicalHit:
    record_id: str
    created_ts: float  # seconds since the Unix epoch
    record: MemoryRecord | None  # None past the first ``read`` hits, if the search skipped it
    rank: int  # 0-based position in the lexical ranking


def search_lexical(
    storage: Search,
    namespace: str,
    query: str,
    limit: int,
    observation_type: str | None = None,
    since: datetime | None = None,
    timeout_s: float | None = None,
    read: int | None = None,
) -> list[LexicalHit]:
    """Never raises on user text: full-text first (best rank first) on the rarest terms,
    topped up from all of them; if the engine refuses, escaped substring match (newest
    first). Past ``timeout_s`` seconds in all, ``StorageTimeoutError``. The first ``read``
    hits (all if None) carry their record (``Search.search_terms``)."""
    query = encodable(query)
    end = None if timeout_s is None else time.monotonic() + timeout_s

    def left() -> float | None:
        return None if end is None else end - time.monotonic()

    found = _full_text(storage, namespace, query, limit, observation_type, since, left, read)
    if found is None:
        where = SearchQuery(namespace, limit, observation_type, since, left())
        found = [Match.of(r) for r in storage.search_substring(where, query)]
    return [LexicalHit(m.record_id, m.created_ts, m.record, rank) for rank, m in enumerate(found)]


def _full_text(
    storage: Search,
    namespace: str,
    query: str,
    limit: int,
    observation_type: str | None,
    since: datetime | None,
    left: Callable[[], float | None],
    read: int | None,
) -> list[Match] | None:
    tokens = tokenize(query)
    stats = storage.term_stats(tokens) if tokens else None
    if stats is None:
        return None

    def doc_freq(_: Sequence[str]) -> Mapping[str, int]:
        return stats.doc_freq

    def search(terms: list[str], read: int | None) -> list[Match] | None:
        where = SearchQuery(namespace, limit, observation_type, since, left())
        return storage.search_terms(where, terms, stats=stats, read=read)

    best_terms = select_terms(tokens, doc_freq, total=stats.total)
    best = search(best_terms, read)
    every = select_terms(tokens, doc_freq)
    if best is None or every == best_terms or len(best) >= limit:
        return best
    # A hit of ``more`` filling position p is at most p-th in it: within ``read`` there too.
    more = search(every, read)
    if more is None:
        return None
    return fill(best, lambda: more, lambda r: r.record_id, limit)


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


def fill(
    best: list[T], more: Callable[[], list[T]], key: Callable[[T], str], limit: int
) -> list[T]:
    """``best`` (the hits of the rarer terms), topped up to ``limit`` from ``more()`` (the
    hits of all terms) when short: common terms weigh ~0, so their hits rank after."""
    if len(best) >= limit:
        return best
    seen = {key(b) for b in best}
    return best + [m for m in more() if key(m) not in seen][: limit - len(best)]

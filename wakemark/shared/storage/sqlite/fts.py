"""SQLite full-text search: namespace-scoped MATCH, common-term pruning, bounded ranking."""

from __future__ import annotations

import sqlite3
import threading
import time
from collections.abc import Sequence
from typing import Any

from wakemark.shared.storage import lexical, lexicon
from wakemark.shared.storage.lexicon import has_scope, stems

# FTS5's bm25() first counts, per query phrase, every document holding it, then scores each
# match: with common terms that is the whole index. Only the newest WINDOW matches are
# ranked; a search that comes back short (filters, a prefix without scope token) reruns
# unbounded, so a result is never missing rows that exist.
WINDOW = lexicon.WINDOW
TOTAL_TTL_S = 1.0  # the document count is re-read at most once a second

STEM_DF = "SELECT doc FROM memory_fts_vocab WHERE term = ?"
DOC_COUNT = "SELECT count(*) FROM memory_records"
# Whether a record lies outside the namespace range: two probes of memory_by_namespace.
OUTSIDE = """
SELECT EXISTS (SELECT 1 FROM memory_records WHERE namespace < :ns_lo)
    OR EXISTS (SELECT 1 FROM memory_records WHERE namespace >= :ns_hi)
"""
WINDOW_START = """
SELECT rowid FROM memory_fts WHERE memory_fts MATCH :match
ORDER BY rowid DESC LIMIT 1 OFFSET :window
"""


def scope(conn: sqlite3.Connection, namespace: str) -> tuple[str, bool]:
    """The MATCH prefix restricting a search to ``namespace``, and whether the MATCH alone
    is then exact (no record of another namespace can match it).

    No prefix when no record lies outside the namespace: a scope phrase holding every
    document only costs bm25 a walk of its doclist. Otherwise the scope token of a full
    namespace or an actor prefix (the forms migration 0002 indexes); any other prefix has
    none, and the namespace is then checked against the records.
    """
    if not conn.execute(OUTSIDE, lexical.namespace_range(namespace)).fetchone()[0]:
        return "", True
    if not has_scope(namespace):
        return "", False
    kind = "ns" if lexicon.FULL_NAMESPACE.fullmatch(namespace) else "na"
    return f'scope : "{kind}{namespace.encode().hex()}" AND ', True


class DocFreqs:
    """Document frequency per query token, from the FTS5 vocabulary of its stem.

    fts5vocab counts a term by walking its whole doclist, so stems are cached and the
    cache is dropped when the index grew or shrank by an eighth: a stale frequency only
    shifts which terms count as common.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._df: dict[str, int] = {}
        self._baseline = 0  # the document count when the frequencies were last dropped
        self._total = 0
        self._counted_at = -TOTAL_TTL_S

    def total(self, conn: sqlite3.Connection) -> int:
        """The document count, re-counted at most every ``TOTAL_TTL_S`` (counting walks an
        index of every record)."""
        now = time.monotonic()
        with self._lock:
            if now - self._counted_at < TOTAL_TTL_S:
                return self._total
        total = int(conn.execute(DOC_COUNT).fetchone()[0])
        with self._lock:
            if abs(total - self._baseline) * 8 > self._baseline:
                self._df.clear()
                self._baseline = total
            self._total, self._counted_at = total, now
        return total

    def lookup(self, conn: sqlite3.Connection, tokens: Sequence[str]) -> dict[str, int]:
        """Tokens the index splits into several stems (``foo_bar``) are left out: their
        phrase may be rare however common its parts, so they count as rarest."""
        out = {}
        for token, parts in stems(conn, tokens).items():
            if len(parts) == 1:
                out[token] = self._stem_df(conn, parts[0])
        return out

    def _stem_df(self, conn: sqlite3.Connection, stem: str) -> int:
        with self._lock:
            df = self._df.get(stem)
        if df is None:
            row = conn.execute(STEM_DF, (stem,)).fetchone()
            df = int(row[0]) if row else 0
            with self._lock:
                self._df[stem] = df
        return df


def ranked(
    conn: sqlite3.Connection, sql: str, params: dict[str, Any], match: str
) -> list[tuple[int, float]]:
    """``(rowid, bm25)`` best first, for ``sql`` (bound to ``:match``, ``:after`` and
    ``:limit``): at least ``params["limit"]`` rows when there are that many, plus every row
    tied with the last, so the caller can break ties on columns the index lacks. Only the
    newest ``WINDOW`` matches are ranked when there are more; unbounded again if that came
    back short."""
    limit = int(params["limit"])
    start = conn.execute(WINDOW_START, {"match": match, "window": max(WINDOW, limit)}).fetchone()
    found = _with_ties(conn, sql, params, match, start[0] if start else 0)
    if start is not None and len(found) < limit:
        found = _with_ties(conn, sql, params, match, 0)
    return found


def _with_ties(
    conn: sqlite3.Connection, sql: str, params: dict[str, Any], match: str, after: int
) -> list[tuple[int, float]]:
    limit = max(int(params["limit"]), 1)
    n = 2 * limit  # rows past the limit, so that a tie at the limit rarely needs a rerun
    while True:
        bound = {**params, "match": match, "after": after, "limit": n}
        rows = [(int(r[0]), float(r[1])) for r in conn.execute(sql, bound)]
        if len(rows) < n or rows[-1][1] != rows[limit - 1][1]:
            return [r for r in rows if r[1] <= rows[limit - 1][1]] if len(rows) >= limit else rows
        n *= 4

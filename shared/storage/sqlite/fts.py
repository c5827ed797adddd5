"""SQLite full-text search: namespace-scoped MATCH, common-term pruning, bounded ranking."""

from __future__ import annotations

import re
import sqlite3
import threading
from collections.abc import Sequence
from typing import Any

from shared.storage import lexical

# FTS5's bm25() first counts, per query phrase, every document holding it, then scores each
# match: with common terms that is the whole index. Only the newest WINDOW matches are
# ranked; a search that comes back short (filters, a prefix without scope token) reruns
# unbounded, so a result is never missing rows that exist.
WINDOW = 2000
_FULL = re.compile(r"/actor/[^/]+/project/[^/]+/")
_ACTOR = re.compile(r"/actor/[^/]+/")

# The query's tokens as the index stems them: a scratch FTS5 table per connection (TEMP,
# so nothing is written to the database file) and its per-instance vocabulary.
_STEM_TABLES = (
    "CREATE VIRTUAL TABLE IF NOT EXISTS temp.engram_query USING fts5 "
    "(t, tokenize = 'porter unicode61 remove_diacritics 2', detail = none)",
    "CREATE VIRTUAL TABLE IF NOT EXISTS temp.engram_query_stems "
    "USING fts5vocab(temp, engram_query, instance)",
)
CLEAR_QUERY = "DELETE FROM temp.engram_query"
PUT_QUERY = "INSERT INTO temp.engram_query (rowid, t) VALUES (?, ?)"
QUERY_STEMS = "SELECT doc, term FROM temp.engram_query_stems"
STEM_DF = "SELECT doc FROM memory_fts_vocab WHERE term = ?"
DOC_COUNT = "SELECT count(*) FROM memory_records"
WINDOW_START = """
SELECT rowid FROM memory_fts WHERE memory_fts MATCH :match
ORDER BY rowid DESC LIMIT 1 OFFSET :window
"""


def scope_match(namespace: str, terms: Sequence[str]) -> str:
    """The MATCH of the OR of ``terms``, restricted by scope token when the namespace is
    a full one or an actor prefix (the forms migration 0002 indexes)."""
    query = lexical.or_query(terms)
    if _FULL.fullmatch(namespace):
        return f'scope : "ns{namespace.encode().hex()}" AND ({query})'
    if _ACTOR.fullmatch(namespace):
        return f'scope : "na{namespace.encode().hex()}" AND ({query})'
    return query


class DocFreqs:
    """Document frequency per query token, from the FTS5 vocabulary of its stem.

    fts5vocab counts a term by walking its whole doclist (~2 ms for a term in 50k rows),
    so stems are cached and the cache is dropped when the index grew or shrank by an
    eighth: a stale frequency only shifts which terms count as common.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._df: dict[str, int] = {}
        self._total = 0

    def total(self, conn: sqlite3.Connection) -> int:
        total = int(conn.execute(DOC_COUNT).fetchone()[0])
        with self._lock:
            if abs(total - self._total) * 8 > self._total:
                self._df.clear()
                self._total = total
        return total

    def lookup(self, conn: sqlite3.Connection, tokens: Sequence[str]) -> dict[str, int]:
        """Tokens the index splits into several stems (``foo_bar``) are left out: their
        phrase may be rare however common its parts, so they count as rarest."""
        stems = _stems(conn, tokens)
        out = {}
        for token, parts in stems.items():
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


def _stems(conn: sqlite3.Connection, tokens: Sequence[str]) -> dict[str, list[str]]:
    for sql in _STEM_TABLES:
        conn.execute(sql)
    conn.execute(CLEAR_QUERY)
    conn.executemany(PUT_QUERY, list(enumerate(tokens)))
    out: dict[str, list[str]] = {}
    for doc, term in conn.execute(QUERY_STEMS):
        out.setdefault(tokens[doc], []).append(term)
    return out


def search(
    conn: sqlite3.Connection, sql: str, params: dict[str, Any], match: str
) -> list[sqlite3.Row]:
    """Rows of ``sql`` (bound to ``:match`` and ``:after``), ranking only the newest
    ``WINDOW`` matches when there are more; unbounded again if that came back short."""
    limit = int(params["limit"])
    start = conn.execute(WINDOW_START, {"match": match, "window": max(WINDOW, limit)}).fetchone()
    rows = conn.execute(sql, {**params, "match": match, "after": start[0] if start else 0})
    found = rows.fetchall()
    if start is not None and len(found) < limit:
        found = conn.execute(sql, {**params, "match": match, "after": 0}).fetchall()
    return found

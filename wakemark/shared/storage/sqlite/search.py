"""Search of the SQLite backend."""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import replace
from typing import Any

import numpy as np

from wakemark.shared.models import MemoryRecord
from wakemark.shared.storage import lexical, lexicon
from wakemark.shared.storage.errors import StorageTimeoutError
from wakemark.shared.storage.lexicon import Index, Ranking
from wakemark.shared.storage.ports.search import Match, SearchQuery, TermStats, VectorHit
from wakemark.shared.storage.sqlite import codec, fts
from wakemark.shared.storage.sqlite.base import NS, R_NS, SqliteBase
from wakemark.shared.storage.sqlite.lexicon import current_seq
from wakemark.shared.storage.sqlite.records import RECORD_COLUMNS
from wakemark.shared.storage.sqlite.vectors import NO_VECTOR_INDEX

_FILTERS = """
AND (:observation_type IS NULL OR r.observation_type = :observation_type)
AND (:since IS NULL OR r.created_at >= :since)
"""

# bm25 is lower-is-better; column weights put title above summary above facts, and the
# scope column (namespace tokens, migration 0002) nowhere. :after bounds the ranked rows
# (wakemark.shared.storage.sqlite.fts). RANK_FTS ranks the index alone, for a MATCH that is exact
# for the namespace; RANK_FTS_CHECKED joins the records for the namespace test and filters.
_BM25 = "bm25(memory_fts, 4.0, 2.0, 1.0, 0.0)"

RANK_FTS = f"""
SELECT rowid, {_BM25} AS score FROM memory_fts
WHERE memory_fts MATCH :match AND rowid > :after
ORDER BY score LIMIT :limit
"""

RANK_FTS_CHECKED = f"""
SELECT memory_fts.rowid, {_BM25} AS score FROM memory_fts
JOIN memory_records r ON r.id = memory_fts.rowid
WHERE memory_fts MATCH :match AND memory_fts.rowid > :after AND {R_NS} {_FILTERS}
ORDER BY score LIMIT :limit
"""

# The ranked rows' records (the namespace tested again), with their index rowid.
RANKED_RECORDS = f"""
SELECT id, {RECORD_COLUMNS} FROM memory_records
WHERE id IN (SELECT value FROM json_each(:ids)) AND {NS}
"""

SEARCH_SUBSTRING = f"""
SELECT * FROM (
  SELECT r.* FROM memory_records r
  WHERE {R_NS} {_FILTERS}
  ORDER BY r.created_at DESC, r.record_id ASC
  LIMIT :scan) r
WHERE r.title LIKE :pattern ESCAPE '\\' OR r.summary LIKE :pattern ESCAPE '\\'
   OR r.facts_text LIKE :pattern ESCAPE '\\'
ORDER BY r.created_at DESC, r.record_id ASC
LIMIT :limit
"""

# One fragment of three characters or more, as a phrase of the trigram index (migration
# 0007; its tokenizer folds case): the newest of its first :candidates matches.
SEARCH_TRIGRAM = f"""
SELECT * FROM (
  SELECT r.* FROM memory_trgm JOIN memory_records r ON r.id = memory_trgm.rowid
  WHERE memory_trgm MATCH :match AND {R_NS} {_FILTERS}
  LIMIT :candidates) r
ORDER BY r.created_at DESC, r.record_id ASC
LIMIT :limit
"""


class SqliteSearch(SqliteBase):
    def memory_index(self, wait_s: float = 0.0) -> Index | None:
        """The full-text index held in memory if it is current, waiting up to ``wait_s``
        for it to be built or refreshed; None: FTS5 answers."""
        if self._lexicon is None:
            return None
        seq = current_seq(self._conns.get())
        return self._lexicon.current(lambda index: index.seq >= seq, wait_s)

    def warm_up(self) -> None:
        """Start building the full-text index held in memory."""
        self.memory_index()

    def term_stats(self, tokens: Sequence[str]) -> TermStats | None:
        conn = self._conns.get()
        try:
            # The index as last refreshed, unchecked (as Postgres'): the statistics only
            # choose which terms to search for; search_terms checks it.
            index = self._lexicon.latest if self._lexicon is not None else None
            if index is None:
                return TermStats(self._doc_freqs.lookup(conn, tokens), self._doc_freqs.total(conn))
            phrases = lexicon.phrases(conn, tokens)
            single = {t: p[0] for t, p in phrases.items() if len(p) == 1}
            return TermStats({t: index.doc_freq(s) for t, s in single.items()}, index.total)
        except sqlite3.OperationalError:
            return None

    def search_terms(
        self,
        query: SearchQuery,
        terms: Sequence[str],
        *,
        stats: TermStats,  # FTS5 ranks with its own
        read: int | None = None,
    ) -> list[Match] | None:
        params = _search_params(query)
        if not terms:
            return None
        conn = self._conns.get()
        with _bounded(conn, query.timeout_s, "full-text search"):
            try:
                index = self.memory_index()
                if index is not None:  # the same ranking, from the index held in memory
                    found = _ranked_in_memory(conn, index, query, terms)
                    if found is not None:
                        return _matches(_records_by_rank(conn, found, params), read)
                prefix, exact = fts.scope(conn, query.namespace)
                filtered = query.observation_type is not None or query.since is not None
                sql = RANK_FTS if exact and not filtered else RANK_FTS_CHECKED
                match = prefix + "(" + lexical.or_query(terms) + ")"
                rows = _records_by_rank(conn, fts.ranked(conn, sql, params, match), params)
            except sqlite3.OperationalError as exc:
                if str(exc) == INTERRUPTED:  # past the deadline, not a refused query
                    raise
                return None
        return _matches(rows, read)

    def search_substring(self, query: SearchQuery, text: str) -> list[MemoryRecord]:
        params = _search_params(query)
        pattern = lexical.substring_pattern(text)
        if pattern is None:
            return []
        with _bounded(self._conns.get(), query.timeout_s, "substring search"):
            rows = self._read(SEARCH_SUBSTRING, {**params, "pattern": pattern})
        return [codec.to_record(r) for r in rows]

    def search_fragments(self, query: SearchQuery, fragments: Sequence[str]) -> list[MemoryRecord]:
        window = max(lexical.FRAGMENT_WINDOW, query.limit)
        # Each fragment's own search: the newest ``window`` of it, bounded by this one.
        each = replace(query, limit=window, timeout_s=None)
        params = _search_params(each)
        params["candidates"] = max(lexical.FRAGMENT_CANDIDATES, window)
        found = []
        with _bounded(self._conns.get(), query.timeout_s, "fragment search"):
            for fragment in dict.fromkeys(lexical.encodable(f) for f in fragments):
                if len(fragment) >= lexical.TRIGRAM_CHARS:
                    match = lexical.quote_term(fragment)
                    rows = self._read(SEARCH_TRIGRAM, {**params, "match": match})
                    found.append([codec.to_record(r) for r in rows])
                elif fragment.strip():
                    found.append(self.search_substring(each, fragment))
        return lexical.rank_fragments(found, query.limit)

    def search_vector(
        self, query: SearchQuery, vector: np.ndarray, exact: bool = False, model: str | None = None
    ) -> list[VectorHit]:
        raise NotImplementedError(NO_VECTOR_INDEX)


def _ranked_in_memory(
    conn: sqlite3.Connection, index: Index, query: SearchQuery, terms: Sequence[str]
) -> list[tuple[int, float]] | None:
    """The index's ranking of ``terms``; None: a phrase it cannot count cheaply, ask FTS5."""
    phrases = lexicon.phrases(conn, terms)
    want = Ranking(query.namespace, query.limit, query.observation_type, query.since)
    try:
        found = index.ranked(conn, [phrases[t] for t in terms if t in phrases], want, fts.WINDOW)
    except lexicon.TooBroad:
        return None
    return list(zip(found.rowid.tolist(), found.bm25.tolist(), strict=True))


def _search_params(query: SearchQuery) -> dict[str, Any]:
    return {
        **lexical.namespace_range(query.namespace),
        "observation_type": query.observation_type,
        "since": codec.ts(query.since) if query.since else None,
        "limit": query.limit,
        "scan": lexical.SUBSTRING_ROWS,
    }


# SQLite calls the progress handler every this many virtual machine instructions.
PROGRESS_OPS = 10_000
INTERRUPTED = "interrupted"  # the OperationalError of a statement the handler stopped


@contextmanager
def _bounded(conn: sqlite3.Connection, timeout_s: float | None, what: str) -> Iterator[None]:
    """Interrupts the connection's statements past ``timeout_s`` (StorageTimeoutError).
    Inside another bound (the fragment search calls an unbounded substring search), the
    outer one holds."""
    if timeout_s is None:
        yield
        return
    end = time.monotonic() + timeout_s
    conn.set_progress_handler(lambda: time.monotonic() > end, PROGRESS_OPS)
    try:
        yield
    except sqlite3.OperationalError as exc:
        if str(exc) != INTERRUPTED:
            raise
        raise StorageTimeoutError(f"{what} past its deadline") from exc
    finally:
        conn.set_progress_handler(None, 0)


def _records_by_rank(
    conn: sqlite3.Connection, ranked: list[tuple[int, float]], params: dict[str, Any]
) -> list[sqlite3.Row]:
    """The records of ``(rowid, bm25)`` pairs ordered by (bm25, newest, record id), the
    first ``params["limit"]``; a record deleted (or moved) since it was ranked drops out."""
    score = dict(ranked)
    ids = json.dumps(list(score))
    bounds = {"ns_lo": params["ns_lo"], "ns_hi": params["ns_hi"]}
    rows = conn.execute(RANKED_RECORDS, {"ids": ids, **bounds}).fetchall()
    rows.sort(key=_rid)
    rows.sort(key=lambda r: r["created_at"], reverse=True)
    rows.sort(key=lambda r: score[r["id"]])
    return rows[: int(params["limit"])]


def _matches(rows: list[sqlite3.Row], read: int | None) -> list[Match]:
    """The rows as matches, the first ``read`` (all if None) with their record."""
    return [
        Match.of(codec.to_record(r))
        if read is None or i < read
        else Match(r["record_id"], codec.from_ts(r["created_at"]).timestamp())
        for i, r in enumerate(rows)
    ]


def _rid(row: sqlite3.Row) -> str:
    return str(row["record_id"])

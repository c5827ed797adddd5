"""Search of the Postgres backend."""

from __future__ import annotations

import contextlib
import logging
import time
import weakref
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from typing import Any

import numpy as np
import psycopg

from wakemark.shared.models import NAMESPACE_RE, MemoryRecord
from wakemark.shared.storage import lexical
from wakemark.shared.storage.errors import StorageTimeoutError
from wakemark.shared.storage.ports.search import Match, SearchQuery, TermStats, VectorHit
from wakemark.shared.storage.postgres import bm25, lexicon
from wakemark.shared.storage.postgres.base import (
    NS,
    PostgresBase,
)
from wakemark.shared.storage.postgres.records import RECORD_COLUMNS
from wakemark.shared.storage.postgres.rows import (
    check_vector,
    memory_record,
)

log = logging.getLogger(__name__)

# The records the index held in the process ranked (a record moved out of the namespace
# since drops out), and in the same statement (one snapshot) its check
# (``lexicon.CHECK``): its two columns first, then the record's, a row per record (one
# row of NULLs if none). The records are found by id alone (``namespace || ''`` is no
# column an index holds): the planner takes a small project's rows for one or two, and
# would otherwise read every one of them through the namespace's index.
CHECKED_RECORDS = f"""
SELECT c.*, r.* FROM ({lexicon.CHECK}) c LEFT JOIN LATERAL (
  SELECT {RECORD_COLUMNS} FROM memory_records
   WHERE record_id = ANY(%(ids)s) AND (namespace || '') {NS}) r ON true
"""
# It is prepared once per connection (``_checked_records``) and run with a generic plan:
# planning it took longer than running it, and each of its steps is an index lookup
# whatever the parameters.
_CHECKED = "wakemark_checked_records"
PREPARE_CHECKED = f"PREPARE {_CHECKED} (bigint, int, text[], text) AS " + CHECKED_RECORDS % {
    "seq": "$1", "most": "$2", "ids": "$3", "ns": "$4"
}  # fmt: skip
EXECUTE_CHECKED = f"EXECUTE {_CHECKED} (%(seq)s, %(most)s, %(ids)s, %(ns)s)"
GENERIC_PLAN = {"plan_cache_mode": "force_generic_plan"}
_prepared: weakref.WeakSet[psycopg.Connection] = weakref.WeakSet()

# Per query token: its document frequency, via the lexemes Postgres makes of it (a token
# that is only stop words can never match, so it sorts as the most common and is dropped
# first); the document count; and the token's tsquery (plainto_tsquery: no operator in
# user text survives; '' for stop words only), which the search ORs client-side.
QUERY_TERMS = """
SELECT t.token,
       CASE WHEN count(l.lexeme) = 0 THEN 2147483647 ELSE min(coalesce(d.df, 0)) END,
       (SELECT n FROM fts_doc_count WHERE id = 1),
       plainto_tsquery('english', wakemark_fts_text(t.token))::text
  FROM unnest(%s::text[]) AS t(token)
  LEFT JOIN LATERAL unnest(tsvector_to_array(to_tsvector('english', wakemark_fts_text(t.token))))
       AS l(lexeme) ON true
  LEFT JOIN lexeme_df d ON d.lexeme = l.lexeme
 GROUP BY t.token
"""

# The tsquery of terms term_stats was not asked about.
TERM_TSQUERIES = """
SELECT t, plainto_tsquery('english', wakemark_fts_text(t))::text FROM unnest(%s::text[]) AS u(t)
"""

# Tokens whose tsquery is kept (it depends on the token and the built-in configuration
# only, so it never goes stale); past this many the cache starts over.
TSQUERY_CACHE = 50_000
_tsqueries: dict[str, str] = {}

# Ranks the newest %(window)s matches only (all of them when there are fewer), in
# memory_fts. Keyed by "one full namespace": then the statement says only namespace = ...,
# so the planner's row estimate holds (with the prefix LIKE beside it, it multiplied the
# two selectivities and expected 1/5 of a 200k namespace's matches, so it read and sorted
# all 30k matches of a mid-frequency term where walking 13k rows would do: 80 vs 15 ms).
# Common terms are walked newest first through memory_fts_namespace_recent, the walk
# stopping at the window; rarer ones come from memory_fts_namespace_tsv, which holds the
# namespace beside each lexeme, so the bitmap is the namespace's matches only. The rank is
# computed before the window's sort, which then holds no tsvector and stays small.
# ts_rank weights are {D, C, B, A}: title (A) counts most, facts (C) least. Only the
# ranked rows are read from memory_records.
SEARCH_FTS = {
    exact: f"""
SELECT {RECORD_COLUMNS} FROM memory_records JOIN (
  SELECT record_id, rank
    FROM (SELECT record_id, created_at,
                 ts_rank('{{0.1, 0.2, 0.4, 1.0}}', tsv, %(tsquery)s::tsquery) AS rank
            FROM memory_fts
           WHERE tsv @@ %(tsquery)s::tsquery
             AND {"namespace = %(exact)s" if exact else "namespace " + NS}
             AND (%(type)s::text IS NULL OR observation_type = %(type)s)
             AND (%(since)s::timestamptz IS NULL OR created_at >= %(since)s)
           ORDER BY created_at DESC, record_id DESC
           LIMIT %(window)s) recent
   ORDER BY rank DESC, created_at DESC, record_id
   LIMIT %(limit)s
) ranked USING (record_id)
 ORDER BY ranked.rank DESC, created_at DESC, record_id
"""
    for exact in (False, True)
}

# The namespace's newest rows holding any of the patterns. The equality on one project's
# namespace lets memory_records_namespace_recent hand them out in order (with the prefix
# alone the planner read and sorted the whole project: 0.5 s at 200k).
SEARCH_SUBSTRING = f"""
SELECT * FROM (
  SELECT {RECORD_COLUMNS} FROM memory_records
   WHERE namespace {NS} AND (%(exact)s::text IS NULL OR namespace = %(exact)s)
     AND (%(type)s::text IS NULL OR observation_type = %(type)s)
     AND (%(since)s::timestamptz IS NULL OR created_at >= %(since)s)
   ORDER BY created_at DESC, record_id DESC
   LIMIT %(scan)s) r
 WHERE title ILIKE ANY(%(patterns)s::text[])
    OR summary ILIKE ANY(%(patterns)s::text[])
    OR array_to_string(facts, ' ') ILIKE ANY(%(patterns)s::text[])
 ORDER BY created_at DESC, record_id DESC
 LIMIT %(limit)s
"""

# One fragment of three characters or more, through the trigram index (the expression
# must be the indexed one): the newest of its first %(candidates)s matches, which the index
# hands out without reading or sorting the rest. Keyed by "one full namespace": the index
# holds each row's namespace beside its trigrams (migration 0017), so an equality on it
# makes the bitmap that project's matches only; with the trigrams alone it held every
# project's (a common fragment: 150k rows of a million read for a project of 3k).
SEARCH_TRIGRAM = {
    exact: f"""
SELECT * FROM (
  SELECT {RECORD_COLUMNS} FROM memory_records
   WHERE wakemark_trgm_text(title, summary, facts) ILIKE %(pattern)s ESCAPE '\\'
     AND {"namespace = %(exact)s" if exact else "namespace " + NS}
     AND (%(type)s::text IS NULL OR observation_type = %(type)s)
     AND (%(since)s::timestamptz IS NULL OR created_at >= %(since)s)
   LIMIT %(candidates)s) r
 ORDER BY created_at DESC, record_id DESC
 LIMIT %(limit)s
"""
    for exact in (False, True)
}


# The HNSW walk's settings for one vector search, SET LOCAL before it: its candidate list
# (hnsw.ef_search), and sorting off for the walk, so the planner takes the index (the
# caller chose it by the namespace's size; for a selective filter the planner would rather
# sort every row that passes). JIT off: a disabled sort prices the plan past
# jit_above_cost, and compiling it took ~0.5 s, against ~10 ms for the walk.
def vector_settings(ef_search: int, sort: bool) -> dict[str, str]:
    return {"jit": "off", "hnsw.ef_search": str(ef_search), "enable_sort": "on" if sort else "off"}


# With a model: nothing unless the stored vectors are still that model's (a rebuild's swap
# may have committed since the caller checked).
MODEL_IS = """(%(model)s::text IS NULL
        OR EXISTS (SELECT 1 FROM embedding_model WHERE model = %(model)s))"""

_VECTOR_FILTER = f"""namespace {NS} AND embedding IS NOT NULL
   AND (%(type)s::text IS NULL OR observation_type = %(type)s)
   AND (%(since)s::timestamptz IS NULL OR created_at >= %(since)s)
   AND {MODEL_IS}"""

# The HNSW graph, walked past ef_search candidates while the filter rejects them
# (hnsw.iterative_scan, SET LOCAL with ef_search by the caller). relaxed_order may hand
# rows back slightly out of order: the outer query sorts the few it kept.
SEARCH_VECTOR_HNSW = f"""
WITH nearest AS MATERIALIZED (
  SELECT record_id, created_at, embedding <=> %(vector)s AS distance FROM memory_records
   WHERE {_VECTOR_FILTER}
   ORDER BY embedding <=> %(vector)s
   LIMIT %(limit)s
)
SELECT record_id, extract(epoch FROM created_at)::float8, 1 - distance
  FROM nearest ORDER BY distance, record_id
"""

# Every row of the namespace scored (MATERIALIZED keeps the planner off the HNSW index):
# exact, and for a small namespace faster than a graph over every namespace's rows.
SEARCH_VECTOR_EXACT = f"""
WITH scored AS MATERIALIZED (
  SELECT record_id, created_at, embedding <=> %(vector)s AS distance FROM memory_records
   WHERE {_VECTOR_FILTER}
)
SELECT record_id, extract(epoch FROM created_at)::float8, 1 - distance
  FROM scored ORDER BY distance, record_id LIMIT %(limit)s
"""


class PostgresSearch(PostgresBase):
    # The HNSW walk's candidate list (hnsw.ef_search); a larger limit widens it to the
    # limit. Real MiniLM vectors need more than synthetic ones: recall@10 of exact at 50k
    # is .949 with 100, .975 with 160 (bench scale, which sweeps it on an instance).
    hnsw_ef_search = 160

    # A full-text search ranks only the newest this many matches (SEARCH_FTS).
    fts_window = 2000

    def memory_index(self, wait_s: float = 0.0) -> lexicon.Snapshot | None:
        """The full-text index held in the process if it is current with the database,
        waiting up to ``wait_s`` for it to be built (``lexicon.REFRESH_WAIT_S`` for a
        refresh); None: Postgres answers (no index kept, past its size, being built, or
        an error)."""
        if self._memory is None:
            return None
        try:
            with self._db.connection() as conn:
                return self._memory.current(conn, wait_s)
        except psycopg.Error as exc:
            log.warning("checking the full-text index failed: %r", exc)
            return None

    def warm_up(self) -> None:
        """Start building the full-text index held in the process."""
        self.memory_index()

    def term_stats(self, tokens: Sequence[str]) -> TermStats | None:
        # The index as last refreshed, unchecked: the statistics only choose which terms
        # to search for (SQLite's FTS5 caches them longer); search_terms checks it.
        snap = self._memory.latest if self._memory is not None else None
        if snap is not None and self._memory is not None:
            return snap.term_stats(self._memory.stems(), tokens)
        with self._db.connection() as conn:
            try:
                found = conn.execute(QUERY_TERMS, (list(tokens),)).fetchall()
            except (psycopg.ProgrammingError, psycopg.DataError):
                return None
        _keep_tsqueries((t, q) for t, _, _, q in found)
        return TermStats({t: df for t, df, _, _ in found}, int(found[0][2]) if found else None)

    def search_terms(
        self, query: SearchQuery, terms: Sequence[str], *, stats: TermStats, read: int | None = None
    ) -> list[Match] | None:
        params = _search_params(query)
        end = _deadline(query.timeout_s)
        try:
            found = self._search_in_memory(query, terms, params["ns"], end, read) if terms else None
        except StorageTimeoutError:
            raise
        except Exception as exc:  # the statement below answers; a broken index never fails one
            log.warning("searching the full-text index failed: %r", exc)
            found = None
        if found is not None:
            return found
        try:
            with self._db.connection() as conn:
                tsquery = _tsquery(conn, terms, end)
                if tsquery is None:
                    return None
                sql = SEARCH_FTS[params["exact"] is not None]
                more = {"tsquery": tsquery, "window": max(self.fts_window, query.limit)}
                rows = _run(conn, sql, {**params, **more}, end, "full-text search")
        except (psycopg.ProgrammingError, psycopg.DataError):
            return None
        # ts_rank picks the candidates; BM25 orders them (see bm25.py).
        records = [memory_record(r) for r in rows]
        return [Match.of(r) for r in bm25.order(records, terms, stats.doc_freq, stats.total or 0)]

    def _search_in_memory(
        self, query: SearchQuery, terms: Sequence[str], ns: str, end: float | None, read: int | None
    ) -> list[Match] | None:
        """SQLite's ranking, from the index held in the process, checked in the round trip
        that reads the first ``read`` ranked records; if it is not current, once more after
        waiting for its refresh. None: Postgres answers."""
        memory = self._memory
        if memory is None:
            return None
        # Only a server's warm-up starts the build (``warm_up``): a one-shot process (the
        # CLI, a Celery worker) would pay for an index it never uses.
        snap = memory.latest
        for _ in range(2):
            ranked = snap.ranked(memory.stems(), query, terms) if snap is not None else None
            if snap is None or ranked is None:
                return None
            wanted = [record_id for record_id, _ in ranked[:read]]
            with self._db.connection() as conn:
                params = {**snap.check_params, "ids": wanted, "ns": ns}
                rows = _checked_records(conn, params, end)
            if snap.holds(rows[0][0], rows[0][1]):
                records = {r[2]: memory_record(r[2:]) for r in rows if r[2] is not None}
                # A record read is in the namespace and still there; the rest the index
                # scoped and the check vouches for.
                head = [Match(r, ts, records[r]) for r, ts in ranked[: len(wanted)] if r in records]
                return head + [Match(r, ts) for r, ts in ranked[len(wanted) :]]
            snap = self.memory_index()
        return None

    def search_substring(self, query: SearchQuery, text: str) -> list[MemoryRecord]:
        params = _search_params(query)
        pattern = lexical.substring_pattern(text)
        if pattern is None:
            return []
        params["patterns"] = [pattern]
        end = _deadline(query.timeout_s)
        with self._db.connection() as conn:
            rows = _run(conn, SEARCH_SUBSTRING, params, end, "substring search")
        return [memory_record(r) for r in rows]

    def search_fragments(self, query: SearchQuery, fragments: Sequence[str]) -> list[MemoryRecord]:
        window = max(lexical.FRAGMENT_WINDOW, query.limit)
        params = _search_params(replace(query, limit=window))
        params["candidates"] = max(lexical.FRAGMENT_CANDIDATES, window)
        end = _deadline(query.timeout_s)
        wanted = {}
        for fragment in dict.fromkeys(lexical.encodable(f) for f in fragments):
            if (pattern := lexical.substring_pattern(fragment)) is not None:
                wanted[fragment] = pattern
        short = [f for f in wanted if len(f) < lexical.TRIGRAM_CHARS]
        found = []
        with self._db.connection() as conn:

            def run(statement: str, **more: Any) -> list[MemoryRecord]:
                rows = _run(conn, statement, {**params, **more}, end, "fragment search")
                return [memory_record(r) for r in rows]

            for fragment, pattern in wanted.items():
                if fragment not in short:
                    trigram = SEARCH_TRIGRAM[params["exact"] is not None]
                    found.append(run(trigram, pattern=pattern))
            if short:
                # One pass over the newest rows for all of them (CJK bigrams: up to 16).
                patterns = [wanted[f] for f in short]
                records = run(SEARCH_SUBSTRING, patterns=patterns, limit=lexical.SUBSTRING_ROWS)
                found += [[r for r in records if _holds(r, f)][:window] for f in short]
        return lexical.rank_fragments(found, query.limit)

    def search_vector(
        self, query: SearchQuery, vector: np.ndarray, exact: bool = False, model: str | None = None
    ) -> list[VectorHit]:
        params = {
            "model": model,
            "ns": lexical.namespace_pattern(query.namespace),
            "vector": check_vector(vector),
            "limit": query.limit,
            "type": query.observation_type,
            "since": query.since,
        }
        ef_search = max(self.hnsw_ef_search, query.limit)
        end = _deadline(query.timeout_s)
        with self._db.connection() as conn:
            if not exact:
                settings = vector_settings(ef_search, sort=False)
                rows = _run(conn, SEARCH_VECTOR_HNSW, params, end, "vector search", settings)
                # Short only when the filter passes fewer rows than the walk may visit
                # (hnsw.max_scan_tuples): then those rows are few, and a scan is cheap.
                if len(rows) == query.limit:
                    return [VectorHit(*r) for r in rows]
            settings = vector_settings(ef_search, sort=True)
            rows = _run(conn, SEARCH_VECTOR_EXACT, params, end, "vector search", settings)
        return [VectorHit(*r) for r in rows]


def _checked_records(conn: psycopg.Connection, params: Any, end: float | None) -> list[Any]:
    """``CHECKED_RECORDS``' rows, through the connection's prepared statement (prepared in
    the same round trip, under the same deadline, on its first use)."""
    prepared = conn in _prepared
    sql = EXECUTE_CHECKED if prepared else f"{PREPARE_CHECKED};\n{EXECUTE_CHECKED}"
    try:
        rows = _run(conn, sql, params, end, "full-text search", GENERIC_PLAN)
    except (psycopg.Error, StorageTimeoutError):
        # Prepared anew by the connection's next search: the session may have lost it
        # (DISCARD ALL), a migration changed the table it reads, or it was cut short.
        _prepared.discard(conn)
        with contextlib.suppress(psycopg.Error):
            conn.execute(f"DEALLOCATE {_CHECKED}")
        raise
    _prepared.add(conn)
    return rows


def _keep_tsqueries(found: Iterable[tuple[str, str]]) -> None:
    global _tsqueries
    found = list(found)
    if len(_tsqueries) + len(found) > TSQUERY_CACHE:
        _tsqueries = {}
    _tsqueries.update(found)


def _tsquery(conn: psycopg.Connection, terms: Sequence[str], end: float | None) -> str | None:
    """The OR of the terms' tsqueries, in order; None when no term has one (all stop
    words). Usually from the cache term_stats filled, without a round trip."""
    cached = _tsqueries
    missing = [t for t in terms if t not in cached]
    if missing:
        found = _run(conn, TERM_TSQUERIES, (missing,), end, "full-text search")
        _keep_tsqueries(found)
        cached = {**cached, **dict(found)}
    parts = [cached[t] for t in terms]
    return " | ".join(f"({part})" for part in parts if part) or None


def _holds(record: MemoryRecord, fragment: str) -> bool:
    """``fragment`` in the record's title, summary or facts, as ILIKE finds it."""
    needle = fragment.replace("\x00", "").strip().lower()
    texts = (record.title, record.summary, " ".join(record.facts))
    return any(needle in text.lower() for text in texts)


def _deadline(timeout_s: float | None) -> float | None:
    return None if timeout_s is None else time.monotonic() + timeout_s


def _run(
    conn: psycopg.Connection,
    statement: str,
    params: Any,
    end: float | None,
    what: str,
    settings: Mapping[str, str] | None = None,
) -> list[Any]:
    """The statement's rows, in one round trip: ``settings`` and the time left until ``end``
    (``time.monotonic()``; unbounded if None) as statement_timeout are SET LOCAL in the
    same query string, so they hold for this statement alone (its implicit transaction).
    Past ``end``, StorageTimeoutError."""
    local = dict(settings or {})
    if end is not None:
        left_ms = int((end - time.monotonic()) * 1000)
        if left_ms < 1:
            raise StorageTimeoutError(f"{what} past its deadline")
        local["statement_timeout"] = str(left_ms)
    try:
        if not local:
            return conn.execute(statement, params).fetchall()
        # Client-side binding: the only way to send several statements with parameters
        # in one message (the server binds one statement per message).
        cursor = psycopg.ClientCursor(conn)
        sets = "".join(f"SET LOCAL {name} = '{value}'; " for name, value in local.items())
        cursor.execute(sets + statement, params)
        while cursor.nextset():
            pass
        return cursor.fetchall()
    except psycopg.errors.QueryCanceled as exc:
        raise StorageTimeoutError(f"{what} past its deadline") from exc


def _search_params(query: SearchQuery) -> dict[str, Any]:
    namespace = query.namespace
    return {
        "ns": lexical.namespace_pattern(namespace),
        "exact": namespace if NAMESPACE_RE.fullmatch(namespace) else None,
        "type": query.observation_type,
        "since": query.since,
        "limit": query.limit,
        "scan": lexical.SUBSTRING_ROWS,
    }

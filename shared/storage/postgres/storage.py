"""The Postgres backend: psycopg 3 pool, tsvector full-text search, pgvector embeddings."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import datetime
from typing import Any

import numpy as np
import psycopg
from psycopg import sql

from wakemark.shared.models import (
    NAMESPACE_RE,
    Event,
    MemoryRecord,
    Retrieval,
    StoredEvent,
    utcnow,
)
from wakemark.shared.storage import columns, lexical, turns
from wakemark.shared.storage.base import (
    ApiToken,
    AuditEntry,
    DiskUsage,
    DuplicateRecordError,
    EmbeddingMatrix,
    ImportBatch,
    ImportCounts,
    MemoryFilter,
    NotFoundError,
    Page,
    PageKey,
    PutEventResult,
    RetrievalSession,
    Storage,
    StorageTimeoutError,
    TermStats,
    Turn,
    TurnInfo,
    TurnRow,
    Tx,
    VectorHit,
)
from wakemark.shared.storage.postgres import bm25
from wakemark.shared.storage.postgres import queries as q
from wakemark.shared.storage.postgres.connection import POOL_TIMEOUT_S, Connector
from wakemark.shared.storage.postgres.rows import (
    check_vector,
    decode_vectors,
    event_params,
    memory_record,
    record_params,
    stored_event,
)

ChangeHook = Callable[[set[str]], None]
# The tables that grow (``compact`` vacuums them); the others hold a few rows each.
BIG_TABLES = ("events", "turns", "memory_records", "memory_fts", "lexeme_df")


class PostgresTx(Tx):
    """One transaction. One that adds or removes records first waits for every other
    such transaction (``LOCK_RECORDS``), before it locks a turn or a row of lexeme_df.

    Each record inserted or deleted updates the lexeme_df rows of its words, in sorted
    order, then the one fts_doc_count row (triggers of migrations 0002 and 0004). Sorted
    order keeps two single-record statements from deadlocking, but a transaction of many
    records takes its locks in one sorted pass per record, so two such transactions
    (extraction jobs in two workers) deadlock on each other, and Postgres aborts one
    after its deadlock timeout, again and again. They all meet on the rows of common
    words and on fts_doc_count anyway, so waiting up front costs almost no concurrency."""

    def __init__(self, conn: psycopg.Connection) -> None:
        super().__init__()
        self.conn = conn
        self.changed: set[str] = set()  # namespaces whose embeddings changed
        self._records_locked = False

    def put_events(self, events: Sequence[Event]) -> list[PutEventResult]:
        conn = self.conn
        now = utcnow()
        # Lock every session of the batch up front, in one order, so two batches
        # touching the same sessions cannot deadlock.
        for namespace, session_id in turns.sessions(events):
            conn.execute(q.LOCK_SESSION, (f"{namespace}\n{session_id}",))
        ids = turns.lookup_ids(events)
        stored = {r[0]: (r[1], r[2]) for r in conn.execute(q.EVENTS_TURNS, (ids,)).fetchall()}

        def open_turn(key: turns.SessionKey) -> str | None:
            row = conn.execute(q.OPEN_TURN, key).fetchone()
            return row[0] if row else None

        plan = turns.plan(events, stored, open_turn)
        with conn.cursor() as cur:
            # executemany() costs a round trip even with nothing to send: a single
            # event has one or two of these four lists non-empty.
            for sql, params in (
                (q.CLOSE_TURN, [(now, t) for t in plan.close]),
                (q.INSERT_TURN, [t.row(now) for t in plan.new_turns]),
                (q.TOUCH_TURN, [(now, t) for t in plan.touch]),
            ):
                if params:
                    cur.executemany(sql, params)
            _insert_events(cur, [{**event_params(e, now), "turn_id": t} for e, t in plan.events])
        return plan.results

    def _lock_records(self) -> None:
        if not self._records_locked:
            self.conn.execute(q.LOCK_RECORDS)
            self._records_locked = True

    def put_memory_record(self, record: MemoryRecord) -> None:
        self._lock_records()
        # ON CONFLICT DO NOTHING rather than catching the unique violation: the
        # transaction stays usable if the caller handles the error.
        if self.conn.execute(q.INSERT_RECORD, record_params(record)).fetchone() is None:
            raise DuplicateRecordError(f"memory record {record.record_id} already exists")

    def put_embedding(self, record_id: str, vector: np.ndarray) -> None:
        row = self.conn.execute(q.PUT_EMBEDDING, (check_vector(vector), record_id)).fetchone()
        if row is None:
            raise NotFoundError(f"memory record {record_id} does not exist")
        self.changed.add(row[0])

    def delete_memory_records(self, record_ids: Sequence[str]) -> list[str]:
        self._lock_records()
        rows = self.conn.execute(q.DELETE_RECORDS, (list(record_ids),)).fetchall()
        self.changed.update(ns for _, ns in rows)
        gone = {rid for rid, _ in rows}
        return [rid for rid in dict.fromkeys(record_ids) if rid in gone]

    def replace_record_text(self, record: MemoryRecord) -> None:
        self._lock_records()  # the FTS trigger updates lexeme_df: see the class docstring
        row = self.conn.execute(q.REPLACE_RECORD_TEXT, record_params(record)).fetchone()
        if row is None:
            raise NotFoundError(f"memory record {record.record_id} does not exist")
        self.changed.add(row[0])

    def delete_events(self, event_ids: Sequence[str]) -> int:
        return self.conn.execute(q.DELETE_EVENTS, (list(event_ids),)).rowcount

    def mark_turn_extracted(
        self, turn_id: str, record_ids: Sequence[str], skip_reason: str | None = None
    ) -> bool:
        # Before the turn's row lock: the records of the turn come next.
        self._lock_records()
        row = self.conn.execute(
            q.MARK_TURN_EXTRACTED, (utcnow(), list(record_ids), skip_reason, turn_id)
        ).fetchone()
        return row is not None

    def audit(self, entry: AuditEntry) -> None:
        params = {
            "at": entry.at,
            "who": entry.who,
            "action": entry.action,
            "namespace": entry.namespace,
            "targets": list(entry.targets),
            "count": entry.count,
        }
        self.conn.execute(q.INSERT_AUDIT, params)

    def put_token(self, token: ApiToken, secret_sha256: str) -> None:
        self.conn.execute(q.INSERT_TOKEN, {**vars(token), "secret_sha256": secret_sha256})

    def revoke_token(self, token_id: str, when: datetime) -> bool:
        return self.conn.execute(q.REVOKE_TOKEN, (when, token_id)).rowcount == 1


class PostgresStorage(Storage):
    backend = "postgres"
    vector_index = True
    # The HNSW walk's candidate list (hnsw.ef_search); a larger limit widens it to the
    # limit. Real MiniLM vectors need more than synthetic ones: recall@10 of exact at 50k
    # is .949 with 100, .975 with 160 (bench scale, which sweeps it on an instance).
    hnsw_ef_search = 160
    # A full-text search ranks only the newest this many matches (queries.SEARCH_FTS).
    fts_window = 2000

    def __init__(
        self, url: str, on_change: ChangeHook | None = None, timeout: float = POOL_TIMEOUT_S
    ) -> None:
        """``timeout``: seconds to wait for a pooled connection before the call fails with
        ``TransientStorageError``."""
        self._db = Connector(url, timeout)
        self._on_change = on_change

    # --- events and turns -------------------------------------------------------------
    def events_after(self, after: str | None, limit: int) -> list[StoredEvent]:
        with self._db.connection() as conn:
            rows = conn.execute(q.EVENTS_AFTER, (after or "", limit)).fetchall()
        return [stored_event(r) for r in rows]

    def rewrite_events(self, events: Sequence[Event]) -> int:
        rows = [
            (e.body_json(), e.source.surface, e.source.version, e.source.project_path,
             e.actor_id, e.event_id)
            for e in events
        ]  # fmt: skip
        with self._db.connection() as conn, conn.transaction():
            return sum(conn.execute(q.REWRITE_EVENT, row).rowcount for row in rows)

    def rename_session(self, namespace: str, old: str, new: str) -> int:
        params = {"namespace": namespace, "old": old, "new": new}
        with self._db.connection() as conn, conn.transaction():
            return [conn.execute(sql, params).rowcount for sql in q.RENAME_SESSION][-1]

    def get_event(self, event_id: str) -> StoredEvent | None:
        with self._db.connection() as conn:
            row = conn.execute(q.GET_EVENT, (event_id,)).fetchone()
        return stored_event(row) if row else None

    def count_events(self, event_ids: Sequence[str]) -> int:
        with self._db.connection() as conn:
            row = conn.execute(q.COUNT_EVENTS, (list(event_ids),)).fetchone()
        return int(row[0]) if row else 0

    def list_events(
        self, namespace: str | None = None, session_id: str | None = None, limit: int = 50
    ) -> list[StoredEvent]:
        exact = namespace is not None and NAMESPACE_RE.fullmatch(namespace) is not None
        params = {
            "ns": lexical.namespace_pattern(namespace),
            "exact": namespace,
            "session_id": session_id,
            "limit": limit,
        }
        with self._db.connection() as conn:
            rows = conn.execute(q.LIST_EVENTS[exact], params).fetchall()
        return [stored_event(r) for r in rows]

    # --- retrieval audit ------------------------------------------------------------------
    def put_retrieval(self, retrieval: Retrieval) -> None:
        params = {
            "retrieval_id": retrieval.retrieval_id,
            "event_id": retrieval.event_id,
            "namespace": retrieval.namespace,
            "session_id": retrieval.session_id,
            "created_at": retrieval.created_at,
            "body": retrieval.body_json(),
        }
        try:
            with self._db.connection() as conn:
                conn.execute(q.INSERT_RETRIEVAL, params)
        except psycopg.errors.ForeignKeyViolation as exc:
            raise NotFoundError(f"no prompt event {retrieval.event_id}") from exc

    def get_retrieval(self, retrieval_id: str) -> Retrieval | None:
        with self._db.connection() as conn:
            row = conn.execute(q.GET_RETRIEVAL, (retrieval_id,)).fetchone()
        return _retrieval(row) if row else None

    def list_retrievals(
        self,
        namespace: str | None = None,
        session_id: str | None = None,
        limit: int = 50,
        after: tuple[datetime, str] | None = None,
    ) -> list[Retrieval]:
        params: dict[str, Any] = {
            "ns": lexical.namespace_pattern(namespace),
            "session_id": session_id,
            "limit": limit,
        }
        if after is not None:
            params.update(after_at=after[0], after_id=after[1])
        sql = q.LIST_RETRIEVALS[session_id is not None, after is not None]
        with self._db.connection() as conn:
            rows = conn.execute(sql, params).fetchall()
        return [_retrieval(r) for r in rows]

    def retrieval_sessions(
        self, namespace: str, limit: int = 50, after: tuple[datetime, str] | None = None
    ) -> list[RetrievalSession]:
        params: dict[str, Any] = {"namespace": namespace, "limit": limit}
        if after is not None:
            params.update(after_at=after[0], after_id=after[1])
        with self._db.connection() as conn:
            rows = conn.execute(q.RETRIEVAL_SESSIONS[after is not None], params).fetchall()
        return [RetrievalSession(*r) for r in rows]

    def retrieval_totals(self, namespace: str | None = None) -> dict[str, float]:
        with self._db.connection() as conn:
            row = conn.execute(q.RETRIEVAL_TOTALS, {"ns": lexical.namespace_pattern(namespace)})
            values = row.fetchone() or (0, 0, 0, 0, 0.0)
        keys = ("prompts", "injected", "records", "bytes", "latency_ms")
        return dict(zip(keys, values, strict=True))

    def get_turns(self, turn_ids: Sequence[str]) -> list[Turn]:
        ids = list(turn_ids)
        with self._db.connection() as conn, conn.transaction():
            conn.execute(q.REPEATABLE_READ)  # the turns and their events from one snapshot
            rows = conn.execute(q.GET_TURNS, (ids,)).fetchall()
            events = conn.execute(q.TURNS_EVENTS, (ids,)).fetchall()
        by_turn: dict[str, list[StoredEvent]] = {}
        for e in events:
            event = stored_event(e)
            by_turn.setdefault(str(event.turn_id), []).append(event)
        found = {
            turn_id: Turn(
                turn_id, namespace, session_id, closed, extracted, by_turn.get(turn_id, [])
            )
            for turn_id, namespace, session_id, closed, extracted in rows
        }
        return [found[t] for t in dict.fromkeys(ids) if t in found]

    def session_turns(self, namespace: str, session_id: str, limit: int = 200) -> list[TurnInfo]:
        with self._db.connection() as conn:
            rows = conn.execute(q.SESSION_TURNS, (namespace, session_id, limit)).fetchall()
        return [
            TurnInfo(t, opened, closed, extracted, list(ids), reason)
            for t, opened, closed, extracted, ids, reason in rows
        ]

    def close_idle_turns(self, idle_before: datetime) -> list[str]:
        params = {"now": utcnow(), "idle_before": idle_before}
        with self._db.connection() as conn:
            return [r[0] for r in conn.execute(q.CLOSE_IDLE_TURNS, params).fetchall()]

    def pending_turns(self, limit: int = 1000) -> list[str]:
        with self._db.connection() as conn:
            return [r[0] for r in conn.execute(q.PENDING_TURNS, (limit,)).fetchall()]

    # --- memory records -----------------------------------------------------------------
    @contextmanager
    def transaction(self) -> Iterator[Tx]:
        with self._db.connection() as conn:
            with conn.transaction():
                tx = PostgresTx(conn)
                yield tx
            # Only after COMMIT: other processes must see the change when they react.
            if tx.changed and self._on_change is not None:
                self._on_change(set(tx.changed))
        tx.committed()

    def get_memory_record(self, record_id: str) -> MemoryRecord | None:
        with self._db.connection() as conn:
            row = conn.execute(q.GET_RECORD, (record_id,)).fetchone()
        return memory_record(row) if row else None

    def get_memory_records(self, record_ids: Sequence[str]) -> list[MemoryRecord]:
        with self._db.connection() as conn:
            rows = conn.execute(q.GET_RECORDS, (list(record_ids),)).fetchall()
        by_id = {r[0]: memory_record(r) for r in rows}
        return [by_id[rid] for rid in record_ids if rid in by_id]

    def list_memory_records(
        self,
        namespace: str,
        limit: int = 50,
        after: PageKey | None = None,
        pinned_first: bool = False,
        count: bool = True,
    ) -> Page:
        ns = lexical.namespace_pattern(namespace)
        exact = NAMESPACE_RE.fullmatch(namespace) is not None
        params: dict[str, Any] = {"ns": ns, "exact": namespace, "limit": limit}
        if after is not None:
            params.update(
                after_at=after.created_at, after_id=after.record_id, after_pinned=after.pinned
            )
        total: int | None = None
        # No transaction around the two: under READ COMMITTED each statement takes its
        # own snapshot anyway, and BEGIN and COMMIT cost a round trip each.
        with self._db.connection() as conn:
            sql = q.LIST_RECORDS[pinned_first, exact, after is not None]
            rows = conn.execute(sql, params).fetchall()
            if count:
                row = conn.execute(q.COUNT_RECORDS, {"ns": ns}).fetchone()
                total = row[0] if row else 0
        return Page.of([memory_record(r) for r in rows], total, limit)

    def set_pinned(self, record_id: str, pinned: bool) -> MemoryRecord:
        with self._db.connection() as conn:
            row = conn.execute(q.SET_PINNED, (pinned, record_id)).fetchone()
        if row is None:
            raise NotFoundError(f"memory record {record_id} does not exist")
        return memory_record(row)

    def edit_memory_record(
        self,
        record_id: str,
        title: str | None = None,
        summary: str | None = None,
        facts: Sequence[str] | None = None,
    ) -> MemoryRecord:
        params = {
            "record_id": record_id,
            "title": title,
            "summary": summary,
            "facts": None if facts is None else list(facts),
            "now": utcnow(),
        }
        with self._db.connection() as conn, conn.transaction():
            conn.execute(q.LOCK_RECORDS)  # the edit rewrites lexeme_df rows (PostgresTx)
            row = conn.execute(q.EDIT_RECORD, params).fetchone()
        if row is None:
            raise NotFoundError(f"memory record {record_id} does not exist")
        record = memory_record(row)
        if self._on_change is not None:  # its vector is gone: caches must drop it
            self._on_change({record.namespace})
        return record

    def find_memory_ids(self, where: MemoryFilter) -> list[str]:
        params = {
            "ns": lexical.namespace_pattern(where.namespace),
            "type": where.observation_type,
            "before": where.before,
            "after": where.after,
            "session_id": where.session_id,
            "pinned": where.pinned,
        }
        with self._db.connection() as conn:
            return [r[0] for r in conn.execute(q.FIND_RECORDS, params).fetchall()]

    def timeline(self, record_id: str, before: int, after: int) -> list[MemoryRecord]:
        with self._db.connection() as conn, conn.transaction():
            row = conn.execute(q.GET_RECORD, (record_id,)).fetchone()
            if row is None:
                raise NotFoundError(f"memory record {record_id} does not exist")
            center = memory_record(row)
            key = {"namespace": center.namespace, "created_at": center.created_at}
            key["record_id"] = record_id
            earlier = conn.execute(q.TIMELINE_BEFORE, {**key, "n": max(before, 0)}).fetchall()
            later = conn.execute(q.TIMELINE_AFTER, {**key, "n": max(after, 0)}).fetchall()
        return [*(memory_record(r) for r in reversed(earlier)), center, *map(memory_record, later)]

    def has_embedding(self, record_id: str) -> bool:
        with self._db.connection() as conn:
            row = conn.execute(q.HAS_EMBEDDING, (record_id,)).fetchone()
        return bool(row and row[0])

    # --- search -------------------------------------------------------------------------
    def term_stats(self, tokens: Sequence[str]) -> TermStats | None:
        with self._db.connection() as conn:
            try:
                found = conn.execute(q.QUERY_TERMS, (list(tokens),)).fetchall()
            except (psycopg.ProgrammingError, psycopg.DataError):
                return None
        return TermStats({t: df for t, df, _ in found}, int(found[0][2]) if found else None)

    def search_terms(
        self,
        namespace: str,
        terms: Sequence[str],
        limit: int,
        observation_type: str | None = None,
        since: datetime | None = None,
        timeout_s: float | None = None,
        *,
        stats: TermStats,
    ) -> list[MemoryRecord] | None:
        params = _search_params(namespace, limit, observation_type, since)
        try:
            with self._db.connection() as conn, conn.transaction():
                run = _bounded(conn, _deadline(timeout_s), "full-text search")
                row = run(q.TSQUERY, (list(terms),)).fetchone()
                tsquery = row[0] if row else None
                if tsquery is None:
                    return None
                sql = q.SEARCH_FTS[params["exact"] is not None]
                more = {"tsquery": tsquery, "window": max(self.fts_window, limit)}
                rows = run(sql, {**params, **more}).fetchall()
        except (psycopg.ProgrammingError, psycopg.DataError):
            return None
        # ts_rank picks the candidates; BM25 orders them (see bm25.py).
        records = [memory_record(r) for r in rows]
        return bm25.order(records, terms, stats.doc_freq, stats.total or 0)

    def search_substring(
        self,
        namespace: str,
        text: str,
        limit: int,
        observation_type: str | None = None,
        since: datetime | None = None,
        timeout_s: float | None = None,
    ) -> list[MemoryRecord]:
        params = _search_params(namespace, limit, observation_type, since)
        pattern = lexical.substring_pattern(text)
        if pattern is None:
            return []
        with self._db.connection() as conn, conn.transaction():
            run = _bounded(conn, _deadline(timeout_s), "substring search")
            rows = run(q.SEARCH_SUBSTRING, {**params, "patterns": [pattern]}).fetchall()
        return [memory_record(r) for r in rows]

    def search_fragments(
        self,
        namespace: str,
        fragments: Sequence[str],
        limit: int,
        observation_type: str | None = None,
        since: datetime | None = None,
        timeout_s: float | None = None,
    ) -> list[MemoryRecord]:
        window = max(lexical.FRAGMENT_WINDOW, limit)
        params = _search_params(namespace, window, observation_type, since)
        params["candidates"] = max(lexical.FRAGMENT_CANDIDATES, window)
        end = _deadline(timeout_s)
        wanted = {}
        for fragment in dict.fromkeys(lexical.encodable(f) for f in fragments):
            if (pattern := lexical.substring_pattern(fragment)) is not None:
                wanted[fragment] = pattern
        short = [f for f in wanted if len(f) < lexical.TRIGRAM_CHARS]
        found = []
        with self._db.connection() as conn, conn.transaction():
            bounded = _bounded(conn, end, "fragment search")

            def run(query: str, **more: Any) -> list[MemoryRecord]:
                return [memory_record(r) for r in bounded(query, {**params, **more})]

            for fragment, pattern in wanted.items():
                if fragment not in short:
                    found.append(run(q.SEARCH_TRIGRAM, pattern=pattern))
            if short:
                # One pass over the newest rows for all of them (CJK bigrams: up to 16).
                patterns = [wanted[f] for f in short]
                records = run(q.SEARCH_SUBSTRING, patterns=patterns, limit=lexical.SUBSTRING_ROWS)
                found += [[r for r in records if _holds(r, f)][:window] for f in short]
        return lexical.rank_fragments(found, limit)

    def list_embeddings(self, namespace: str, since: int | None = None) -> EmbeddingMatrix:
        params = {
            "ns": lexical.namespace_pattern(namespace),
            "since": -1 if since is None else since,
        }
        with self._db.connection() as conn, conn.transaction():
            # One snapshot for the watermark, the counts and the rows.
            conn.execute(q.REPEATABLE_READ)
            head = conn.execute(q.EMBEDDINGS_SNAPSHOT, params).fetchone()
            watermark, total, changed = head if head else (0, 0, 0)
            with conn.cursor(binary=True) as cur:
                cur.execute(q.LIST_EMBEDDINGS, params)
                return columns.collect(
                    columns.fetch_batches(cur),
                    changed,
                    decode_vectors,
                    float,
                    total=total,
                    watermark=watermark,
                )

    def embedded_ids(self, namespace: str) -> list[str]:
        with self._db.connection() as conn:
            rows = conn.execute(q.EMBEDDED_IDS, {"ns": lexical.namespace_pattern(namespace)})
            return [r[0] for r in rows]

    def count_embeddings(self, namespace: str) -> int:
        with self._db.connection() as conn:
            row = conn.execute(q.COUNT_EMBEDDINGS, {"ns": lexical.namespace_pattern(namespace)})
            return int(row.fetchone()[0])  # type: ignore[index]

    def search_vector(
        self,
        namespace: str,
        vector: np.ndarray,
        limit: int,
        observation_type: str | None = None,
        since: datetime | None = None,
        exact: bool = False,
        timeout_s: float | None = None,
    ) -> list[VectorHit]:
        params = {
            "ns": lexical.namespace_pattern(namespace),
            "vector": check_vector(vector),
            "limit": limit,
            "type": observation_type,
            "since": since,
        }
        ef_search = str(max(self.hnsw_ef_search, limit))
        end = _deadline(timeout_s)
        with self._db.connection() as conn:
            if not exact:
                with conn.transaction():
                    run = _bounded(conn, end, "vector search")
                    conn.execute(q.SET_VECTOR_SEARCH, (ef_search, "off"))
                    rows = run(q.SEARCH_VECTOR_HNSW, params).fetchall()
                # Short only when the filter passes fewer rows than the walk may visit
                # (hnsw.max_scan_tuples): then those rows are few, and a scan is cheap.
                if len(rows) == limit:
                    return [VectorHit(*r) for r in rows]
            with conn.transaction():
                run = _bounded(conn, end, "vector search")
                conn.execute(q.SET_VECTOR_SEARCH, (ef_search, "on"))
                rows = run(q.SEARCH_VECTOR_EXACT, params).fetchall()
        return [VectorHit(*r) for r in rows]

    def vector_cosines(
        self, namespace: str, vector: np.ndarray, record_ids: Sequence[str]
    ) -> dict[str, float]:
        params = {
            "ns": lexical.namespace_pattern(namespace),
            "vector": check_vector(vector),
            "ids": list(record_ids),
        }
        with self._db.connection() as conn:
            return dict(conn.execute(q.VECTOR_COSINES, params).fetchall())

    def records_missing_embedding(
        self, limit: int, namespace: str | None = None
    ) -> list[MemoryRecord]:
        params = {"ns": lexical.namespace_pattern(namespace), "limit": limit}
        with self._db.connection() as conn:
            return [memory_record(r) for r in conn.execute(q.MISSING_EMBEDDING, params)]

    def clear_embeddings(self, namespace: str | None = None) -> int:
        with self._db.connection() as conn, conn.transaction():
            params = {"ns": lexical.namespace_pattern(namespace)}
            rows = conn.execute(q.CLEAR_EMBEDDINGS, params).fetchall()
        if rows and self._on_change is not None:
            self._on_change({r[0] for r in rows})
        return len(rows)

    # --- export and import ------------------------------------------------------------
    def export_records(
        self, namespace: str | None, after: str | None, limit: int, vectors: bool
    ) -> list[tuple[MemoryRecord, np.ndarray | None]]:
        params = {
            "ns": lexical.namespace_pattern(namespace),
            "after": after or "",
            "limit": limit,
            "vectors": vectors,
        }
        with self._db.connection() as conn:
            rows = conn.execute(q.EXPORT_RECORDS, params).fetchall()
        return [(memory_record(r[:-1]), None if r[-1] is None else r[-1].to_numpy()) for r in rows]

    def export_turns(
        self, namespace: str | None, after: str | None, limit: int
    ) -> list[tuple[TurnRow, list[StoredEvent]]]:
        params = {"ns": lexical.namespace_pattern(namespace), "after": after or "", "limit": limit}
        with self._db.connection() as conn, conn.transaction():
            conn.execute(q.REPEATABLE_READ)  # the turns and their events from one snapshot
            rows = conn.execute(q.EXPORT_TURNS, params).fetchall()
            events = conn.execute(q.TURNS_EVENTS, ([r[0] for r in rows],)).fetchall()
        by_turn: dict[str, list[StoredEvent]] = {}
        for e in events:
            event = stored_event(e)
            by_turn.setdefault(str(event.turn_id), []).append(event)
        out = []
        for tid, ns, session, opened, last, closed, extracted, record_ids in rows:
            row = TurnRow(tid, ns, session, opened, last, closed, extracted, list(record_ids))
            out.append((row, by_turn.get(tid, [])))
        return out

    def import_batch(self, batch: ImportBatch, commit: bool = True) -> ImportCounts:
        changed: set[str] = set()
        with self._db.connection() as conn, conn.transaction():
            records = vectors = 0
            if batch.records:
                conn.execute(q.LOCK_RECORDS)  # as PostgresTx: records are added
            for record, vector in batch.records:
                embedding = None if vector is None else check_vector(vector)
                params = {
                    **record_params(record),
                    "edited_at": record.edited_at,
                    "embedding": embedding,
                }
                if conn.execute(q.IMPORT_RECORD, params).fetchone():
                    records += 1
                    if embedding is not None:
                        vectors += 1
                        changed.add(record.namespace)
            with conn.cursor() as cur:
                # executemany pipelines the statements; rowcount sums their rows.
                cur.executemany(
                    q.IMPORT_TURN,
                    [{"turn_id": t.turn_id, "namespace": t.namespace,
                      "session_id": t.session_id, "opened_at": t.opened_at,
                      "last_event_at": t.last_event_at, "closed_at": t.closed_at,
                      "extracted_at": t.extracted_at, "record_ids": t.record_ids}
                     for t in batch.turns],
                )  # fmt: skip
                turns_written = max(cur.rowcount, 0)
                events = _insert_events(
                    cur,
                    [{**event_params(e, e.transaction_time), "turn_id": e.turn_id}
                     for e in batch.events],
                )  # fmt: skip
            counts = ImportCounts(records, vectors, turns_written, events)
            if not commit:
                raise psycopg.Rollback()  # leaves the block, rolled back, without raising
        if not commit:
            return counts
        if changed and self._on_change is not None:
            self._on_change(changed)
        return counts

    # --- retention and size -----------------------------------------------------------
    def trimmable_turns(self, extracted_before: datetime, limit: int) -> list[str]:
        with self._db.connection() as conn:
            rows = conn.execute(q.TRIMMABLE_TURNS, (extracted_before, limit)).fetchall()
        return [r[0] for r in rows]

    def trim_turns(self, bodies: Mapping[str, Mapping[str, str]]) -> int:
        now = utcnow()
        updates = [(b, e, t) for t, events in bodies.items() for e, b in events.items()]
        with self._db.connection() as conn, conn.transaction(), conn.cursor() as cur:
            changed = 0
            if updates:
                cur.executemany(q.TRIM_EVENT_BODY, updates)
                changed = max(cur.rowcount, 0)
            cur.executemany(q.MARK_TRIMMED, [(now, t) for t in bodies])
        return changed

    def expire_turns(self, extracted_before: datetime, limit: int) -> tuple[int, int]:
        with self._db.connection() as conn, conn.transaction():
            rows = conn.execute(q.EXPIRABLE_TURNS, (extracted_before, limit)).fetchall()
            ids = [r[0] for r in rows]
            events = conn.execute(q.EXPIRE_EVENTS, (ids,)).rowcount
            return conn.execute(q.EXPIRE_TURNS, (ids,)).rowcount, events

    def delete_retrievals(self, created_before: datetime) -> int:
        with self._db.connection() as conn, conn.transaction():
            return conn.execute(q.DELETE_RETRIEVALS, (created_before,)).rowcount

    def merge_indexes(self) -> None:
        return None  # GIN and trigram indexes drop dead entries when (auto)vacuum runs

    def compact(self) -> list[str]:
        lines: list[str] = []
        with self._db.connection() as conn:  # autocommit: VACUUM refuses a transaction
            allowed = {name: ok for name, _, ok in conn.execute(q.TABLE_SIZES).fetchall()}
            for table in BIG_TABLES:
                if table not in allowed:
                    continue
                if not allowed[table]:
                    lines.append(
                        f"not the owner of {table}: ask its owner (or a superuser) to run"
                        f" VACUUM (ANALYZE) {table}; autovacuum reuses the space meanwhile"
                    )
                    continue
                conn.execute(sql.SQL("VACUUM (ANALYZE) {}").format(sql.Identifier(table)))
                lines.append(f"VACUUM (ANALYZE) {table}")
        lines.append(
            "Postgres reuses the space VACUUM frees for new rows; VACUUM FULL returns it to"
            " the operating system but locks the table while it rewrites it"
        )
        return lines

    def disk_usage(self) -> DiskUsage:
        with self._db.connection() as conn:
            sizes = conn.execute(q.TABLE_SIZES).fetchall()
            events = conn.execute(q.EVENT_BYTES).fetchall()
            records = conn.execute(q.RECORD_BYTES).fetchall()
        tables = {name: int(size) for name, size, _ in sizes}
        return DiskUsage(sum(tables.values()), tables, columns.project_sizes(events, records))

    def database_bytes(self) -> int:
        with self._db.connection() as conn:
            row = conn.execute(q.DATABASE_BYTES).fetchone()
        return int(row[0]) if row else 0

    # --- tokens and audit -------------------------------------------------------------
    def token_by_hash(self, secret_sha256: str) -> ApiToken | None:
        with self._db.connection() as conn:
            row = conn.execute(q.TOKEN_BY_HASH, (secret_sha256,)).fetchone()
        return ApiToken(*row) if row else None

    def list_tokens(self) -> list[ApiToken]:
        with self._db.connection() as conn:
            return [ApiToken(*r) for r in conn.execute(q.LIST_TOKENS).fetchall()]

    def touch_token(self, token_id: str, when: datetime) -> None:
        with self._db.connection() as conn:
            conn.execute(q.TOUCH_TOKEN, (when, token_id))

    def list_audit(self, limit: int = 100) -> list[AuditEntry]:
        with self._db.connection() as conn:
            rows = conn.execute(q.LIST_AUDIT, (limit,)).fetchall()
        return [
            AuditEntry(id=i, at=at, who=who, action=action, namespace=ns, targets=tuple(t), count=n)
            for i, at, who, action, ns, t, n in rows
        ]

    # --- stats --------------------------------------------------------------------------
    def stats(self, namespace: str | None = None) -> dict[str, int]:
        with self._db.connection() as conn:
            row = conn.execute(q.STATS, {"ns": lexical.namespace_pattern(namespace)}).fetchone()
        keys = ("events", "memories", "embedded", "pending_extraction", "pending_embedding")
        return dict(zip(keys, row or (0,) * len(keys), strict=True))

    def skipped_turns(self) -> dict[str, int]:
        with self._db.connection() as conn:
            return {reason: int(n) for reason, n in conn.execute(q.SKIPPED_TURNS).fetchall()}

    def projects(self) -> list[dict[str, Any]]:
        with self._db.connection() as conn:
            rows = conn.execute(q.PROJECTS).fetchall()
        projects = []
        for ns, path, events, memories, last in rows:
            project_id = ns.rstrip("/").rsplit("/", 1)[-1]
            projects.append(
                {
                    "namespace": ns,
                    "project_id": project_id,
                    "display_name": (_basename(path) if path else None) or project_id,
                    "project_path": path,
                    "event_count": events,
                    "memory_count": memories,
                    "last_activity": last,
                }
            )
        return projects

    def ping(self) -> None:
        with self._db.connection() as conn:
            conn.execute(q.PING)

    def close(self) -> None:
        self._db.close()


def _basename(path: str) -> str | None:
    # Hooks on Windows send backslash paths; either separator ends a component.
    return path.replace("\\", "/").rstrip("/").rsplit("/", 1)[-1] or None


def _holds(record: MemoryRecord, fragment: str) -> bool:
    """``fragment`` in the record's title, summary or facts, as ILIKE finds it."""
    needle = fragment.replace("\x00", "").strip().lower()
    texts = (record.title, record.summary, " ".join(record.facts))
    return any(needle in text.lower() for text in texts)


def _deadline(timeout_s: float | None) -> float | None:
    return None if timeout_s is None else time.monotonic() + timeout_s


def _bounded(
    conn: psycopg.Connection, end: float | None, what: str
) -> Callable[[str, Any], psycopg.Cursor[Any]]:
    """``conn.execute`` for the statements of one transaction, each cancelled at ``end``
    (``time.monotonic()``; StorageTimeoutError); unbounded if None."""

    def execute(query: str, params: Any) -> psycopg.Cursor[Any]:
        if end is not None:
            left_ms = int((end - time.monotonic()) * 1000)
            if left_ms < 1:
                raise StorageTimeoutError(f"{what} past its deadline")
            conn.execute(q.STATEMENT_TIMEOUT, (str(left_ms),))
        try:
            return conn.execute(query, params)
        except psycopg.errors.QueryCanceled as exc:
            raise StorageTimeoutError(f"{what} past its deadline") from exc

    return execute


def _search_params(
    namespace: str, limit: int, observation_type: str | None, since: datetime | None
) -> dict[str, Any]:
    return {
        "ns": lexical.namespace_pattern(namespace),
        "exact": namespace if NAMESPACE_RE.fullmatch(namespace) else None,
        "type": observation_type,
        "since": since,
        "limit": limit,
        "scan": lexical.SUBSTRING_ROWS,
    }


def _insert_events(cur: psycopg.Cursor[Any], rows: list[dict[str, Any]]) -> int:
    """Insert the rows (``event_params`` plus ``turn_id``) in one statement; how many
    were new (an event id already stored is left as it is)."""
    if not rows:
        return 0
    names = [c.strip() for c in q.EVENT_COLUMNS.split(",")]
    cur.execute(q.INSERT_EVENTS, [[row[name] for row in rows] for name in names])
    return max(cur.rowcount, 0)


def _retrieval(row: tuple[Any, ...]) -> Retrieval:
    retrieval_id, event_id, namespace, session_id, created_at, body = row
    return Retrieval(
        retrieval_id=retrieval_id,
        event_id=event_id,
        namespace=namespace,
        session_id=session_id,
        created_at=created_at,
        **body,
    )

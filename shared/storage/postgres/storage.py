"""The Postgres backend: psycopg 3 pool, tsvector full-text search, pgvector embeddings."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime
from typing import Any

import numpy as np
import psycopg

from wakemark.shared.models import NAMESPACE_RE, Event, MemoryRecord, StoredEvent, utcnow
from wakemark.shared.storage import columns, lexical, turns
from wakemark.shared.storage.base import (
    DuplicateRecordError,
    EmbeddingMatrix,
    LexicalHit,
    MemoryFilter,
    NotFoundError,
    Page,
    PutEventResult,
    Storage,
    Turn,
    TurnInfo,
    Tx,
)
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
# A search ranks only the newest this many matches (queries.SEARCH_FTS).
RECENT_MATCHES = 2000


class PostgresTx(Tx):
    """One transaction. One that adds or removes records first waits for every other
    such transaction (``LOCK_RECORDS``), before it locks a turn or a row of lexeme_df.

    Each record inserted or deleted updates the lexeme_df rows of its words, in sorted
    order, then the one fts_doc_count row (triggers of migrations 0002 and 0004). Sorted
    order keeps two single-record statements from deadlocking, but a transaction of many
    records takes its locks in one sorted pass per record, and two such transactions
    (extraction jobs in two workers) deadlocked on each other: in bench/ingest against
    Postgres, Postgres aborted one of them after its 1 s deadlock timeout again and
    again, and extraction fell to ~36 turns/s. They all meet on the rows of common words
    and on fts_doc_count anyway, so waiting up front costs almost no concurrency."""

    def __init__(self, conn: psycopg.Connection) -> None:
        self.conn = conn
        self.changed: set[str] = set()  # namespaces whose embeddings changed
        self._records_locked = False

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

    def delete_events(self, event_ids: Sequence[str]) -> int:
        return self.conn.execute(q.DELETE_EVENTS, (list(event_ids),)).rowcount

    def mark_turn_extracted(self, turn_id: str, record_ids: Sequence[str]) -> bool:
        # Before the turn's row lock: the records of the turn come next.
        self._lock_records()
        row = self.conn.execute(
            q.MARK_TURN_EXTRACTED, (utcnow(), list(record_ids), turn_id)
        ).fetchone()
        return row is not None


class PostgresStorage(Storage):
    backend = "postgres"

    def __init__(
        self, url: str, on_change: ChangeHook | None = None, timeout: float = POOL_TIMEOUT_S
    ) -> None:
        """``timeout``: seconds to wait for a pooled connection before the call fails with
        ``TransientStorageError``."""
        self._db = Connector(url, timeout)
        self._on_change = on_change

    # --- events and turns -------------------------------------------------------------
    def put_events(self, events: Sequence[Event]) -> list[PutEventResult]:
        if not events:
            return []
        now = utcnow()
        rows = {id(e): event_params(e, now) for e in events}
        with self._db.connection() as conn, conn.transaction():
            # Lock every session of the batch up front, in one order, so two batches
            # touching the same sessions cannot deadlock.
            for namespace, session_id in turns.sessions(events):
                conn.execute(q.LOCK_SESSION, (f"{namespace}\n{session_id}",))
            ids = [e.event_id for e in events]
            stored = dict(conn.execute(q.EVENTS_TURNS, (ids,)).fetchall())

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
                    (q.INSERT_EVENT, [{**rows[id(e)], "turn_id": t} for e, t in plan.events]),
                ):
                    if params:
                        cur.executemany(sql, params)
        return plan.results

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
            TurnInfo(t, opened, closed, extracted, list(ids))
            for t, opened, closed, extracted, ids in rows
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
        offset: int = 0,
        pinned_first: bool = False,
        count: bool = True,
    ) -> Page:
        ns = lexical.namespace_pattern(namespace)
        exact = NAMESPACE_RE.fullmatch(namespace) is not None
        params = {"ns": ns, "exact": namespace, "limit": limit, "offset": offset}
        total: int | None = None
        # No transaction around the two: under READ COMMITTED each statement takes its
        # own snapshot anyway, and BEGIN and COMMIT cost a round trip each.
        with self._db.connection() as conn:
            rows = conn.execute(q.LIST_RECORDS[pinned_first, exact], params).fetchall()
            if count:
                row = conn.execute(q.COUNT_RECORDS, {"ns": ns}).fetchone()
                total = row[0] if row else 0
        return Page([memory_record(r) for r in rows], total, limit, offset)

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
    def search_lexical(
        self,
        namespace: str,
        query: str,
        limit: int,
        observation_type: str | None = None,
        since: datetime | None = None,
    ) -> list[LexicalHit]:
        params: dict[str, Any] = {
            "ns": lexical.namespace_pattern(namespace),
            "exact": namespace if NAMESPACE_RE.fullmatch(namespace) else None,
            "type": observation_type,
            "since": since,
            "limit": limit,
            "window": max(RECENT_MATCHES, limit),
        }
        query = lexical.encodable(query)
        tokens = lexical.tokenize(query)
        with self._db.connection() as conn:
            rows: list[tuple[Any, ...]] | None = None
            if tokens:
                try:
                    rows = _search_fts(conn, params, tokens)
                except (psycopg.ProgrammingError, psycopg.DataError):
                    rows = None  # the engine refused it: fall through to the substring
            if rows is None:
                pattern = lexical.substring_pattern(query)
                if pattern is None:
                    return []
                rows = conn.execute(q.SEARCH_SUBSTRING, {**params, "pattern": pattern}).fetchall()
        return [LexicalHit(memory_record(r), i) for i, r in enumerate(rows)]

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

    def search_vector(self, namespace: str, vector: np.ndarray, limit: int) -> list[str]:
        """Record ids nearest to ``vector`` (cosine) through the HNSW index; Postgres only,
        for namespaces too large to scan in process."""
        params = {"ns": lexical.namespace_pattern(namespace), "limit": limit}
        with self._db.connection() as conn:
            params["vector"] = check_vector(vector)
            return [r[0] for r in conn.execute(q.SEARCH_VECTOR, params).fetchall()]

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

    # --- stats --------------------------------------------------------------------------
    def stats(self, namespace: str | None = None) -> dict[str, int]:
        with self._db.connection() as conn:
            row = conn.execute(q.STATS, {"ns": lexical.namespace_pattern(namespace)}).fetchone()
        keys = ("events", "memories", "embedded", "pending_extraction", "pending_embedding")
        return dict(zip(keys, row or (0,) * len(keys), strict=True))

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


def _search_fts(
    conn: psycopg.Connection, params: dict[str, Any], tokens: list[str]
) -> list[tuple[Any, ...]] | None:
    """Rows of the OR of the (at most 32 rarest) tokens, without the common ones, topped
    up from the OR of all of them when short; None when no token is usable."""
    found = conn.execute(q.QUERY_TERMS, (tokens,)).fetchall()
    freq = {token: df for token, df, _, _ in found}
    parts = {token: part for token, _, part, _ in found if part}
    total = int(found[0][3]) if found else None

    def tsquery(terms: list[str]) -> str | None:
        return " | ".join(f"({parts[t]})" for t in terms if t in parts) or None

    best = tsquery(lexical.select_terms(tokens, lambda _: freq, total=total))
    if best is None:
        return None
    rows = conn.execute(q.SEARCH_FTS, {**params, "tsquery": best}).fetchall()
    every = tsquery(lexical.select_terms(tokens, lambda _: freq))
    if every is None or every == best:
        return rows
    return lexical.fill(
        rows,
        lambda: conn.execute(q.SEARCH_FTS, {**params, "tsquery": every}).fetchall(),
        lambda r: str(r[0]),
        params["limit"],
    )

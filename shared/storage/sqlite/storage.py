"""``SqliteStorage``: the embedded backend (one file, WAL, per-thread connections)."""

from __future__ import annotations

import json
import logging
import sqlite3
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime
from functools import partial
from pathlib import Path, PurePosixPath, PureWindowsPath
from typing import Any

import numpy as np

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
from wakemark.shared.storage.sqlite import codec, fts
from wakemark.shared.storage.sqlite import queries as q
from wakemark.shared.storage.sqlite.connection import Connections

log = logging.getLogger(__name__)


class SqliteTx(Tx):
    def __init__(self, conn: sqlite3.Connection) -> None:
        self.conn = conn
        self.changed: set[str] = set()  # namespaces whose embeddings changed

    def put_memory_record(self, record: MemoryRecord) -> None:
        try:
            self.conn.execute(q.INSERT_RECORD, codec.record_params(record))
        except sqlite3.IntegrityError as exc:
            if self.conn.execute(q.RECORD_EXISTS, (record.record_id,)).fetchone():
                raise DuplicateRecordError(f"record {record.record_id} already exists") from exc
            raise

    def put_embedding(self, record_id: str, vector: np.ndarray) -> None:
        row = self.conn.execute(
            q.SET_EMBEDDING, (codec.encode_embedding(vector), record_id)
        ).fetchone()
        if row is None:
            raise NotFoundError(f"no memory record {record_id}")
        self.changed.add(row["namespace"])

    def delete_memory_records(self, record_ids: Sequence[str]) -> list[str]:
        rows = self.conn.execute(q.DELETE_RECORDS, (json.dumps(list(record_ids)),)).fetchall()
        self.changed.update(r["namespace"] for r in rows)
        deleted = {r["record_id"] for r in rows}
        return [rid for rid in dict.fromkeys(record_ids) if rid in deleted]

    def delete_events(self, event_ids: Sequence[str]) -> int:
        return self.conn.execute(q.DELETE_EVENTS, (json.dumps(list(event_ids)),)).rowcount

    def mark_turn_extracted(self, turn_id: str, record_ids: Sequence[str]) -> bool:
        params = {
            "turn_id": turn_id,
            "record_ids": json.dumps(list(record_ids)),
            "now": codec.ts(utcnow()),
        }
        return self.conn.execute(q.MARK_TURN_EXTRACTED, params).rowcount == 1


class SqliteStorage(Storage):
    backend = "sqlite"

    def __init__(
        self, path: Path | str, on_change: Callable[[set[str]], None] | None = None
    ) -> None:
        self.path = Path(path)
        self._conns = Connections(self.path)
        self._on_change = on_change
        self._doc_freqs = fts.DocFreqs()

    def _read(self, sql: str, params: Any = ()) -> list[sqlite3.Row]:
        return self._conns.get().execute(sql, params).fetchall()

    # --- events and turns -------------------------------------------------------------
    def put_events(self, events: Sequence[Event]) -> list[PutEventResult]:
        if not events:
            return []
        now = codec.ts(utcnow())
        # Encoded before taking the write lock: only SQL runs while other writers wait.
        rows = {id(e): codec.event_params(e, now) for e in events}
        with self._conns.write() as conn:
            ids = json.dumps([e.event_id for e in events])
            stored = {r[0]: r[1] for r in conn.execute(q.EVENTS_TURNS, (ids,))}

            def open_turn(key: turns.SessionKey) -> str | None:
                row = conn.execute(q.OPEN_TURN, key).fetchone()
                return row[0] if row else None

            plan = turns.plan(events, stored, open_turn)
            conn.executemany(q.CLOSE_TURN, [{"turn_id": t, "now": now} for t in plan.close])
            conn.executemany(q.INSERT_TURN, [t.row(now) for t in plan.new_turns])
            conn.executemany(q.TOUCH_TURN, [{"turn_id": t, "now": now} for t in plan.touch])
            conn.executemany(
                q.INSERT_EVENT, [{**rows[id(e)], "turn_id": t} for e, t in plan.events]
            )
        return plan.results

    def get_event(self, event_id: str) -> StoredEvent | None:
        rows = self._read(q.GET_EVENT, (event_id,))
        return codec.to_event(rows[0]) if rows else None

    def count_events(self, event_ids: Sequence[str]) -> int:
        return int(self._read(q.COUNT_EVENTS, (json.dumps(list(event_ids)),))[0][0])

    def list_events(
        self, namespace: str | None = None, session_id: str | None = None, limit: int = 50
    ) -> list[StoredEvent]:
        params = {
            **lexical.namespace_range(namespace),
            "session_id": session_id,
            "limit": limit,
        }
        exact = namespace is not None and NAMESPACE_RE.fullmatch(namespace) is not None
        sql = q.LIST_EVENTS[exact]
        return [codec.to_event(r) for r in self._read(sql, params)]

    def get_turns(self, turn_ids: Sequence[str]) -> list[Turn]:
        ids = json.dumps(list(turn_ids))
        conn = self._conns.get()
        with _snapshot(conn):
            rows = conn.execute(q.GET_TURNS, (ids,)).fetchall()
            events = conn.execute(q.TURNS_EVENTS, (ids,)).fetchall()
        by_turn: dict[str, list[StoredEvent]] = {}
        for e in events:
            by_turn.setdefault(e["turn_id"], []).append(codec.to_event(e))
        found = {
            r["turn_id"]: Turn(
                turn_id=r["turn_id"],
                namespace=r["namespace"],
                session_id=r["session_id"],
                closed=r["closed_at"] is not None,
                extracted=r["extracted_at"] is not None,
                events=by_turn.get(r["turn_id"], []),
            )
            for r in rows
        }
        return [found[t] for t in dict.fromkeys(turn_ids) if t in found]

    def session_turns(self, namespace: str, session_id: str, limit: int = 200) -> list[TurnInfo]:
        rows = self._read(q.SESSION_TURNS, (namespace, session_id, limit))
        return [
            TurnInfo(
                turn_id=r["turn_id"],
                opened_at=codec.from_ts(r["opened_at"]),
                closed=r["closed_at"] is not None,
                extracted=r["extracted_at"] is not None,
                record_ids=json.loads(r["record_ids"]),
            )
            for r in rows
        ]

    def close_idle_turns(self, idle_before: datetime) -> list[str]:
        params = {"now": codec.ts(utcnow()), "before": codec.ts(idle_before)}
        with self._conns.write() as conn:
            return [r["turn_id"] for r in conn.execute(q.CLOSE_IDLE_TURNS, params).fetchall()]

    def pending_turns(self, limit: int = 1000) -> list[str]:
        return [r["turn_id"] for r in self._read(q.PENDING_TURNS, (limit,))]

    # --- memory records ---------------------------------------------------------------
    @contextmanager
    def transaction(self) -> Iterator[Tx]:
        with self._conns.write() as conn:
            tx = SqliteTx(conn)
            yield tx
        # Reached only after COMMIT: readers told to drop caches will see the new rows.
        self._notify(tx.changed)

    def _notify(self, namespaces: set[str]) -> None:
        if not namespaces or self._on_change is None:
            return
        try:
            self._on_change(set(namespaces))
        except Exception:
            # The write is committed; failing the caller now would invite a retry of
            # work already done. A missed bump only delays cache refresh.
            log.exception("on_change hook failed for %s", sorted(namespaces))

    def get_memory_record(self, record_id: str) -> MemoryRecord | None:
        rows = self._read(q.GET_RECORD, (record_id,))
        return codec.to_record(rows[0]) if rows else None

    def get_memory_records(self, record_ids: Sequence[str]) -> list[MemoryRecord]:
        rows = self._read(q.GET_RECORDS, (json.dumps(list(record_ids)),))
        by_id = {r["record_id"]: codec.to_record(r) for r in rows}
        return [by_id[rid] for rid in record_ids if rid in by_id]

    def list_memory_records(
        self,
        namespace: str,
        limit: int = 50,
        offset: int = 0,
        pinned_first: bool = False,
        count: bool = True,
    ) -> Page:
        ns = lexical.namespace_range(namespace)
        sql = q.LIST_RECORDS[pinned_first, NAMESPACE_RE.fullmatch(ns["ns_lo"]) is not None]
        conn = self._conns.get()
        with _snapshot(conn):  # the page and its total from one snapshot
            rows = conn.execute(sql, {**ns, "limit": limit, "offset": offset}).fetchall()
            total = conn.execute(q.COUNT_RECORDS, ns).fetchone()[0] if count else None
        return Page([codec.to_record(r) for r in rows], total, limit, offset)

    def set_pinned(self, record_id: str, pinned: bool) -> MemoryRecord:
        with self._conns.write() as conn:
            row = conn.execute(q.SET_PINNED, (int(pinned), record_id)).fetchone()
        if row is None:
            raise NotFoundError(f"no memory record {record_id}")
        return codec.to_record(row)

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
            "facts": None if facts is None else json.dumps(list(facts)),
            "facts_text": None if facts is None else "\n".join(facts),
            "now": codec.ts(utcnow()),
        }
        with self._conns.write() as conn:
            row = conn.execute(q.EDIT_RECORD, params).fetchone()
        if row is None:
            raise NotFoundError(f"no memory record {record_id}")
        self._notify({row["namespace"]})  # its vector is gone: caches must drop it
        return codec.to_record(row)

    def find_memory_ids(self, where: MemoryFilter) -> list[str]:
        params = {
            **lexical.namespace_range(where.namespace),
            "observation_type": where.observation_type,
            "before": codec.ts(where.before) if where.before else None,
            "after": codec.ts(where.after) if where.after else None,
            "session_id": where.session_id,
        }
        return [r[0] for r in self._read(q.FIND_RECORDS, params)]

    def timeline(self, record_id: str, before: int, after: int) -> list[MemoryRecord]:
        record = self.get_memory_record(record_id)
        if record is None:
            raise NotFoundError(f"no memory record {record_id}")
        params = {
            "namespace": record.namespace,
            "created_at": codec.ts(record.created_at),
            "record_id": record_id,
        }
        older = self._read(q.TIMELINE_BEFORE, {**params, "n": max(before, 0)})
        newer = self._read(q.TIMELINE_AFTER, {**params, "n": max(after, 0)})
        return [
            *(codec.to_record(r) for r in reversed(older)),
            record,
            *(codec.to_record(r) for r in newer),
        ]

    def has_embedding(self, record_id: str) -> bool:
        rows = self._read(q.HAS_EMBEDDING, (record_id,))
        return bool(rows and rows[0][0])

    # --- search -----------------------------------------------------------------------
    def search_lexical(
        self,
        namespace: str,
        query: str,
        limit: int,
        observation_type: str | None = None,
        since: datetime | None = None,
    ) -> list[LexicalHit]:
        params: dict[str, Any] = {
            **lexical.namespace_range(namespace),
            "observation_type": observation_type,
            "since": codec.ts(since) if since else None,
            "limit": limit,
        }
        query = lexical.encodable(query)
        rows: list[sqlite3.Row] | None = None
        conn = self._conns.get()
        try:
            tokens = lexical.tokenize(query)
            doc_freq = partial(self._doc_freqs.lookup, conn)
            terms = lexical.select_terms(tokens, doc_freq, total=self._doc_freqs.total(conn))
            if terms:
                prefix, exact = fts.scope(conn, namespace)
                filtered = observation_type is not None or since is not None
                sql = q.RANK_FTS if exact and not filtered else q.RANK_FTS_CHECKED

                def search(words: list[str]) -> list[sqlite3.Row]:
                    match = prefix + "(" + lexical.or_query(words) + ")"
                    return _records_by_rank(conn, fts.ranked(conn, sql, params, match), params)

                rows = search(terms)
                every = lexical.select_terms(tokens, doc_freq)
                if every != terms:
                    rows = lexical.fill(rows, lambda: search(every), _rid, limit)
        except sqlite3.OperationalError:
            rows = None  # the engine refused the query: fall through to substring
        if rows is None:
            pattern = lexical.substring_pattern(query)
            rows = self._read(q.SEARCH_SUBSTRING, {**params, "pattern": pattern}) if pattern else []
        return [LexicalHit(codec.to_record(r), rank) for rank, r in enumerate(rows)]

    def list_embeddings(self, namespace: str, since: int | None = None) -> EmbeddingMatrix:
        params = {
            **lexical.namespace_range(namespace),
            "since": -1 if since is None else since,
        }
        conn = self._conns.get()
        with _snapshot(conn):  # watermark, counts and rows from one snapshot
            head = conn.execute(q.EMBEDDINGS_SNAPSHOT, params).fetchone()
            return columns.collect(
                columns.fetch_batches(conn.execute(q.LIST_EMBEDDINGS, params)),
                head["changed"],
                codec.decode_embeddings,
                codec.seconds,
                total=head["total"],
                watermark=head["watermark"],
            )

    def embedded_ids(self, namespace: str) -> list[str]:
        rows = self._read(q.EMBEDDED_IDS, lexical.namespace_range(namespace))
        return [r[0] for r in rows]

    def records_missing_embedding(
        self, limit: int, namespace: str | None = None
    ) -> list[MemoryRecord]:
        params = {**lexical.namespace_range(namespace), "limit": limit}
        return [codec.to_record(r) for r in self._read(q.MISSING_EMBEDDING, params)]

    def clear_embeddings(self, namespace: str | None = None) -> int:
        with self._conns.write() as conn:
            rows = conn.execute(q.CLEAR_EMBEDDINGS, lexical.namespace_range(namespace)).fetchall()
        self._notify({r["namespace"] for r in rows})
        return len(rows)

    # --- stats ------------------------------------------------------------------------
    def stats(self, namespace: str | None = None) -> dict[str, int]:
        row = self._read(q.STATS, lexical.namespace_range(namespace))[0]
        return {key: int(row[key]) for key in row.keys()}  # noqa: SIM118 - Row has no iter

    def projects(self) -> list[dict[str, Any]]:
        return [_project(r) for r in self._read(q.PROJECTS)]

    def ping(self) -> None:
        self._read(q.PING)

    def close(self) -> None:
        self._conns.close()


def _records_by_rank(
    conn: sqlite3.Connection, ranked: list[tuple[int, float]], params: dict[str, Any]
) -> list[sqlite3.Row]:
    """The records of ``(rowid, bm25)`` pairs ordered by (bm25, newest, record id), the
    first ``params["limit"]``; a record deleted (or moved) since it was ranked drops out."""
    score = dict(ranked)
    ids = json.dumps(list(score))
    bounds = {"ns_lo": params["ns_lo"], "ns_hi": params["ns_hi"]}
    rows = conn.execute(q.RANKED_RECORDS, {"ids": ids, **bounds}).fetchall()
    rows.sort(key=_rid)
    rows.sort(key=lambda r: r["created_at"], reverse=True)
    rows.sort(key=lambda r: score[r["id"]])
    return rows[: int(params["limit"])]


def _rid(row: sqlite3.Row) -> str:
    return str(row["record_id"])


@contextmanager
def _snapshot(conn: sqlite3.Connection) -> Iterator[None]:
    if conn.in_transaction:  # already inside this thread's transaction: same snapshot
        yield
        return
    conn.execute("BEGIN")
    try:
        yield
    finally:
        conn.execute("COMMIT")


def _project(row: sqlite3.Row) -> dict[str, Any]:
    namespace: str = row["namespace"]
    project_id = namespace.rstrip("/").rsplit("/", 1)[-1]
    path: str | None = row["project_path"]
    name = None
    if path:
        # Hooks on Windows send backslash paths; either separator ends a component.
        pure = PureWindowsPath(path) if "\\" in path else PurePosixPath(path)
        name = pure.name or None
    return {
        "namespace": namespace,
        "project_id": project_id,
        "display_name": name or project_id,
        "project_path": path,
        "event_count": row["event_count"],
        "memory_count": row["memory_count"],
        "last_activity": codec.from_ts(row["last_activity"]) if row["last_activity"] else None,
    }

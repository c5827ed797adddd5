"""``SqliteStorage``: the embedded backend (one file, WAL, per-thread connections)."""

from __future__ import annotations

import json
import logging
import sqlite3
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path, PurePosixPath, PureWindowsPath
from typing import Any

import numpy as np

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
)
from wakemark.shared.storage.sqlite import codec, fts
from wakemark.shared.storage.sqlite import queries as q
from wakemark.shared.storage.sqlite.connection import Connections

log = logging.getLogger(__name__)


class SqliteTx(Tx):
    def __init__(self, conn: sqlite3.Connection) -> None:
        super().__init__()
        self.conn = conn
        self.changed: set[str] = set()  # namespaces whose embeddings changed

    def put_events(self, events: Sequence[Event]) -> list[PutEventResult]:
        conn = self.conn
        now = codec.ts(utcnow())
        ids = json.dumps(turns.lookup_ids(events))
        stored = {r[0]: (r[1], r[2]) for r in conn.execute(q.EVENTS_TURNS, (ids,))}

        def open_turn(key: turns.SessionKey) -> str | None:
            row = conn.execute(q.OPEN_TURN, key).fetchone()
            return row[0] if row else None

        plan = turns.plan(events, stored, open_turn)
        conn.executemany(q.CLOSE_TURN, [{"turn_id": t, "now": now} for t in plan.close])
        conn.executemany(q.INSERT_TURN, [t.row(now) for t in plan.new_turns])
        conn.executemany(q.TOUCH_TURN, [{"turn_id": t, "now": now} for t in plan.touch])
        conn.executemany(
            q.INSERT_EVENT,
            [{**codec.event_params(e, now), "turn_id": t} for e, t in plan.events],
        )
        _count_added_events(
            conn, [(e.namespace, now, e.source.project_path) for e, _ in plan.events]
        )
        return plan.results

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

    def replace_record_text(self, record: MemoryRecord) -> None:
        row = self.conn.execute(q.REPLACE_RECORD_TEXT, codec.record_params(record)).fetchone()
        if row is None:
            raise NotFoundError(f"no memory record {record.record_id}")
        self.changed.add(row["namespace"])

    def delete_events(self, event_ids: Sequence[str]) -> int:
        return self.conn.execute(q.DELETE_EVENTS, (json.dumps(list(event_ids)),)).rowcount

    def mark_turn_extracted(
        self, turn_id: str, record_ids: Sequence[str], skip_reason: str | None = None
    ) -> bool:
        params = {
            "turn_id": turn_id,
            "record_ids": json.dumps(list(record_ids)),
            "skip_reason": skip_reason,
            "now": codec.ts(utcnow()),
        }
        return self.conn.execute(q.MARK_TURN_EXTRACTED, params).rowcount == 1

    def audit(self, entry: AuditEntry) -> None:
        params = {
            "at": codec.ts(entry.at),
            "who": entry.who,
            "action": entry.action,
            "namespace": entry.namespace,
            "targets": json.dumps(list(entry.targets)),
            "count": entry.count,
        }
        self.conn.execute(q.INSERT_AUDIT, params)

    def put_token(self, token: ApiToken, secret_sha256: str) -> None:
        params = {
            **{k: _opt_ts(v) for k, v in vars(token).items()},
            "read_only": int(token.read_only),
            "secret_sha256": secret_sha256,
        }
        self.conn.execute(q.INSERT_TOKEN, params)

    def revoke_token(self, token_id: str, when: datetime) -> bool:
        return self.conn.execute(q.REVOKE_TOKEN, (codec.ts(when), token_id)).rowcount == 1


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
    def get_event(self, event_id: str) -> StoredEvent | None:
        rows = self._read(q.GET_EVENT, (event_id,))
        return codec.to_event(rows[0]) if rows else None

    def events_after(self, after: str | None, limit: int) -> list[StoredEvent]:
        return [codec.to_event(r) for r in self._read(q.EVENTS_AFTER, (after or "", limit))]

    def rewrite_events(self, events: Sequence[Event]) -> int:
        rows = [(e.body_json(), e.source.model_dump_json(), e.actor_id, e.event_id) for e in events]
        with self._conns.write() as conn:
            return sum(conn.execute(q.REWRITE_EVENT, row).rowcount for row in rows)

    def rename_session(self, namespace: str, old: str, new: str) -> int:
        params = {"namespace": namespace, "old": old, "new": new}
        with self._conns.write() as conn:
            return [conn.execute(sql, params).rowcount for sql in q.RENAME_SESSION][-1]

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

    # --- retrieval audit ------------------------------------------------------------------
    def put_retrieval(self, retrieval: Retrieval) -> None:
        params = {
            "retrieval_id": retrieval.retrieval_id,
            "event_id": retrieval.event_id,
            "namespace": retrieval.namespace,
            "session_id": retrieval.session_id,
            "created_at": codec.ts(retrieval.created_at),
            "body": retrieval.body_json(),
        }
        try:
            with self._conns.write() as conn:
                conn.execute(q.INSERT_RETRIEVAL, params)
        except sqlite3.IntegrityError as exc:
            raise NotFoundError(f"no prompt event {retrieval.event_id}") from exc

    def get_retrieval(self, retrieval_id: str) -> Retrieval | None:
        rows = self._read(q.GET_RETRIEVAL, (retrieval_id,))
        return _retrieval(rows[0]) if rows else None

    def list_retrievals(
        self,
        namespace: str | None = None,
        session_id: str | None = None,
        limit: int = 50,
        after: tuple[datetime, str] | None = None,
    ) -> list[Retrieval]:
        params = {**lexical.namespace_range(namespace), "session_id": session_id, "limit": limit}
        if after is not None:
            params.update(after_at=codec.ts(after[0]), after_id=after[1])
        sql = q.LIST_RETRIEVALS[session_id is not None, after is not None]
        return [_retrieval(r) for r in self._read(sql, params)]

    def retrieval_sessions(
        self, namespace: str, limit: int = 50, after: tuple[datetime, str] | None = None
    ) -> list[RetrievalSession]:
        params: dict[str, Any] = {"namespace": namespace, "limit": limit}
        if after is not None:
            params.update(after_at=codec.ts(after[0]), after_id=after[1])
        rows = self._read(q.RETRIEVAL_SESSIONS[after is not None], params)
        return [
            RetrievalSession(
                **{k: r[k] for k in r.keys() if k not in ("first_at", "last_at")},  # noqa: SIM118
                first_at=codec.from_ts(r["first_at"]),
                last_at=codec.from_ts(r["last_at"]),
            )
            for r in rows
        ]

    def retrieval_totals(self, namespace: str | None = None) -> dict[str, float]:
        row = self._read(q.RETRIEVAL_TOTALS, lexical.namespace_range(namespace))[0]
        return {k: row[k] for k in row.keys()}  # noqa: SIM118 - Row has no iter

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
                skip_reason=r["skip_reason"],
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
        tx.committed()

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
        after: PageKey | None = None,
        pinned_first: bool = False,
        count: bool = True,
    ) -> Page:
        ns = lexical.namespace_range(namespace)
        exact = NAMESPACE_RE.fullmatch(ns["ns_lo"]) is not None
        sql = q.LIST_RECORDS[pinned_first, exact, after is not None]
        params: dict[str, Any] = {**ns, "limit": limit}
        if after is not None:
            params.update(
                after_at=codec.ts(after.created_at),
                after_id=after.record_id,
                after_pinned=int(after.pinned),
            )
        conn = self._conns.get()
        with _snapshot(conn):  # the page and its total from one snapshot
            rows = conn.execute(sql, params).fetchall()
            total = conn.execute(q.COUNT_RECORDS, ns).fetchone()[0] if count else None
        return Page.of([codec.to_record(r) for r in rows], total, limit)

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
            "pinned": None if where.pinned is None else int(where.pinned),
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
    def term_stats(self, tokens: Sequence[str]) -> TermStats | None:
        conn = self._conns.get()
        try:
            return TermStats(self._doc_freqs.lookup(conn, tokens), self._doc_freqs.total(conn))
        except sqlite3.OperationalError:
            return None

    def search_terms(
        self,
        namespace: str,
        terms: Sequence[str],
        limit: int,
        observation_type: str | None = None,
        since: datetime | None = None,
        timeout_s: float | None = None,
        *,
        stats: TermStats,  # FTS5 ranks with its own
    ) -> list[MemoryRecord] | None:
        params = _search_params(namespace, limit, observation_type, since)
        if not terms:
            return None
        conn = self._conns.get()
        with _bounded(conn, timeout_s, "full-text search"):
            try:
                prefix, exact = fts.scope(conn, namespace)
                filtered = observation_type is not None or since is not None
                sql = q.RANK_FTS if exact and not filtered else q.RANK_FTS_CHECKED
                match = prefix + "(" + lexical.or_query(terms) + ")"
                rows = _records_by_rank(conn, fts.ranked(conn, sql, params, match), params)
            except sqlite3.OperationalError as exc:
                if str(exc) == INTERRUPTED:  # past the deadline, not a refused query
                    raise
                return None
        return [codec.to_record(r) for r in rows]

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
        with _bounded(self._conns.get(), timeout_s, "substring search"):
            rows = self._read(q.SEARCH_SUBSTRING, {**params, "pattern": pattern})
        return [codec.to_record(r) for r in rows]

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
        found = []
        with _bounded(self._conns.get(), timeout_s, "fragment search"):
            for fragment in dict.fromkeys(lexical.encodable(f) for f in fragments):
                if len(fragment) >= lexical.TRIGRAM_CHARS:
                    match = lexical.quote_term(fragment)
                    rows = self._read(q.SEARCH_TRIGRAM, {**params, "match": match})
                    found.append([codec.to_record(r) for r in rows])
                elif fragment.strip():
                    found.append(
                        self.search_substring(namespace, fragment, window, observation_type, since)
                    )
        return lexical.rank_fragments(found, limit)

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

    # --- export and import ------------------------------------------------------------
    def export_records(
        self, namespace: str | None, after: str | None, limit: int, vectors: bool
    ) -> list[tuple[MemoryRecord, np.ndarray | None]]:
        params = {
            **lexical.namespace_range(namespace),
            "after": after or "",
            "limit": limit,
            "vectors": int(vectors),
        }
        out: list[tuple[MemoryRecord, np.ndarray | None]] = []
        for row in self._read(q.EXPORT_RECORDS, params):
            blob = row["embedding"]
            vector = None
            if blob is not None:
                vector = codec.decode_embeddings([blob], [row["record_id"]])[0]
            out.append((codec.to_record(row), vector))
        return out

    def export_turns(
        self, namespace: str | None, after: str | None, limit: int
    ) -> list[tuple[TurnRow, list[StoredEvent]]]:
        params = {**lexical.namespace_range(namespace), "after": after or "", "limit": limit}
        conn = self._conns.get()
        with _snapshot(conn):
            rows = conn.execute(q.EXPORT_TURNS, params).fetchall()
            ids = json.dumps([r["turn_id"] for r in rows])
            events = conn.execute(q.TURNS_EVENTS, (ids,)).fetchall()
        by_turn: dict[str, list[StoredEvent]] = {}
        for e in events:
            by_turn.setdefault(e["turn_id"], []).append(codec.to_event(e))
        return [(codec.to_turn_row(r), by_turn.get(r["turn_id"], [])) for r in rows]

    def import_batch(self, batch: ImportBatch, commit: bool = True) -> ImportCounts:
        changed: set[str] = set()
        try:
            with self._conns.write() as conn:
                records = vectors = 0
                for record, vector in batch.records:
                    if conn.execute(q.IMPORT_RECORD, codec.record_params(record)).rowcount:
                        records += 1
                        if vector is not None:
                            conn.execute(
                                q.SET_EMBEDDING,
                                (codec.encode_embedding(vector), record.record_id),
                            ).fetchall()
                            vectors += 1
                            changed.add(record.namespace)
                turns_written = sum(
                    conn.execute(q.IMPORT_TURN, codec.turn_row_params(t)).rowcount
                    for t in batch.turns
                )
                added = []
                for e in batch.events:
                    at = codec.ts(e.transaction_time)
                    params = {**codec.event_params(e, at), "turn_id": e.turn_id}
                    if conn.execute(q.IMPORT_EVENT, params).rowcount:
                        added.append((e.namespace, at, e.source.project_path))
                _count_added_events(conn, added)
                events = len(added)
                counts = ImportCounts(records, vectors, turns_written, events)
                if not commit:
                    raise _RollBack
        except _RollBack:
            return counts
        self._notify(changed)
        return counts

    # --- retention and size -----------------------------------------------------------
    def trimmable_turns(self, extracted_before: datetime, limit: int) -> list[str]:
        return [r[0] for r in self._read(q.TRIMMABLE_TURNS, (codec.ts(extracted_before), limit))]

    def trim_turns(self, bodies: Mapping[str, Mapping[str, str]]) -> int:
        now = codec.ts(utcnow())
        with self._conns.write() as conn:
            added = []
            for turn_id, events in bodies.items():
                for event_id, body in events.items():
                    key = {"event_id": event_id, "turn_id": turn_id}
                    row = conn.execute(q.TRIM_DELETE_EVENT, key).fetchone()
                    if row is not None:
                        conn.execute(q.TRIM_INSERT_EVENT, {**dict(row), "body": body})
                        path = json.loads(row["source"]).get("project_path")
                        added.append((row["namespace"], row["transaction_time"], path))
                conn.execute(q.MARK_TRIMMED, {"now": now, "turn_id": turn_id})
            # The delete trigger took each re-inserted event off its project's count.
            _count_added_events(conn, added)
        return len(added)

    def expire_turns(self, extracted_before: datetime, limit: int) -> tuple[int, int]:
        with self._conns.write() as conn:
            rows = conn.execute(q.EXPIRABLE_TURNS, (codec.ts(extracted_before), limit))
            ids = json.dumps([r[0] for r in rows.fetchall()])
            events = conn.execute(q.EXPIRE_EVENTS, (ids,)).rowcount
            return conn.execute(q.EXPIRE_TURNS, (ids,)).rowcount, events

    def delete_retrievals(self, created_before: datetime) -> int:
        with self._conns.write() as conn:
            return conn.execute(q.DELETE_RETRIEVALS, (codec.ts(created_before),)).rowcount

    def merge_indexes(self) -> None:
        with self._conns.write() as conn:
            for table in q.FTS_TABLES:
                conn.execute(
                    f"INSERT INTO {table} ({table}, rank) VALUES ('merge', ?)",
                    (q.FTS_MERGE_PAGES,),
                )

    def compact(self) -> list[str]:
        with self._conns.exclusive() as conn:
            before = _file_bytes(conn)
            # A deleted or rewritten record leaves a tombstone in the full-text indexes
            # until a merge reaches its segment; 'optimize' merges each into one segment.
            for table in q.FTS_TABLES:
                conn.execute(f"INSERT INTO {table} ({table}) VALUES ('optimize')")
            # auto_vacuum=INCREMENTAL (2) can hand free pages back without a rewrite;
            # NONE (0, the default) and FULL (1) need VACUUM, which rewrites the file.
            if conn.execute("PRAGMA auto_vacuum").fetchone()[0] == 2:
                conn.execute("PRAGMA incremental_vacuum").fetchall()
                done = "incremental vacuum"
            else:
                conn.execute("VACUUM")
                done = "VACUUM"
            # The rewritten pages sit in the WAL until a checkpoint copies them back.
            busy = conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()[0]
            after = _file_bytes(conn)
        lines = [f"{done}: {self.path} {before:,} -> {after:,} bytes"]
        if busy:
            lines.append(
                "a reader kept the WAL from being truncated; it shrinks at the next checkpoint"
            )
        return lines

    def disk_usage(self) -> DiskUsage:
        conn = self._conns.get()
        tables = {r["tbl"]: int(r["bytes"]) for r in conn.execute(q.TABLE_SIZES)}
        free = conn.execute("PRAGMA freelist_count").fetchone()[0]
        tables["(free pages)"] = free * conn.execute("PRAGMA page_size").fetchone()[0]
        return DiskUsage(
            total=_file_bytes(conn),
            tables=tables,
            projects=columns.project_sizes(
                conn.execute(q.EVENT_BYTES), conn.execute(q.RECORD_BYTES)
            ),
        )

    def database_bytes(self) -> int:
        files = (self.path, self.path.with_name(self.path.name + "-wal"))
        return sum(f.stat().st_size for f in files if f.exists())

    # --- tokens and audit -------------------------------------------------------------
    def token_by_hash(self, secret_sha256: str) -> ApiToken | None:
        rows = self._read(q.TOKEN_BY_HASH, (secret_sha256,))
        return _token(rows[0]) if rows else None

    def list_tokens(self) -> list[ApiToken]:
        return [_token(r) for r in self._read(q.LIST_TOKENS)]

    def touch_token(self, token_id: str, when: datetime) -> None:
        with self._conns.write() as conn:
            conn.execute(q.TOUCH_TOKEN, (codec.ts(when), token_id))

    def list_audit(self, limit: int = 100) -> list[AuditEntry]:
        return [
            AuditEntry(
                id=r["id"],
                at=codec.from_ts(r["at"]),
                who=r["who"],
                action=r["action"],
                namespace=r["namespace"],
                targets=tuple(json.loads(r["targets"])),
                count=r["count"],
            )
            for r in self._read(q.LIST_AUDIT, (limit,))
        ]

    # --- stats ------------------------------------------------------------------------
    def stats(self, namespace: str | None = None) -> dict[str, int]:
        row = self._read(q.STATS, lexical.namespace_range(namespace))[0]
        return {key: int(row[key]) for key in row.keys()}  # noqa: SIM118 - Row has no iter

    def skipped_turns(self) -> dict[str, int]:
        return {r["skip_reason"]: int(r["n"]) for r in self._read(q.SKIPPED_TURNS)}

    def projects(self) -> list[dict[str, Any]]:
        return [_project(r) for r in self._read(q.PROJECTS)]

    def ping(self) -> None:
        self._read(q.PING)

    def close(self) -> None:
        self._conns.close()


def _search_params(
    namespace: str, limit: int, observation_type: str | None, since: datetime | None
) -> dict[str, Any]:
    return {
        **lexical.namespace_range(namespace),
        "observation_type": observation_type,
        "since": codec.ts(since) if since else None,
        "limit": limit,
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


def _file_bytes(conn: sqlite3.Connection) -> int:
    pages = conn.execute("PRAGMA page_count").fetchone()[0]
    return int(pages * conn.execute("PRAGMA page_size").fetchone()[0])


def _count_added_events(
    conn: sqlite3.Connection, added: Sequence[tuple[str, str, str | None]]
) -> None:
    """Adds ``(namespace, transaction_time, project_path)`` of events just inserted to
    their projects' counts, one upsert a project. Of the paths, the newest wins, and of
    equal times the one inserted last (as an event at a time would have it)."""
    rows: dict[str, dict[str, Any]] = {}
    for namespace, at, path in added:
        row = rows.setdefault(
            namespace,
            {"namespace": namespace, "events": 0, "last_event_at": at,
             "project_path": None, "project_path_at": None},
        )  # fmt: skip
        row["events"] += 1
        row["last_event_at"] = max(row["last_event_at"], at)
        if path is not None and at >= (row["project_path_at"] or ""):
            row["project_path"], row["project_path_at"] = path, at
    conn.executemany(q.COUNT_ADDED_EVENTS, rows.values())


class _RollBack(Exception):
    """Raised inside a write transaction to roll it back (a dry-run import)."""


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


def _opt_ts(value: Any) -> Any:
    return codec.ts(value) if isinstance(value, datetime) else value


def _token(row: sqlite3.Row) -> ApiToken:
    times = ("created_at", "expires_at", "revoked_at", "last_used_at")
    values = {k: row[k] for k in row.keys()}  # noqa: SIM118 - Row has no iter
    values.update({k: codec.from_ts(values[k]) if values[k] else None for k in times})
    return ApiToken(**{**values, "read_only": bool(values["read_only"])})


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


def _retrieval(row: sqlite3.Row) -> Retrieval:
    return Retrieval(
        retrieval_id=row["retrieval_id"],
        event_id=row["event_id"],
        namespace=row["namespace"],
        session_id=row["session_id"],
        created_at=codec.from_ts(row["created_at"]),
        **json.loads(row["body"]),
    )

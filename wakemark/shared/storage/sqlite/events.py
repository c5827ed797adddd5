"""Events and turns of the SQLite backend."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from wakemark.shared.models import NAMESPACE_RE, Event, StoredEvent, utcnow
from wakemark.shared.storage import lexical, turns
from wakemark.shared.storage.ports.events import PutEventResult, Turn, TurnInfo
from wakemark.shared.storage.sqlite import codec
from wakemark.shared.storage.sqlite.base import NS, SqliteBase, SqliteTxBase, snapshot

EVENTS_TURNS = """
SELECT event_id, turn_id, namespace FROM events WHERE event_id IN (SELECT value FROM json_each(?))
"""

INSERT_EVENT = """
INSERT INTO events (event_id, parent_event_id, session_id, actor_id, namespace, kind, body,
                    valid_time, source, schema_version, transaction_time, turn_id)
VALUES (:event_id, :parent_event_id, :session_id, :actor_id, :namespace, :kind, :body,
        :valid_time, :source, :schema_version, :transaction_time, :turn_id)
"""

# How a project's row takes in more events (written, or moved in from another project):
# project_path is the newest one seen.
INSERT_EVENT_COUNTS = """
INSERT INTO namespace_event_counts (namespace, events, last_event_at, project_path,
                                    project_path_at)
"""
MERGE_EVENT_COUNTS = """
ON CONFLICT (namespace) DO UPDATE SET
    events = events + excluded.events,
    last_event_at = max(coalesce(last_event_at, ''), excluded.last_event_at),
    project_path = CASE WHEN excluded.project_path_at >= coalesce(project_path_at, '')
                        THEN excluded.project_path ELSE project_path END,
    project_path_at = CASE WHEN excluded.project_path_at >= coalesce(project_path_at, '')
                           THEN excluded.project_path_at ELSE project_path_at END
"""
# One row per project for the events a write added (``count_added_events``): the
# migrations' delete trigger takes them off again.
COUNT_ADDED_EVENTS = (
    INSERT_EVENT_COUNTS
    + "VALUES (:namespace, :events, :last_event_at, :project_path, :project_path_at)"
    + MERGE_EVENT_COUNTS
)

GET_EVENT = "SELECT * FROM events WHERE event_id = ?"

EVENTS_AFTER = "SELECT * FROM events WHERE event_id > ? ORDER BY event_id LIMIT ?"

REWRITE_EVENT = "UPDATE events SET body = ?, source = ?, actor_id = ? WHERE event_id = ?"

# rename_session: the statements in order, all with :namespace, :old, :new.
RENAME_SESSION = (
    """UPDATE turns SET closed_at = last_event_at
    WHERE namespace = :namespace AND session_id = :old AND closed_at IS NULL
      AND EXISTS (SELECT 1 FROM turns WHERE namespace = :namespace AND session_id = :new
                  AND closed_at IS NULL)""",
    "UPDATE turns SET session_id = :new WHERE namespace = :namespace AND session_id = :old",
    "UPDATE retrievals SET session_id = :new WHERE namespace = :namespace AND session_id = :old",
    "UPDATE events SET session_id = :new WHERE namespace = :namespace AND session_id = :old",
)

# Keyed by "one full namespace": then the order comes straight off events_by_namespace
# (a range would sort every event of the namespace first: ~100 ms at 150k events).
LIST_EVENTS = {
    exact: f"""
SELECT * FROM events
WHERE {"namespace = :ns_lo" if exact else NS}
  AND (:session_id IS NULL OR session_id = :session_id)
ORDER BY transaction_time DESC, event_id DESC LIMIT :limit
"""
    for exact in (False, True)
}

OPEN_TURN = "SELECT turn_id FROM turns WHERE namespace = ? AND session_id = ? AND closed_at IS NULL"

INSERT_TURN = """
INSERT INTO turns (turn_id, namespace, session_id, opened_at, last_event_at, closed_at)
VALUES (:turn_id, :namespace, :session_id, :now, :now, :closed_at)
"""

TOUCH_TURN = "UPDATE turns SET last_event_at = :now WHERE turn_id = :turn_id"

CLOSE_TURN = "UPDATE turns SET closed_at = :now WHERE turn_id = :turn_id AND closed_at IS NULL"

GET_TURNS = "SELECT * FROM turns WHERE turn_id IN (SELECT value FROM json_each(?))"

TURNS_EVENTS = """
SELECT * FROM events WHERE turn_id IN (SELECT value FROM json_each(?))
ORDER BY turn_id, valid_time, event_id
"""

SESSION_TURNS = """
SELECT turn_id, opened_at, closed_at, extracted_at, record_ids, skip_reason FROM turns
WHERE namespace = ? AND session_id = ? ORDER BY opened_at, turn_id LIMIT ?
"""

TURNS_BEFORE = """
SELECT p.turn_id FROM turns t JOIN turns p
    ON p.session_id = t.session_id AND p.namespace = t.namespace
   AND (p.opened_at < t.opened_at OR (p.opened_at = t.opened_at AND p.turn_id < t.turn_id))
 WHERE t.turn_id = ? ORDER BY p.opened_at DESC, p.turn_id DESC LIMIT ?
"""

COUNT_EVENTS = "SELECT count(*) FROM events WHERE event_id IN (SELECT value FROM json_each(?))"

DELETE_EVENTS = "DELETE FROM events WHERE event_id IN (SELECT value FROM json_each(?))"

CLOSE_IDLE_TURNS = """
UPDATE turns SET closed_at = :now WHERE closed_at IS NULL AND last_event_at < :before
RETURNING turn_id
"""

PENDING_TURNS = """
SELECT turn_id FROM turns WHERE closed_at IS NOT NULL AND extracted_at IS NULL
ORDER BY closed_at, turn_id LIMIT ?
"""

# Conditional: of two workers racing on one turn, exactly one sees rowcount 1. Only a
# closed turn is marked, so no later event can join a turn whose records are written.
MARK_TURN_EXTRACTED = """
UPDATE turns SET extracted_at = :now, record_ids = :record_ids, skip_reason = :skip_reason,
                 repeat_of = :repeat_of
WHERE turn_id = :turn_id AND extracted_at IS NULL AND closed_at IS NOT NULL
"""


class SqliteEventsTx(SqliteTxBase):
    def put_events(self, events: Sequence[Event]) -> list[PutEventResult]:
        conn = self.conn
        now = codec.ts(utcnow())
        ids = json.dumps(turns.lookup_ids(events))
        stored = {r[0]: (r[1], r[2]) for r in conn.execute(EVENTS_TURNS, (ids,))}

        def open_turn(key: turns.SessionKey) -> str | None:
            row = conn.execute(OPEN_TURN, key).fetchone()
            return row[0] if row else None

        plan = turns.plan(events, stored, open_turn)
        conn.executemany(CLOSE_TURN, [{"turn_id": t, "now": now} for t in plan.close])
        conn.executemany(INSERT_TURN, [t.row(now) for t in plan.new_turns])
        conn.executemany(TOUCH_TURN, [{"turn_id": t, "now": now} for t in plan.touch])
        conn.executemany(
            INSERT_EVENT,
            [{**codec.event_params(e, now), "turn_id": t} for e, t in plan.events],
        )
        count_added_events(
            conn, [(e.namespace, now, e.source.project_path) for e, _ in plan.events]
        )
        return plan.results

    def delete_events(self, event_ids: Sequence[str]) -> int:
        return self.conn.execute(DELETE_EVENTS, (json.dumps(list(event_ids)),)).rowcount

    def mark_turn_extracted(
        self,
        turn_id: str,
        record_ids: Sequence[str],
        skip_reason: str | None = None,
        repeat_of: str | None = None,
    ) -> bool:
        params = {
            "turn_id": turn_id,
            "record_ids": json.dumps(list(record_ids)),
            "skip_reason": skip_reason,
            "repeat_of": repeat_of,
            "now": codec.ts(utcnow()),
        }
        return self.conn.execute(MARK_TURN_EXTRACTED, params).rowcount == 1


class SqliteEvents(SqliteBase):
    def get_event(self, event_id: str) -> StoredEvent | None:
        rows = self._read(GET_EVENT, (event_id,))
        return codec.to_event(rows[0]) if rows else None

    def events_after(self, after: str | None, limit: int) -> list[StoredEvent]:
        return [codec.to_event(r) for r in self._read(EVENTS_AFTER, (after or "", limit))]

    def rewrite_events(self, events: Sequence[Event]) -> int:
        rows = [(e.body_json(), e.source.model_dump_json(), e.actor_id, e.event_id) for e in events]
        with self._conns.write() as conn:
            return sum(conn.execute(REWRITE_EVENT, row).rowcount for row in rows)

    def rename_session(self, namespace: str, old: str, new: str) -> int:
        params = {"namespace": namespace, "old": old, "new": new}
        with self._conns.write() as conn:
            return [conn.execute(sql, params).rowcount for sql in RENAME_SESSION][-1]

    def count_events(self, event_ids: Sequence[str]) -> int:
        return int(self._read(COUNT_EVENTS, (json.dumps(list(event_ids)),))[0][0])

    def list_events(
        self, namespace: str | None = None, session_id: str | None = None, limit: int = 50
    ) -> list[StoredEvent]:
        params = {
            **lexical.namespace_range(namespace),
            "session_id": session_id,
            "limit": limit,
        }
        exact = namespace is not None and NAMESPACE_RE.fullmatch(namespace) is not None
        sql = LIST_EVENTS[exact]
        return [codec.to_event(r) for r in self._read(sql, params)]

    def get_turns(self, turn_ids: Sequence[str]) -> list[Turn]:
        ids = json.dumps(list(turn_ids))
        conn = self._conns.get()
        with snapshot(conn):
            rows = conn.execute(GET_TURNS, (ids,)).fetchall()
            events = conn.execute(TURNS_EVENTS, (ids,)).fetchall()
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

    def turns_before(self, turn_id: str, limit: int) -> list[str]:
        return [r["turn_id"] for r in self._read(TURNS_BEFORE, (turn_id, limit))]

    def session_turns(self, namespace: str, session_id: str, limit: int = 200) -> list[TurnInfo]:
        rows = self._read(SESSION_TURNS, (namespace, session_id, limit))
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
            return [r["turn_id"] for r in conn.execute(CLOSE_IDLE_TURNS, params).fetchall()]

    def pending_turns(self, limit: int = 1000) -> list[str]:
        return [r["turn_id"] for r in self._read(PENDING_TURNS, (limit,))]


def count_added_events(
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
    conn.executemany(COUNT_ADDED_EVENTS, rows.values())

"""Events and turns of the Postgres backend."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

import psycopg

from wakemark.shared.models import NAMESPACE_RE, Event, StoredEvent, utcnow
from wakemark.shared.storage import lexical, turns
from wakemark.shared.storage.ports.events import PutEventResult, Turn, TurnInfo
from wakemark.shared.storage.postgres.base import (
    NAMESPACE_LOCK,
    NS,
    PostgresBase,
    PostgresTxBase,
)
from wakemark.shared.storage.postgres.connection import REPEATABLE_READ
from wakemark.shared.storage.postgres.rows import (
    event_params,
    stored_event,
)

EVENT_COLUMNS = (
    "event_id, parent_event_id, session_id, actor_id, namespace, kind, body, valid_time,"
    " source_surface, source_version, project_path, schema_version, transaction_time, turn_id"
)

# Serializes turn bookkeeping per session across processes (key: schema, namespace and
# session; the schema as in base.LOCK_RECORDS), and holds off a move of the namespace.
LOCK_SESSION = f"""
SELECT pg_advisory_xact_lock_shared({NAMESPACE_LOCK}),
       pg_advisory_xact_lock(hashtextextended(current_schema() || ':' || %(session)s, 0))
"""

# One statement for a whole batch, a column array each (in EVENT_COLUMNS order): the
# count trigger of migration 0013 then runs once per batch, not once per event, and
# takes the count rows of a batch spanning projects in namespace order (no deadlock).
EVENT_COLUMN_TYPES = (
    "text", "text", "text", "text", "text", "text", "text", "timestamptz", "text", "text",
    "text", "int", "timestamptz", "text",
)  # fmt: skip

INSERT_EVENTS = f"""
INSERT INTO events ({EVENT_COLUMNS})
SELECT * FROM unnest({", ".join(f"%s::{t}[]" for t in EVENT_COLUMN_TYPES)})
ON CONFLICT (event_id) DO NOTHING
"""

EVENTS_TURNS = "SELECT event_id, turn_id, namespace FROM events WHERE event_id = ANY(%s)"

# FOR UPDATE: an idle sweep closing this turn waits for us, then re-checks last_event_at.
OPEN_TURN = """
SELECT turn_id FROM turns
 WHERE namespace = %s AND session_id = %s AND closed_at IS NULL
   FOR UPDATE
"""

INSERT_TURN = """
INSERT INTO turns (turn_id, namespace, session_id, opened_at, last_event_at, closed_at)
VALUES (%(turn_id)s, %(namespace)s, %(session_id)s, %(now)s, %(now)s, %(closed_at)s)
"""

TOUCH_TURN = "UPDATE turns SET last_event_at = %s WHERE turn_id = %s"

CLOSE_TURN = "UPDATE turns SET closed_at = %s WHERE turn_id = %s AND closed_at IS NULL"

GET_EVENT = f"SELECT {EVENT_COLUMNS} FROM events WHERE event_id = %s"

EVENTS_AFTER = f"SELECT {EVENT_COLUMNS} FROM events WHERE event_id > %s ORDER BY event_id LIMIT %s"

REWRITE_EVENT = """
UPDATE events SET body = %s, source_surface = %s, source_version = %s, project_path = %s,
    actor_id = %s
WHERE event_id = %s
"""

# rename_session: the statements in order, all with %(namespace)s, %(old)s, %(new)s.
RENAME_SESSION = (
    """UPDATE turns SET closed_at = last_event_at
    WHERE namespace = %(namespace)s AND session_id = %(old)s AND closed_at IS NULL
      AND EXISTS (SELECT 1 FROM turns WHERE namespace = %(namespace)s
                  AND session_id = %(new)s AND closed_at IS NULL)""",
    "UPDATE turns SET session_id = %(new)s WHERE namespace = %(namespace)s"
    " AND session_id = %(old)s",
    "UPDATE retrievals SET session_id = %(new)s WHERE namespace = %(namespace)s"
    " AND session_id = %(old)s",
    "UPDATE events SET session_id = %(new)s WHERE namespace = %(namespace)s"
    " AND session_id = %(old)s",
)

# Keyed by "one full namespace": then the order comes straight off
# events_namespace_recent (a LIKE would sort every event of the namespace first).
LIST_EVENTS = {
    exact: f"""
SELECT {EVENT_COLUMNS} FROM events
 WHERE {"namespace = %(exact)s" if exact else "namespace " + NS}
   AND (%(session_id)s::text IS NULL OR session_id = %(session_id)s)
 ORDER BY transaction_time DESC, event_id DESC
 LIMIT %(limit)s
"""
    for exact in (False, True)
}

GET_TURNS = """
SELECT turn_id, namespace, session_id, closed_at IS NOT NULL, extracted_at IS NOT NULL
  FROM turns WHERE turn_id = ANY(%s)
"""

TURNS_EVENTS = f"""
SELECT {EVENT_COLUMNS} FROM events WHERE turn_id = ANY(%s) ORDER BY turn_id, valid_time, event_id
"""

SESSION_TURNS = """
SELECT turn_id, opened_at, closed_at IS NOT NULL, extracted_at IS NOT NULL, record_ids,
       skip_reason
  FROM turns WHERE namespace = %s AND session_id = %s ORDER BY opened_at, turn_id LIMIT %s
"""

TURNS_BEFORE = """
SELECT p.turn_id FROM turns t JOIN turns p
    ON p.session_id = t.session_id AND p.namespace = t.namespace
   AND (p.opened_at, p.turn_id) < (t.opened_at, t.turn_id)
 WHERE t.turn_id = %s ORDER BY p.opened_at DESC, p.turn_id DESC LIMIT %s
"""

COUNT_EVENTS = "SELECT count(*) FROM events WHERE event_id = ANY(%s::text[])"

DELETE_EVENTS = "DELETE FROM events WHERE event_id = ANY(%s::text[])"

CLOSE_IDLE_TURNS = """
UPDATE turns SET closed_at = %(now)s
 WHERE closed_at IS NULL AND last_event_at < %(idle_before)s
RETURNING turn_id
"""

PENDING_TURNS = """
SELECT turn_id FROM turns
 WHERE closed_at IS NOT NULL AND extracted_at IS NULL
 ORDER BY opened_at, turn_id
 LIMIT %s
"""

# As SQLite's: one of two racing workers gets the row, and only a closed turn is marked.
MARK_TURN_EXTRACTED = """
UPDATE turns SET extracted_at = %s, record_ids = %s, skip_reason = %s, repeat_of = %s
 WHERE turn_id = %s AND extracted_at IS NULL AND closed_at IS NOT NULL
RETURNING turn_id
"""


class PostgresEventsTx(PostgresTxBase):
    def put_events(self, events: Sequence[Event]) -> list[PutEventResult]:
        conn = self.conn
        now = utcnow()
        # Lock every session of the batch up front, in one order, so two batches
        # touching the same sessions cannot deadlock.
        for namespace, session_id in turns.sessions(events):
            key = {"namespace": namespace, "session": f"{namespace}\n{session_id}"}
            conn.execute(LOCK_SESSION, key)
        ids = turns.lookup_ids(events)
        stored = {r[0]: (r[1], r[2]) for r in conn.execute(EVENTS_TURNS, (ids,)).fetchall()}

        def open_turn(key: turns.SessionKey) -> str | None:
            row = conn.execute(OPEN_TURN, key).fetchone()
            return row[0] if row else None

        plan = turns.plan(events, stored, open_turn)
        with conn.cursor() as cur:
            # executemany() costs a round trip even with nothing to send: a single
            # event has one or two of these four lists non-empty.
            for sql, params in (
                (CLOSE_TURN, [(now, t) for t in plan.close]),
                (INSERT_TURN, [t.row(now) for t in plan.new_turns]),
                (TOUCH_TURN, [(now, t) for t in plan.touch]),
            ):
                if params:
                    cur.executemany(sql, params)
            insert_events(cur, [{**event_params(e, now), "turn_id": t} for e, t in plan.events])
        return plan.results

    def delete_events(self, event_ids: Sequence[str]) -> int:
        return self.conn.execute(DELETE_EVENTS, (list(event_ids),)).rowcount

    def mark_turn_extracted(
        self,
        turn_id: str,
        record_ids: Sequence[str],
        skip_reason: str | None = None,
        repeat_of: str | None = None,
    ) -> bool:
        # Before the turn's row lock: the records of the turn come next.
        self._lock_records()
        params = (utcnow(), list(record_ids), skip_reason, repeat_of, turn_id)
        row = self.conn.execute(MARK_TURN_EXTRACTED, params).fetchone()
        return row is not None


class PostgresEvents(PostgresBase):
    def events_after(self, after: str | None, limit: int) -> list[StoredEvent]:
        with self._db.connection() as conn:
            rows = conn.execute(EVENTS_AFTER, (after or "", limit)).fetchall()
        return [stored_event(r) for r in rows]

    def rewrite_events(self, events: Sequence[Event]) -> int:
        rows = [
            (e.body_json(), e.source.surface, e.source.version, e.source.project_path,
             e.actor_id, e.event_id)
            for e in events
        ]  # fmt: skip
        with self._db.connection() as conn, conn.transaction():
            return sum(conn.execute(REWRITE_EVENT, row).rowcount for row in rows)

    def rename_session(self, namespace: str, old: str, new: str) -> int:
        params = {"namespace": namespace, "old": old, "new": new}
        with self._db.connection() as conn, conn.transaction():
            return [conn.execute(sql, params).rowcount for sql in RENAME_SESSION][-1]

    def get_event(self, event_id: str) -> StoredEvent | None:
        with self._db.connection() as conn:
            row = conn.execute(GET_EVENT, (event_id,)).fetchone()
        return stored_event(row) if row else None

    def count_events(self, event_ids: Sequence[str]) -> int:
        with self._db.connection() as conn:
            row = conn.execute(COUNT_EVENTS, (list(event_ids),)).fetchone()
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
            rows = conn.execute(LIST_EVENTS[exact], params).fetchall()
        return [stored_event(r) for r in rows]

    def get_turns(self, turn_ids: Sequence[str]) -> list[Turn]:
        ids = list(turn_ids)
        with self._db.connection() as conn, conn.transaction():
            conn.execute(REPEATABLE_READ)  # the turns and their events from one snapshot
            rows = conn.execute(GET_TURNS, (ids,)).fetchall()
            events = conn.execute(TURNS_EVENTS, (ids,)).fetchall()
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

    def turns_before(self, turn_id: str, limit: int) -> list[str]:
        with self._db.connection() as conn:
            return [r[0] for r in conn.execute(TURNS_BEFORE, (turn_id, limit)).fetchall()]

    def session_turns(self, namespace: str, session_id: str, limit: int = 200) -> list[TurnInfo]:
        with self._db.connection() as conn:
            rows = conn.execute(SESSION_TURNS, (namespace, session_id, limit)).fetchall()
        return [
            TurnInfo(t, opened, closed, extracted, list(ids), reason)
            for t, opened, closed, extracted, ids, reason in rows
        ]

    def close_idle_turns(self, idle_before: datetime) -> list[str]:
        params = {"now": utcnow(), "idle_before": idle_before}
        with self._db.connection() as conn:
            return [r[0] for r in conn.execute(CLOSE_IDLE_TURNS, params).fetchall()]

    def pending_turns(self, limit: int = 1000) -> list[str]:
        with self._db.connection() as conn:
            return [r[0] for r in conn.execute(PENDING_TURNS, (limit,)).fetchall()]


def insert_events(cur: psycopg.Cursor[Any], rows: list[dict[str, Any]]) -> int:
    """Insert the rows (``event_params`` plus ``turn_id``) in one statement; how many
    were new (an event id already stored is left as it is)."""
    if not rows:
        return 0
    names = [c.strip() for c in EVENT_COLUMNS.split(",")]
    cur.execute(INSERT_EVENTS, [[row[name] for row in rows] for name in names])
    return max(cur.rowcount, 0)

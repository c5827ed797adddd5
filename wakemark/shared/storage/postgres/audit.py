"""Audit of the Postgres backend: the retrieval log, the audit log and API tokens."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import psycopg

from wakemark.shared.models import Retrieval
from wakemark.shared.storage import lexical
from wakemark.shared.storage.errors import NotFoundError
from wakemark.shared.storage.ports.audit import ApiToken, AuditEntry, RetrievalSession
from wakemark.shared.storage.postgres.base import (
    NAMESPACE_LOCK,
    NS,
    PostgresBase,
    PostgresTxBase,
)

# The namespace's lock first (base.NAMESPACE_LOCK): not between a move's statements.
INSERT_RETRIEVAL = f"""
INSERT INTO retrievals (retrieval_id, event_id, namespace, session_id, created_at, body)
SELECT %(retrieval_id)s, %(event_id)s, %(namespace)s, %(session_id)s, %(created_at)s,
       %(body)s::jsonb
  FROM (SELECT pg_advisory_xact_lock_shared({NAMESPACE_LOCK})) AS not_moving
"""

RETRIEVAL_COLUMNS = "retrieval_id, event_id, namespace, session_id, created_at, body"

GET_RETRIEVAL = f"SELECT {RETRIEVAL_COLUMNS} FROM retrievals WHERE retrieval_id = %s"

# Keyed (one session, after a page key): a session's rows come off retrievals_by_session.
LIST_RETRIEVALS = {
    (session, keyset): f"""
SELECT {RETRIEVAL_COLUMNS} FROM retrievals
 WHERE namespace {NS} {"AND session_id = %(session_id)s" if session else ""}
 {"AND (created_at, retrieval_id) < (%(after_at)s, %(after_id)s)" if keyset else ""}
 ORDER BY created_at DESC, retrieval_id DESC
 LIMIT %(limit)s
"""
    for session in (False, True)
    for keyset in (False, True)
}

SESSION_INJECTIONS = f"""
SELECT event_id, coalesce(body->'injected', '[]'::jsonb) AS injected FROM retrievals
 WHERE namespace {NS} AND session_id = %(session_id)s
 ORDER BY created_at DESC, retrieval_id DESC
 LIMIT %(limit)s
"""

RETRIEVAL_SESSION_COLUMNS = """namespace, session_id, prompts, injected, records, bytes,
  latency_ms, first_at, last_at"""

RETRIEVAL_SESSIONS = {
    keyset: f"""
SELECT {RETRIEVAL_SESSION_COLUMNS} FROM retrieval_sessions WHERE namespace = %(namespace)s
 {"AND (last_at, session_id) < (%(after_at)s, %(after_id)s)" if keyset else ""}
 ORDER BY last_at DESC, session_id DESC
 LIMIT %(limit)s
"""
    for keyset in (False, True)
}

RETRIEVAL_TOTALS = f"""
SELECT coalesce(sum(prompts), 0)::bigint, coalesce(sum(injected), 0)::bigint,
       coalesce(sum(records), 0)::bigint, coalesce(sum(bytes), 0)::bigint,
       coalesce(sum(latency_ms), 0.0)
  FROM retrieval_sessions WHERE namespace {NS}
"""

DELETE_RETRIEVALS = "DELETE FROM retrievals WHERE created_at < %s"

_TOKEN_COLUMNS = """token_id, name, actor, project, read_only, created_at, expires_at,
  revoked_at, last_used_at"""

INSERT_TOKEN = f"""
INSERT INTO api_tokens ({_TOKEN_COLUMNS}, secret_sha256)
VALUES (%(token_id)s, %(name)s, %(actor)s, %(project)s, %(read_only)s, %(created_at)s,
        %(expires_at)s, %(revoked_at)s, %(last_used_at)s, %(secret_sha256)s)
"""

TOKEN_BY_HASH = f"SELECT {_TOKEN_COLUMNS} FROM api_tokens WHERE secret_sha256 = %s"

LIST_TOKENS = f"SELECT {_TOKEN_COLUMNS} FROM api_tokens ORDER BY created_at, token_id"

REVOKE_TOKEN = """
UPDATE api_tokens SET revoked_at = %s WHERE token_id = %s AND revoked_at IS NULL
"""

TOUCH_TOKEN = "UPDATE api_tokens SET last_used_at = %s WHERE token_id = %s"

INSERT_AUDIT = """
INSERT INTO audit_log (at, who, action, namespace, targets, count)
VALUES (%(at)s, %(who)s, %(action)s, %(namespace)s, %(targets)s, %(count)s)
"""

LIST_AUDIT = """
SELECT id, at, who, action, namespace, targets, count FROM audit_log
ORDER BY id DESC LIMIT %s
"""


class PostgresAuditTx(PostgresTxBase):
    def audit(self, entry: AuditEntry) -> None:
        self.conn.execute(INSERT_AUDIT, entry.row())

    def put_token(self, token: ApiToken, secret_sha256: str) -> None:
        self.conn.execute(INSERT_TOKEN, {**vars(token), "secret_sha256": secret_sha256})

    def revoke_token(self, token_id: str, when: datetime) -> bool:
        return self.conn.execute(REVOKE_TOKEN, (when, token_id)).rowcount == 1


class PostgresAudit(PostgresBase):
    def put_retrieval(self, retrieval: Retrieval) -> None:
        try:
            with self._db.connection() as conn:
                conn.execute(INSERT_RETRIEVAL, retrieval.row())
        except psycopg.errors.ForeignKeyViolation as exc:
            raise NotFoundError(f"no prompt event {retrieval.event_id}") from exc

    def get_retrieval(self, retrieval_id: str) -> Retrieval | None:
        with self._db.connection() as conn:
            row = conn.execute(GET_RETRIEVAL, (retrieval_id,)).fetchone()
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
        sql = LIST_RETRIEVALS[session_id is not None, after is not None]
        with self._db.connection() as conn:
            rows = conn.execute(sql, params).fetchall()
        return [_retrieval(r) for r in rows]

    def session_injections(
        self, namespace: str, session_id: str, limit: int
    ) -> list[tuple[str, list[str]]]:
        params = {"ns": lexical.namespace_pattern(namespace), "session_id": session_id}
        with self._db.connection() as conn:
            rows = conn.execute(SESSION_INJECTIONS, {**params, "limit": limit}).fetchall()
        return [(event, list(injected)) for event, injected in rows]

    def retrieval_sessions(
        self, namespace: str, limit: int = 50, after: tuple[datetime, str] | None = None
    ) -> list[RetrievalSession]:
        params: dict[str, Any] = {"namespace": namespace, "limit": limit}
        if after is not None:
            params.update(after_at=after[0], after_id=after[1])
        with self._db.connection() as conn:
            rows = conn.execute(RETRIEVAL_SESSIONS[after is not None], params).fetchall()
        return [RetrievalSession(*r) for r in rows]

    def retrieval_totals(self, namespace: str | None = None) -> dict[str, float]:
        with self._db.connection() as conn:
            row = conn.execute(RETRIEVAL_TOTALS, {"ns": lexical.namespace_pattern(namespace)})
            values = row.fetchone() or (0, 0, 0, 0, 0.0)
        keys = ("prompts", "injected", "records", "bytes", "latency_ms")
        return dict(zip(keys, values, strict=True))

    def delete_retrievals(self, created_before: datetime) -> int:
        with self._db.connection() as conn, conn.transaction():
            return conn.execute(DELETE_RETRIEVALS, (created_before,)).rowcount

    def token_by_hash(self, secret_sha256: str) -> ApiToken | None:
        with self._db.connection() as conn:
            row = conn.execute(TOKEN_BY_HASH, (secret_sha256,)).fetchone()
        return ApiToken(*row) if row else None

    def list_tokens(self) -> list[ApiToken]:
        with self._db.connection() as conn:
            return [ApiToken(*r) for r in conn.execute(LIST_TOKENS).fetchall()]

    def touch_token(self, token_id: str, when: datetime) -> None:
        with self._db.connection() as conn:
            conn.execute(TOUCH_TOKEN, (when, token_id))

    def list_audit(self, limit: int = 100) -> list[AuditEntry]:
        with self._db.connection() as conn:
            rows = conn.execute(LIST_AUDIT, (limit,)).fetchall()
        return [
            AuditEntry(id=i, at=at, who=who, action=action, namespace=ns, targets=tuple(t), count=n)
            for i, at, who, action, ns, t, n in rows
        ]


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

"""Audit of the SQLite backend: the retrieval log, the audit log and API tokens."""

from __future__ import annotations

import json
import sqlite3
from datetime import datetime
from typing import Any

from wakemark.shared.models import Retrieval
from wakemark.shared.storage import lexical
from wakemark.shared.storage.errors import NotFoundError
from wakemark.shared.storage.ports.audit import ApiToken, AuditEntry, RetrievalSession
from wakemark.shared.storage.sqlite import codec
from wakemark.shared.storage.sqlite.base import NS, SqliteBase, SqliteTxBase

INSERT_RETRIEVAL = """
INSERT INTO retrievals (retrieval_id, event_id, namespace, session_id, created_at, body)
VALUES (:retrieval_id, :event_id, :namespace, :session_id, :created_at, :body)
"""

GET_RETRIEVAL = "SELECT * FROM retrievals WHERE retrieval_id = ?"

# Keyed (one session, after a page key): a session's rows come off retrievals_by_session.
LIST_RETRIEVALS = {
    (session, keyset): f"""
SELECT * FROM retrievals
WHERE {NS} {"AND session_id = :session_id" if session else ""}
{"AND (created_at, retrieval_id) < (:after_at, :after_id)" if keyset else ""}
ORDER BY created_at DESC, retrieval_id DESC LIMIT :limit
"""
    for session in (False, True)
    for keyset in (False, True)
}

RETRIEVAL_SESSIONS = {
    keyset: f"""
SELECT * FROM retrieval_sessions WHERE namespace = :namespace
{"AND (last_at, session_id) < (:after_at, :after_id)" if keyset else ""}
ORDER BY last_at DESC, session_id DESC LIMIT :limit
"""
    for keyset in (False, True)
}

SESSION_INJECTIONS = f"""
SELECT event_id, json_extract(body, '$.injected') AS injected FROM retrievals
WHERE {NS} AND session_id = :session_id
ORDER BY created_at DESC, retrieval_id DESC LIMIT :limit
"""

RETRIEVAL_TOTALS = f"""
SELECT coalesce(sum(prompts), 0) AS prompts, coalesce(sum(injected), 0) AS injected,
       coalesce(sum(records), 0) AS records, coalesce(sum(bytes), 0) AS bytes,
       coalesce(sum(latency_ms), 0.0) AS latency_ms
  FROM retrieval_sessions WHERE {NS}
"""

DELETE_RETRIEVALS = "DELETE FROM retrievals WHERE created_at < ?"

_TOKEN_COLUMNS = """token_id, name, actor, project, read_only, created_at, expires_at,
  revoked_at, last_used_at"""

INSERT_TOKEN = f"""
INSERT INTO api_tokens ({_TOKEN_COLUMNS}, secret_sha256)
VALUES (:token_id, :name, :actor, :project, :read_only, :created_at, :expires_at,
        :revoked_at, :last_used_at, :secret_sha256)
"""

TOKEN_BY_HASH = f"SELECT {_TOKEN_COLUMNS} FROM api_tokens WHERE secret_sha256 = ?"

LIST_TOKENS = f"SELECT {_TOKEN_COLUMNS} FROM api_tokens ORDER BY created_at, token_id"

REVOKE_TOKEN = "UPDATE api_tokens SET revoked_at = ? WHERE token_id = ? AND revoked_at IS NULL"

TOUCH_TOKEN = "UPDATE api_tokens SET last_used_at = ? WHERE token_id = ?"

INSERT_AUDIT = """
INSERT INTO audit_log (at, who, action, namespace, targets, count)
VALUES (:at, :who, :action, :namespace, :targets, :count)
"""

LIST_AUDIT = """
SELECT id, at, who, action, namespace, targets, count FROM audit_log
ORDER BY id DESC LIMIT ?
"""


def audit_params(entry: AuditEntry) -> dict[str, Any]:
    """``INSERT_AUDIT``'s parameters: the time as stored, the targets as JSON text."""
    params = entry.row()
    return params | {"at": codec.ts(entry.at), "targets": json.dumps(params["targets"])}


class SqliteAuditTx(SqliteTxBase):
    def audit(self, entry: AuditEntry) -> None:
        self.conn.execute(INSERT_AUDIT, audit_params(entry))

    def put_token(self, token: ApiToken, secret_sha256: str) -> None:
        params = {
            **{k: _opt_ts(v) for k, v in vars(token).items()},
            "read_only": int(token.read_only),
            "secret_sha256": secret_sha256,
        }
        self.conn.execute(INSERT_TOKEN, params)

    def revoke_token(self, token_id: str, when: datetime) -> bool:
        return self.conn.execute(REVOKE_TOKEN, (codec.ts(when), token_id)).rowcount == 1


class SqliteAudit(SqliteBase):
    def put_retrieval(self, retrieval: Retrieval) -> None:
        params = retrieval.row() | {"created_at": codec.ts(retrieval.created_at)}
        try:
            with self._conns.write() as conn:
                conn.execute(INSERT_RETRIEVAL, params)
        except sqlite3.IntegrityError as exc:
            raise NotFoundError(f"no prompt event {retrieval.event_id}") from exc

    def get_retrieval(self, retrieval_id: str) -> Retrieval | None:
        rows = self._read(GET_RETRIEVAL, (retrieval_id,))
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
        sql = LIST_RETRIEVALS[session_id is not None, after is not None]
        return [_retrieval(r) for r in self._read(sql, params)]

    def session_injections(
        self, namespace: str, session_id: str, limit: int
    ) -> list[tuple[str, list[str]]]:
        params = {**lexical.namespace_range(namespace), "session_id": session_id, "limit": limit}
        rows = self._read(SESSION_INJECTIONS, params)
        return [(r["event_id"], json.loads(r["injected"] or "[]")) for r in rows]

    def retrieval_sessions(
        self, namespace: str, limit: int = 50, after: tuple[datetime, str] | None = None
    ) -> list[RetrievalSession]:
        params: dict[str, Any] = {"namespace": namespace, "limit": limit}
        if after is not None:
            params.update(after_at=codec.ts(after[0]), after_id=after[1])
        rows = self._read(RETRIEVAL_SESSIONS[after is not None], params)
        return [
            RetrievalSession(
                **{k: r[k] for k in r.keys() if k not in ("first_at", "last_at")},  # noqa: SIM118
                first_at=codec.from_ts(r["first_at"]),
                last_at=codec.from_ts(r["last_at"]),
            )
            for r in rows
        ]

    def retrieval_totals(self, namespace: str | None = None) -> dict[str, float]:
        row = self._read(RETRIEVAL_TOTALS, lexical.namespace_range(namespace))[0]
        return {k: row[k] for k in row.keys()}  # noqa: SIM118 - Row has no iter

    def delete_retrievals(self, created_before: datetime) -> int:
        with self._conns.write() as conn:
            return conn.execute(DELETE_RETRIEVALS, (codec.ts(created_before),)).rowcount

    def token_by_hash(self, secret_sha256: str) -> ApiToken | None:
        rows = self._read(TOKEN_BY_HASH, (secret_sha256,))
        return _token(rows[0]) if rows else None

    def list_tokens(self) -> list[ApiToken]:
        return [_token(r) for r in self._read(LIST_TOKENS)]

    def touch_token(self, token_id: str, when: datetime) -> None:
        with self._conns.write() as conn:
            conn.execute(TOUCH_TOKEN, (codec.ts(when), token_id))

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
            for r in self._read(LIST_AUDIT, (limit,))
        ]


def _opt_ts(value: Any) -> Any:
    return codec.ts(value) if isinstance(value, datetime) else value


def _token(row: sqlite3.Row) -> ApiToken:
    times = ("created_at", "expires_at", "revoked_at", "last_used_at")
    values = {k: row[k] for k in row.keys()}  # noqa: SIM118 - Row has no iter
    values.update({k: codec.from_ts(values[k]) if values[k] else None for k in times})
    return ApiToken(**{**values, "read_only": bool(values["read_only"])})


def _retrieval(row: sqlite3.Row) -> Retrieval:
    return Retrieval(
        retrieval_id=row["retrieval_id"],
        event_id=row["event_id"],
        namespace=row["namespace"],
        session_id=row["session_id"],
        created_at=codec.from_ts(row["created_at"]),
        **json.loads(row["body"]),
    )

"""Code anchors of the Postgres backend."""

from __future__ import annotations

from collections.abc import Sequence

import psycopg
from psycopg.types.json import Jsonb

from wakemark.shared.storage import lexical
from wakemark.shared.storage.anchors_codec import from_body, to_body
from wakemark.shared.storage.errors import NotFoundError
from wakemark.shared.storage.ports.anchors import CodeAnchors
from wakemark.shared.storage.postgres.base import NS, PostgresBase, PostgresTxBase

PUT_ANCHORS = """
INSERT INTO code_anchors (record_id, namespace, body) VALUES (%s, %s, %s)
ON CONFLICT (record_id) DO UPDATE SET namespace = excluded.namespace, body = excluded.body
"""

GET_ANCHORS = "SELECT record_id, namespace, body FROM code_anchors WHERE record_id = ANY(%s)"

LIST_ANCHORS = f"""
SELECT record_id, namespace, body FROM code_anchors
 WHERE namespace {NS} AND record_id > %(after)s ORDER BY record_id LIMIT %(limit)s
"""


def put_params(anchors: CodeAnchors) -> tuple[str, str, Jsonb]:
    return anchors.record_id, anchors.namespace, Jsonb(to_body(anchors))


class PostgresAnchorsTx(PostgresTxBase):
    def put_anchors(self, anchors: CodeAnchors) -> None:
        try:
            with self.conn.transaction():  # a savepoint: the caller's transaction survives
                self.conn.execute(PUT_ANCHORS, put_params(anchors))
        except psycopg.errors.ForeignKeyViolation as exc:
            raise NotFoundError(f"no memory record {anchors.record_id}") from exc


class PostgresAnchors(PostgresBase):
    def get_anchors(self, record_ids: Sequence[str]) -> dict[str, CodeAnchors]:
        with self._db.connection() as conn:
            rows = conn.execute(GET_ANCHORS, (list(record_ids),)).fetchall()
        return {rid: from_body(rid, ns, body) for rid, ns, body in rows}

    def list_anchors(
        self, namespace: str, limit: int = 500, after: str | None = None
    ) -> list[CodeAnchors]:
        params = {"ns": lexical.namespace_pattern(namespace), "after": after or "", "limit": limit}
        with self._db.connection() as conn:
            rows = conn.execute(LIST_ANCHORS, params).fetchall()
        return [from_body(rid, ns, body) for rid, ns, body in rows]

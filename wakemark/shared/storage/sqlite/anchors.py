"""Code anchors of the SQLite backend."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Sequence

from wakemark.shared.storage import lexical
from wakemark.shared.storage.anchors_codec import from_body, to_body
from wakemark.shared.storage.errors import NotFoundError
from wakemark.shared.storage.ports.anchors import CodeAnchors
from wakemark.shared.storage.sqlite.base import NS, SqliteBase, SqliteTxBase

PUT_ANCHORS = """
INSERT INTO code_anchors (record_id, namespace, body) VALUES (?, ?, ?)
ON CONFLICT (record_id) DO UPDATE SET namespace = excluded.namespace, body = excluded.body
"""

GET_ANCHORS = """
SELECT record_id, namespace, body FROM code_anchors
WHERE record_id IN (SELECT value FROM json_each(?))
"""

LIST_ANCHORS = f"""
SELECT record_id, namespace, body FROM code_anchors
WHERE {NS} AND record_id > :after ORDER BY record_id LIMIT :limit
"""


def put_params(anchors: CodeAnchors) -> tuple[str, str, str]:
    return anchors.record_id, anchors.namespace, json.dumps(to_body(anchors))


class SqliteAnchorsTx(SqliteTxBase):
    def put_anchors(self, anchors: CodeAnchors) -> None:
        try:
            self.conn.execute(PUT_ANCHORS, put_params(anchors))
        except sqlite3.IntegrityError as exc:
            raise NotFoundError(f"no memory record {anchors.record_id}") from exc


class SqliteAnchors(SqliteBase):
    def get_anchors(self, record_ids: Sequence[str]) -> dict[str, CodeAnchors]:
        rows = self._read(GET_ANCHORS, (json.dumps(list(record_ids)),))
        return {r["record_id"]: _anchors(r) for r in rows}

    def list_anchors(
        self, namespace: str, limit: int = 500, after: str | None = None
    ) -> list[CodeAnchors]:
        params = {**lexical.namespace_range(namespace), "after": after or "", "limit": limit}
        return [_anchors(r) for r in self._read(LIST_ANCHORS, params)]


def _anchors(row: sqlite3.Row) -> CodeAnchors:
    return from_body(row["record_id"], row["namespace"], json.loads(row["body"]))

"""The JSON body both backends store for a version: the record and its anchors."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import numpy as np

from wakemark.shared.models import EMBEDDING_DIM, MemoryRecord
from wakemark.shared.storage import anchors_codec
from wakemark.shared.storage.ports.anchors import CodeAnchors
from wakemark.shared.storage.ports.history import Version


def to_body(record: MemoryRecord, anchors: CodeAnchors | None) -> dict[str, Any]:
    return {
        "record": record.model_dump(mode="json"),
        "anchors": None if anchors is None else anchors_codec.to_body(anchors),
    }


def superseded(
    old: MemoryRecord, body: dict[str, Any] | None, new_id: str, at: datetime
) -> Version:
    """The version ``old`` becomes when ``new_id`` supersedes it at ``at``; ``body``: that of
    its stored code anchors, if any."""
    anchors = None if body is None else anchors_codec.from_body(old.record_id, old.namespace, body)
    return Version(old, new_id, new_id, at, anchors)


def row(version: Version) -> dict[str, Any]:
    """The ``record_history`` columns of a version; each backend encodes the time and body."""
    return {
        "record_id": version.record.record_id,
        "current_id": version.current_id,
        "superseded_by": version.superseded_by,
        "namespace": version.record.namespace,
        "superseded_at": version.superseded_at,
        "body": to_body(version.record, version.anchors),
    }


def from_row(
    current_id: str, superseded_by: str, superseded_at: datetime, body: dict[str, Any]
) -> Version:
    record = MemoryRecord.model_validate(body["record"])
    anchors = body.get("anchors")
    return Version(
        record=record,
        current_id=current_id,
        superseded_by=superseded_by,
        superseded_at=superseded_at,
        anchors=None
        if anchors is None
        else anchors_codec.from_body(record.record_id, record.namespace, anchors),
    )


def nearest(
    ids: list[str], matrix: np.ndarray, vectors: np.ndarray, limit: int
) -> list[list[tuple[str, float]]]:
    """For each row of ``vectors``, the ``limit`` rows of ``matrix`` (one per id) nearest
    to it by cosine, best first."""
    queries = np.asarray(vectors, dtype=np.float32).reshape(-1, EMBEDDING_DIM)
    if not ids:
        return [[] for _ in queries]
    m = np.asarray(matrix, dtype=np.float32)
    m = m / np.maximum(np.linalg.norm(m, axis=1, keepdims=True), 1e-12)
    q = queries / np.maximum(np.linalg.norm(queries, axis=1, keepdims=True), 1e-12)
    cosines = q @ m.T
    out = []
    for row in cosines:
        top = np.argsort(-row, kind="stable")[:limit]
        out.append([(ids[int(i)], float(row[int(i)])) for i in top])
    return out


def recent_ids(turns: list[tuple[list[str], str | None]]) -> list[str]:
    """The records a session's recent turns stand for, from each turn's record ids and
    ``repeat_of`` (nearest turn first): its records newest first, or the record it
    repeated."""
    out: list[str] = []
    for record_ids, repeat_of in turns:
        out += record_ids[::-1] or ([repeat_of] if repeat_of else [])
    return out


def best_first(found: list[tuple[MemoryRecord, float]]) -> list[tuple[MemoryRecord, float]]:
    """Records with their cosines, nearest first (ties by record id)."""
    return sorted(found, key=lambda pair: (-pair[1], pair[0].record_id))

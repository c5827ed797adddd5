"""Collapse near-identical records: within one batch, and (opt-in) into old neighbours."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from wakemark.shared.models import MemoryRecord, new_record_id

THRESHOLD = 0.95
MAX_FACTS = 30
MAX_CONCEPTS = 12


def _unit(vector: np.ndarray) -> np.ndarray:
    v = np.asarray(vector, dtype=np.float32).reshape(-1)
    norm = float(np.linalg.norm(v))
    return v / norm if norm > 0 else v


def _union(*lists: Sequence[str], cap: int) -> list[str]:
    return list(dict.fromkeys(x for items in lists for x in items))[:cap]


def merge_records(records: Sequence[MemoryRecord], **changes: object) -> MemoryRecord:
    """One record from several: the first's title, summary and type, the union of their
    lists (first-seen order), the newest ``created_at``; ``strategy="merged"``."""
    head = records[0]
    fields = {
        "source_event_ids": _union(*(r.source_event_ids for r in records), cap=1000),
        "facts": _union(*(r.facts for r in records), cap=MAX_FACTS),
        "files_touched": _union(*(r.files_touched for r in records), cap=200),
        "concepts": _union(*(r.concepts for r in records), cap=MAX_CONCEPTS),
        "strategy": "merged",
        "quality": "full" if all(r.quality == "full" for r in records) else "fallback",
        "pinned": any(r.pinned for r in records),
        "created_at": max(r.created_at for r in records),
        "summary": head.summary or next((r.summary for r in records if r.summary), ""),
    }
    fields.update(changes)
    return head.model_copy(update=fields)


def dedupe(
    records: Sequence[MemoryRecord], vectors: Sequence[np.ndarray]
) -> tuple[list[MemoryRecord], list[np.ndarray]]:
    """Greedy, in order: a record whose cosine with an earlier kept one (same namespace)
    is ≥ 0.95 joins it. Returns the kept records and, for each, the first member's vector."""
    if len(records) != len(vectors):
        raise ValueError("dedupe needs one vector per record")
    groups: list[list[int]] = []
    units = [_unit(v) for v in vectors]
    for i, record in enumerate(records):
        for group in groups:
            lead = group[0]
            same_ns = records[lead].namespace == record.namespace
            if same_ns and float(units[lead] @ units[i]) >= THRESHOLD:
                group.append(i)
                break
        else:
            groups.append([i])
    kept = [
        records[g[0]] if len(g) == 1 else merge_records([records[i] for i in g]) for g in groups
    ]
    return kept, [np.asarray(vectors[g[0]], dtype=np.float32) for g in groups]


@dataclass(frozen=True)
class Merge:
    """What the jobs layer writes in one transaction: put ``record``, delete ``replaces``."""

    record: MemoryRecord
    replaces: list[str]


def conservative_merge(
    record: MemoryRecord,
    neighbours: Sequence[tuple[MemoryRecord, float]],
) -> Merge | None:
    """For ``WAKEMARK_MERGE=conservative``: merge the new record with existing neighbours
    that are near-identical (cosine ≥ 0.95), of the same type and namespace, and not
    pinned (a pinned record was kept on purpose). None when nothing qualifies.

    The merged record gets a fresh id (the originals are deleted), keeps the new record's
    title and summary (the latest word), and lists provenance oldest first."""
    olds = [
        old
        for old, cosine in neighbours
        if cosine >= THRESHOLD
        and old.observation_type == record.observation_type
        and old.namespace == record.namespace
        and not old.pinned
        and old.record_id != record.record_id
    ]
    if not olds:
        return None
    olds.sort(key=lambda r: (r.created_at, r.record_id))
    merged = merge_records([record, *olds])
    provenance = _union(*(r.source_event_ids for r in [*olds, record]), cap=1000)
    merged = merged.model_copy(
        update={"record_id": new_record_id(), "source_event_ids": provenance}
    )
    return Merge(record=merged, replaces=[r.record_id for r in olds])

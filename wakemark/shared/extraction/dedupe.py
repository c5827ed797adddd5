"""Collapse near-identical records within one batch (across batches, see ``subject``)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from wakemark.shared.models import MemoryRecord

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

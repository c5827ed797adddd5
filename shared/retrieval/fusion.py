"""Rank fusion of the lexical and the vector list: plain RRF (k=60) and a tuned variant."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

RRF_K = 60


@dataclass(frozen=True)
class Candidate:
    record_id: str
    created_ts: float  # seconds since the epoch; newer wins a tie


@dataclass(frozen=True)
class VectorCandidate(Candidate):
    cosine: float


@dataclass(frozen=True)
class Fused:
    record_id: str
    score: float
    match_source: str  # "fts" | "semantic" | "hybrid"
    created_ts: float


@dataclass(frozen=True)
class FusionParams:
    k: int = RRF_K
    lexical_weight: float = 1.0
    vector_weight: float = 1.0
    # A semantic-only hit below this cosine is dropped (None: keep all).
    semantic_floor: float | None = None
    # At most this many semantic-only hits on a page (None: no cap).
    semantic_cap: int | None = None


PLAIN = FusionParams()
# Chosen on tests/fixtures/relevance (bench/relevance.py): see the README table.
TUNED = FusionParams(lexical_weight=1.0, vector_weight=1.0, semantic_floor=0.3, semantic_cap=3)


def params_for(name: str) -> FusionParams:
    return TUNED if name == "tuned" else PLAIN


def fuse(
    lexical: Sequence[Candidate],
    vector: Sequence[VectorCandidate],
    limit: int,
    params: FusionParams = PLAIN,
) -> list[Fused]:
    """Both lists best first; returns at most ``limit`` ordered by
    (score desc, created_at desc, record_id asc)."""
    scores: dict[str, float] = {}
    created: dict[str, float] = {}
    sources: dict[str, set[str]] = {}
    for rank, cand in enumerate(lexical):
        if cand.record_id in scores and "fts" in sources[cand.record_id]:
            continue
        scores[cand.record_id] = params.lexical_weight / (params.k + rank + 1)
        created[cand.record_id] = cand.created_ts
        sources[cand.record_id] = {"fts"}
    lexical_ids = set(scores)
    for rank, vc in enumerate(vector):
        if vc.record_id not in lexical_ids and _below_floor(vc, params):
            continue
        if "semantic" in sources.get(vc.record_id, set()):
            continue
        scores[vc.record_id] = scores.get(vc.record_id, 0.0) + params.vector_weight / (
            params.k + rank + 1
        )
        created.setdefault(vc.record_id, vc.created_ts)
        sources.setdefault(vc.record_id, set()).add("semantic")
    order = sorted(scores, key=lambda rid: (-scores[rid], -created[rid], rid))
    out: list[Fused] = []
    semantic_only = 0
    for rid in order:
        label = _label(sources[rid])
        if label == "semantic":
            if params.semantic_cap is not None and semantic_only >= params.semantic_cap:
                continue
            semantic_only += 1
        out.append(Fused(rid, scores[rid], label, created[rid]))
        if len(out) >= limit:
            break
    return out


def _below_floor(vc: VectorCandidate, params: FusionParams) -> bool:
    return params.semantic_floor is not None and vc.cosine < params.semantic_floor


def _label(sources: set[str]) -> str:
    if len(sources) == 2:
        return "hybrid"
    return "fts" if "fts" in sources else "semantic"

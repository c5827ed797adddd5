"""Rank fusion of any number of named ranked lists: plain RRF (k=60) and a tuned variant."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from wakemark.shared.models import MemoryRecord

RRF_K = 60
HYBRID = "hybrid"  # the label of a hit more than one leg found


@dataclass(frozen=True)
class Candidate:
    """One entry of a leg's ranked list."""

    record_id: str
    created_ts: float  # seconds since the epoch; newer wins a tie
    score: float = 0.0  # the leg's own score (the vector leg's cosine); floors compare it
    # The record, when the leg read it anyway: hydration then need not read it again.
    record: MemoryRecord | None = field(default=None, compare=False)


@dataclass(frozen=True)
class Fused:
    record_id: str
    score: float
    # The one leg that found it ("fts", "semantic", "trigram"), "hybrid", or (a neighbour of
    # the best hit, ``retriever.SESSION``) "session".
    match_source: str
    created_ts: float


@dataclass(frozen=True)
class FusionParams:
    k: int = RRF_K
    # Per leg name; a leg not named weighs 1.
    weights: Mapping[str, float] = field(default_factory=dict)
    # A hit only this leg found, with a leg score below this, is dropped.
    floors: Mapping[str, float] = field(default_factory=dict)
    # At most this many hits only this leg found on a page.
    caps: Mapping[str, int] = field(default_factory=dict)
    # The weight of the list of favoured hits (``fuse``'s ``favoured``): as much as a leg,
    # so a hit of the query's time outranks one of another time that a leg ranked a
    # little higher, not one that every leg ranked first.
    favour: float = 1.0
    # A list whose hits are another leg's kind of evidence, by name: labelled, floored and
    # capped as that leg's.
    labels: Mapping[str, str] = field(default_factory=dict)


PLAIN = FusionParams()


class Weighed(Protocol):
    """What fusion reads of a leg (``legs.Leg``): its name, weight, tuned floor and cap."""

    @property
    def name(self) -> str: ...
    @property
    def weight(self) -> float: ...
    @property
    def tuned_floor(self) -> float | None: ...
    @property
    def tuned_cap(self) -> int | None: ...


def params_for(name: str, legs: Iterable[Weighed]) -> FusionParams:
    """The fusion called ``name`` ("plain" or "tuned") over ``legs``: each leg's weight,
    and for "tuned" its floor and cap."""
    legs = list(legs)
    weights = {leg.name: leg.weight for leg in legs if leg.weight != 1.0}
    if name != "tuned":
        return FusionParams(weights=weights)
    floors = {leg.name: leg.tuned_floor for leg in legs if leg.tuned_floor is not None}
    caps = {leg.name: leg.tuned_cap for leg in legs if leg.tuned_cap is not None}
    return FusionParams(weights=weights, floors=floors, caps=caps)


def fuse(
    ranked: Mapping[str, Sequence[Candidate]],
    limit: int,
    params: FusionParams = PLAIN,
    favoured: Sequence[str] = (),
) -> list[Fused]:
    """Each leg's list best first, by leg name; returns at most ``limit`` ordered by
    (score desc, created_at desc, record_id asc). A record found again further down the
    same list counts once, at its best rank; its time is taken from the first leg.
    ``favoured``: record ids, best first, that gain a list's share of score (the legs'
    hits of the query's time); it finds nothing itself, nor changes a hit's label."""
    found = {name: {c.record_id for c in cands} for name, cands in ranked.items()}
    scores: dict[str, float] = {}
    created: dict[str, float] = {}
    sources: dict[str, set[str]] = {}
    labels: dict[str, set[str]] = {}
    for name, cands in ranked.items():
        label = params.labels.get(name, name)
        weight = params.weights.get(name, 1.0)
        floor = params.floors.get(label)
        elsewhere = set().union(
            *(ids for other, ids in found.items() if params.labels.get(other, other) != label)
        )
        for rank, cand in enumerate(cands):
            rid = cand.record_id
            if name in sources.get(rid, ()):
                continue
            if floor is not None and cand.score < floor and rid not in elsewhere:
                continue
            scores[rid] = scores.get(rid, 0.0) + weight / (params.k + rank + 1)
            created.setdefault(rid, cand.created_ts)
            sources.setdefault(rid, set()).add(name)
            labels.setdefault(rid, set()).add(label)
    for rank, rid in enumerate(dict.fromkeys(favoured)):
        if rid in scores:
            scores[rid] += params.favour / (params.k + rank + 1)
    order = sorted(scores, key=lambda rid: (-scores[rid], -created[rid], rid))
    out: list[Fused] = []
    alone: dict[str, int] = {}  # hits per leg that only that leg found
    for rid in order:
        label = next(iter(labels[rid])) if len(labels[rid]) == 1 else HYBRID
        cap = params.caps.get(label)
        if cap is not None:
            if alone.get(label, 0) >= cap:
                continue
            alone[label] = alone.get(label, 0) + 1
        out.append(Fused(rid, scores[rid], label, created[rid]))
        if len(out) >= limit:
            break
    return out

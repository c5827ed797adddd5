"""What a search returns: ranked hits with the relevance gate's verdict on each."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from wakemark.shared.models import MemoryRecord
from wakemark.shared.retrieval import gate


@dataclass(frozen=True)
class SearchHit:
    record: MemoryRecord
    match_source: str  # "fts" | "semantic" | "trigram" | "hybrid"
    score: float
    relevance: float = 0.0  # the gate's calibrated estimate, 0-1
    evidence: gate.Evidence | None = None


@dataclass(frozen=True)
class SearchResult:
    items: list[SearchHit] = field(default_factory=list)
    latency_ms: float = 0.0
    degraded: bool = False

    def to_json(self) -> dict[str, Any]:
        return {
            "items": [
                {
                    "record": hit.record.model_dump(mode="json"),
                    "match_source": hit.match_source,
                    "score": hit.score,
                    "relevance": shown(hit.relevance),
                }
                for hit in self.items
            ],
            "latency_ms": self.latency_ms,
            "degraded": self.degraded,
        }

    def at_least(self, min_relevance: float) -> SearchResult:
        """Only the hits whose relevance, as shown, reaches ``min_relevance``, in the same
        order: a client that passes back a relevance it was shown keeps that hit."""
        items = [h for h in self.items if shown(h.relevance) >= min_relevance]
        return replace(self, items=items)


def shown(relevance: float) -> float:
    return round(relevance, 4)

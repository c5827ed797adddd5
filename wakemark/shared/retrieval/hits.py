"""What retrieval returns: a search's ranked hits with the relevance gate's verdict on
each, a prompt's context block and a session's index."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from wakemark.shared.models import MemoryRecord
from wakemark.shared.retrieval import gate
from wakemark.shared.storage import CodeAnchors


@dataclass(frozen=True)
class SearchHit:
    record: MemoryRecord
    match_source: str  # "fts" | "semantic" | "trigram" | "hybrid" | "session"
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


@dataclass(frozen=True)
class PromptContext:
    """The gated context block for a prompt (``Retriever.for_prompt``)."""

    context: str = ""
    records: list[str] = field(default_factory=list)  # the injected records' ids
    latency_ms: float = 0.0
    retrieval_id: str | None = None  # its audit row, when the prompt was a stored event
    # A preview's weighing (``audit=False``): each candidate's relevance and why not.
    candidates: list[dict[str, Any]] | None = None
    # A client whose files the server does not read: the files its candidates cite (to
    # hash for the next prompt), and anchors that took their hashes from its report.
    watch: list[str] = field(default_factory=list)
    baselines: list[CodeAnchors] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "context": self.context,
            "records": self.records,
            "latency_ms": self.latency_ms,
        }
        if self.retrieval_id:
            out["retrieval_id"] = self.retrieval_id  # GET /v1/retrievals/<id>
        return out


@dataclass(frozen=True)
class SessionIndex:
    """Pinned, then recent records, one line each (``Retriever.session_index``)."""

    context: str = ""
    used_bytes: int = 0

    def to_json(self) -> dict[str, Any]:
        return {"context": self.context, "used_bytes": self.used_bytes}


def shown(relevance: float) -> float:
    return round(relevance, 4)

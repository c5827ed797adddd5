"""Hybrid retrieval: full-text and vector search fused by rank, formatted for agents."""

from shared.retrieval.formatting import format_context, format_index
from shared.retrieval.fusion import PLAIN, TUNED, FusionParams, fuse
from shared.retrieval.query import query_text
from shared.retrieval.retriever import Retriever, SearchHit, SearchResult

__all__ = [
    "PLAIN",
    "TUNED",
    "FusionParams",
    "Retriever",
    "SearchHit",
    "SearchResult",
    "format_context",
    "format_index",
    "fuse",
    "query_text",
]

"""Hybrid retrieval: full-text and vector search fused by rank, formatted for agents."""

from wakemark.shared.retrieval.formatting import format_context, format_index
from wakemark.shared.retrieval.fusion import PLAIN, FusionParams, fuse, params_for
from wakemark.shared.retrieval.query import query_text
from wakemark.shared.retrieval.retriever import Retriever, SearchHit, SearchResult

__all__ = [
    "PLAIN",
    "FusionParams",
    "Retriever",
    "SearchHit",
    "SearchResult",
    "format_context",
    "format_index",
    "fuse",
    "params_for",
    "query_text",
]

"""Search: the lexical primitives and the database's vector search.

Which terms to search for, and what to do when the engine refuses them, is retrieval's
(``wakemark.shared.retrieval.lexical``); these run the queries.
"""

from __future__ import annotations

import abc
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol

import numpy as np

from wakemark.shared.models import MemoryRecord


@dataclass(frozen=True)
class SearchQuery:
    """Where to search and how much to return, whichever the search.

    ``timeout_s``: past it the statement running is cancelled and ``StorageTimeoutError``
    raised; None leaves the search unbounded."""

    namespace: str  # a full namespace or a prefix
    limit: int
    observation_type: str | None = None
    since: datetime | None = None  # created_at >= since
    timeout_s: float | None = None


@dataclass(frozen=True)
class TermStats:
    """What the full-text index knows of a query's tokens."""

    # Documents holding each token; a token missing here is rare (or unknown) to the
    # index: its phrase may be rare however common its parts.
    doc_freq: Mapping[str, int]
    total: int | None  # documents in the index, None if unknown


@dataclass(frozen=True)
class Match:
    """One full-text match (``Search.search_terms``): the record's id and creation time,
    and the record when the search read it."""

    record_id: str
    created_ts: float  # seconds since the Unix epoch
    record: MemoryRecord | None = None

    @classmethod
    def of(cls, record: MemoryRecord) -> Match:
        return cls(record.record_id, record.created_at.timestamp(), record)


@dataclass(frozen=True)
class VectorHit:
    """One nearest neighbour found by the database (``Search.search_vector``)."""

    record_id: str
    created_at: float  # seconds since the Unix epoch
    cosine: float


class Search(Protocol):
    @abc.abstractmethod
    def term_stats(self, tokens: Sequence[str]) -> TermStats | None:
        """Index statistics of ``lexical.tokenize`` tokens; None if the engine refuses."""

    @abc.abstractmethod
    def search_terms(
        self, query: SearchQuery, terms: Sequence[str], *, stats: TermStats, read: int | None = None
    ) -> list[Match] | None:
        """Records matching any of the terms (each taken literally), best rank first;
        None if the engine refuses the query or no term is searchable. ``stats``: what
        ``term_stats`` said of the query's tokens (the terms among them), for a backend
        whose ranking needs them. The first ``read`` matches (all if None) carry their
        record; the rest may come with their id and time alone."""

    def warm_up(self) -> None:
        """Start loading, in the background, what the first search needs (a backend
        whose searches hold nothing in the process: nothing)."""
        return None

    @abc.abstractmethod
    def search_substring(self, query: SearchQuery, text: str) -> list[MemoryRecord]:
        """Records containing ``text`` (escaped, case-insensitive), newest first, among
        the namespace's newest ``lexical.SUBSTRING_ROWS`` (no index serves it)."""

    @abc.abstractmethod
    def search_fragments(self, query: SearchQuery, fragments: Sequence[str]) -> list[MemoryRecord]:
        """Records whose title, summary or facts contain any of the fragments (taken
        literally, case-insensitive), most fragments first, then newest. Fragments of
        ``lexical.TRIGRAM_CHARS`` or more go through the trigram index; shorter ones scan
        the namespace's newest ``SUBSTRING_ROWS`` rows. Each fragment counts the newest
        ``FRAGMENT_WINDOW`` of its first ``FRAGMENT_CANDIDATES`` matches. ``timeout_s``
        bounds them all together."""

    @abc.abstractmethod
    def search_vector(
        self, query: SearchQuery, vector: np.ndarray, exact: bool = False, model: str | None = None
    ) -> list[VectorHit]:
        """The ``limit`` embedded records under the namespace nearest to ``vector`` by
        cosine, best first, after the filters (``Vectors.vector_index`` backends; the
        others raise NotImplementedError). ``exact``: a scan of the namespace's rows
        instead of the approximate index. ``model``: none unless the stored vectors are
        of that model (``EmbeddingModels``)."""

"""Retrieval legs: each turns a query into one ranked list of candidates.

A ``Leg`` has a ``name`` (what fusion weighs it by and labels its hits with) and a
``search``. The retriever runs its first leg on the calling thread and the others beside
it; fusion (``fusion.fuse``) takes however many lists come back. A leg that cannot answer
now raises ``Unavailable``, and the search goes on without it, marked degraded.
"""

from __future__ import annotations

import logging
import threading
from datetime import datetime
from typing import TYPE_CHECKING, Protocol

import numpy as np

from wakemark.shared.retrieval.fusion import Candidate
from wakemark.shared.retrieval.lexical import search_lexical
from wakemark.shared.retrieval.vectors import VectorCache

if TYPE_CHECKING:
    from wakemark.shared.cache import Epochs
    from wakemark.shared.config import Settings
    from wakemark.shared.embedding import Embedder
    from wakemark.shared.storage import Storage

log = logging.getLogger(__name__)

LEXICAL = "fts"
RECENT_QUERIES = 32  # query vectors kept for the gate's second look
VECTOR = "semantic"
# A search waits this long for a namespace's vectors to load (or, after many writes, to
# refresh); past it the search goes on without the vector leg while the load finishes
# in the background.
COLD_LOAD_WAIT_S = 0.15


class Unavailable(Exception):
    """The leg cannot answer now; the message says why (logged, rate-limited)."""


class Leg(Protocol):
    name: str

    def search(
        self,
        namespace: str,
        query: str,
        k: int,
        observation_type: str | None = None,
        since: datetime | None = None,
    ) -> list[Candidate]:
        """At most ``k`` candidates under the namespace (a prefix), best first."""
        ...


class LexicalLeg:
    """Full-text search on the rarest terms, or substring match (``lexical``)."""

    name = LEXICAL

    def __init__(self, storage: Storage) -> None:
        self._storage = storage

    def search(
        self,
        namespace: str,
        query: str,
        k: int,
        observation_type: str | None = None,
        since: datetime | None = None,
    ) -> list[Candidate]:
        hits = search_lexical(self._storage, namespace, query, k, observation_type, since)
        return [
            Candidate(h.record.record_id, h.record.created_at.timestamp(), record=h.record)
            for h in hits
        ]


class VectorLeg:
    """Cosine nearest neighbours of the query's embedding in the namespace's cached
    matrix. The model loads in the background: a search never waits for a cold model."""

    name = VECTOR

    def __init__(
        self, settings: Settings, storage: Storage, embedder: Embedder, epochs: Epochs
    ) -> None:
        self._settings = settings
        self._embedder = embedder
        # Looked up at each call rather than bound now, so a replaced method is used.
        self._cache = VectorCache(
            lambda ns, since: storage.list_embeddings(ns, since),
            lambda ns: epochs.get(ns),
            lambda ns: storage.embedded_ids(ns),
        )
        self._warm_lock = threading.Lock()
        self._warming = False
        self._recent: dict[str, np.ndarray] = {}  # query -> vector, oldest first
        self._recent_lock = threading.Lock()

    def search(
        self,
        namespace: str,
        query: str,
        k: int,
        observation_type: str | None = None,
        since: datetime | None = None,
    ) -> list[Candidate]:
        if self._settings.embedder == "off":
            raise Unavailable("embedder off")
        state = self._embedder.state
        if state == "not_loaded":
            self.warm_up()
            raise Unavailable("embedder not loaded yet (warming up)")
        if state != "ready":
            raise Unavailable(f"embedder {state}")
        vectors = self._cache.get_within(namespace, COLD_LOAD_WAIT_S)
        if vectors is None:
            raise Unavailable("vectors of the namespace still loading")
        if not vectors.ids:
            raise Unavailable("no embedded records in the namespace")
        return vectors.top(self._query_vector(query), k, observation_type, since)

    def cosines(self, namespace: str, query: str, record_ids: list[str]) -> dict[str, float]:
        """The query's cosine with each of ``record_ids`` that has a vector here (the
        relevance gate's evidence for hits this leg did not rank); after ``search``."""
        vectors = self._cache.get_within(namespace, 0.0)
        if vectors is None or not vectors.ids:
            return {}
        return vectors.cosines(self._query_vector(query), record_ids)

    def _query_vector(self, query: str) -> np.ndarray:
        # The gate asks again for the query ``search`` just embedded: reuse that vector.
        with self._recent_lock:
            hit = self._recent.get(query)
        if hit is None:
            hit = np.asarray(self._embedder.embed_query(query), dtype=np.float32)
            with self._recent_lock:
                self._recent[query] = hit
                while len(self._recent) > RECENT_QUERIES:
                    self._recent.pop(next(iter(self._recent)))
        return hit

    def prepare(self, namespace: str) -> None:
        """A session is starting: have the model and the namespace's vectors loaded (in
        the background) by the time its first prompt searches."""
        if self._settings.embedder == "off":
            return
        if self._embedder.state == "not_loaded":
            self.warm_up()
        self._cache.warm(namespace)

    def warm_up(self) -> None:
        """Load the model on a background thread, once at a time."""
        with self._warm_lock:
            if self._warming:
                return
            self._warming = True

        def load() -> None:
            try:
                self._embedder.embed_query("warm up")
            except Exception as exc:
                log.warning("embedder warm-up failed: %s", exc)
            finally:
                with self._warm_lock:
                    self._warming = False

        threading.Thread(target=load, name="wakemark-embedder-warmup", daemon=True).start()

    def cache_stats(self) -> dict[str, int]:
        return self._cache.stats()

    def after_fork(self) -> None:
        # The parent's loading threads do not exist here, and its locks may be held.
        self._cache = self._cache.fresh()
        self._warm_lock = threading.Lock()
        self._warming = False
        self._recent_lock = threading.Lock()

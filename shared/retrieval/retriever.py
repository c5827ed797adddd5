"""Hybrid search: lexical + vector legs fused by rank, inside a deadline, never failing."""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

import numpy as np

from wakemark.shared.models import Event, MemoryRecord, is_namespace_prefix
from wakemark.shared.retrieval import gate, inject
from wakemark.shared.retrieval.audit import Audit, build_row
from wakemark.shared.retrieval.formatting import format_index
from wakemark.shared.retrieval.fusion import (
    RRF_K,
    Candidate,
    Fused,
    VectorCandidate,
    fuse,
    params_for,
)
from wakemark.shared.retrieval.metrics import SearchMetrics
from wakemark.shared.retrieval.query import query_text
from wakemark.shared.retrieval.vectors import VectorCache, VectorSet

if TYPE_CHECKING:
    from wakemark.shared.runtime import Runtime
    from wakemark.shared.storage import LexicalHit

log = logging.getLogger(__name__)

CANDIDATES = 4  # each leg returns limit x 4 candidates for the fusion
PROMPT_LIMIT = 5  # records in the prompt-time context block, at most
PROMPT_CANDIDATES = 10  # hits the relevance gate chooses those from
INDEX_PAGE = 100
WARN_EVERY_S = 60.0  # one warning per degrade reason per minute, not one per search
# A search waits this long for a namespace's vectors to load (or, after many writes, to
# refresh); past it the search is lexical only and the load finishes in the background.
COLD_LOAD_WAIT_S = 0.15


@dataclass(frozen=True)
class SearchHit:
    record: MemoryRecord
    match_source: str  # "fts" | "semantic" | "hybrid"
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
                    "relevance": round(hit.relevance, 4),
                }
                for hit in self.items
            ],
            "latency_ms": self.latency_ms,
            "degraded": self.degraded,
        }

    def at_least(self, min_relevance: float) -> SearchResult:
        """Only the hits whose relevance reaches ``min_relevance``, in the same order."""
        items = [h for h in self.items if h.relevance >= min_relevance]
        return replace(self, items=items)


@dataclass(frozen=True)
class _VectorLeg:
    candidates: list[VectorCandidate]
    query: np.ndarray
    vectors: VectorSet


@dataclass(frozen=True)
class _Outcome:
    items: list[SearchHit]
    degraded: bool
    lexical_hits: int


class Retriever:
    def __init__(self, runtime: Runtime) -> None:
        self._rt = runtime
        self._settings = runtime.settings
        self._fusion = params_for(runtime.settings.fusion)
        self._cache = VectorCache(
            lambda ns, since: self._rt.storage.list_embeddings(ns, since),
            lambda ns: self._rt.epochs.get(ns),
            lambda ns: self._rt.storage.embedded_ids(ns),
        )
        self._metrics = SearchMetrics()
        self._audit = Audit(lambda: self._rt.storage)
        self._start_pools()
        self._warm_lock = threading.Lock()
        self._warming = False
        self._warned: dict[str, float] = {}

    def _start_pools(self) -> None:
        # Threads start on first submit, not here. The outer pool races the deadline; the
        # inner one runs the vector leg beside the lexical leg (both release the GIL).
        self._pid = os.getpid()
        self._outer = ThreadPoolExecutor(max_workers=4, thread_name_prefix="wakemark-search")
        self._inner = ThreadPoolExecutor(max_workers=4, thread_name_prefix="wakemark-vector")

    def _after_fork(self) -> None:
        """A forked child (gunicorn worker) inherits pools whose threads do not exist and
        locks another thread may hold: start both afresh."""
        if os.getpid() != self._pid:
            self._start_pools()
            self._cache = self._cache.fresh()
            self._warm_lock = threading.Lock()
            self._warming = False

    # --- public ---------------------------------------------------------------------------
    def search(
        self,
        namespace: str,
        query: Any,
        limit: int = 10,
        observation_type: str | None = None,
        days: int | None = None,
    ) -> SearchResult:
        start = time.perf_counter()
        try:
            text = query_text(query)
            if not text or limit <= 0 or not is_namespace_prefix(namespace):
                return SearchResult(latency_ms=_ms(start))
            self._after_fork()
            since = datetime.now(UTC) - timedelta(days=days) if days else None
            budget_s = self._settings.retrieval_budget_ms / 1000.0
            future = self._outer.submit(
                self._search, namespace, text, limit, observation_type, since
            )
            outcome = future.result(timeout=max(0.0, budget_s - (time.perf_counter() - start)))
        except FutureTimeout:
            latency = _ms(start)
            log.warning("search exceeded the %d ms budget", self._settings.retrieval_budget_ms)
            self._metrics.record(latency, degraded=True, timed_out=True)
            return SearchResult(latency_ms=latency, degraded=True)
        except Exception:
            latency = _ms(start)
            log.exception("search failed; returning an empty result")
            self._metrics.record(latency, degraded=True, error=True)
            return SearchResult(latency_ms=latency, degraded=True)
        latency = _ms(start)
        self._metrics.record(latency, degraded=outcome.degraded, lexical_hits=outcome.lexical_hits)
        return SearchResult(outcome.items, latency, outcome.degraded)

    def for_prompt(
        self, namespace: str, event: Any, min_relevance: float | None = None
    ) -> dict[str, Any]:
        """The gated context block for a prompt: ``{context, records, latency_ms}``, plus
        ``retrieval_id`` when ``event`` is a stored prompt event (its audit row)."""
        start = time.perf_counter()
        try:
            threshold = self._settings.min_relevance if min_relevance is None else min_relevance
            result = self.search(namespace, event, limit=PROMPT_CANDIDATES)
            stored = isinstance(event, Event)
            seen = self._seen(event) if stored else set()
            selection = inject.select(
                result.items, threshold, seen, self._settings.prompt_max_bytes, PROMPT_LIMIT
            )
            self._audit.count(selection)
            out: dict[str, Any] = {
                "context": selection.context,
                "records": [h.record.record_id for h in selection.injected],
                "latency_ms": result.latency_ms,
            }
            if stored and event.namespace == namespace:
                row = build_row(event, result, selection, threshold, _ms(start))
                self._audit.write(row)
                out["retrieval_id"] = row.retrieval_id
            return out
        except Exception:
            log.exception("prompt retrieval failed; returning no context")
            return {"context": "", "records": [], "latency_ms": _ms(start)}

    def _seen(self, event: Event) -> set[str]:
        try:
            return self._audit.seen(event.namespace, event.session_id, event.event_id)
        except Exception as exc:  # no dedupe is better than no context
            log.warning("session injections unreadable: %r", exc)
            return set()

    def session_index(self, namespace: str, max_bytes: int | None = None) -> dict[str, Any]:
        """Pinned, then recent records, one line each, within ``max_bytes`` UTF-8 bytes."""
        budget = max_bytes if max_bytes is not None else self._settings.context_max_bytes
        try:
            if not is_namespace_prefix(namespace) or budget <= 0:
                return {"context": "", "used_bytes": 0}
            self._warm_for_prompts(namespace)
            text, used = format_index(self._iter_records(namespace), budget)
            return {"context": text, "used_bytes": used}
        except Exception:
            log.exception("session index failed; returning no context")
            return {"context": "", "used_bytes": 0}

    def metrics(self) -> dict[str, Any]:
        """For ``/health``: counts, rates and latencies only, never query or record text."""
        snap: dict[str, Any] = dict(self._metrics.snapshot())
        snap["fusion"] = self._settings.fusion
        snap["vector_cache"] = self._cache.stats()
        snap["prompts"] = self._audit.snapshot()
        return snap

    def prometheus_lines(self) -> list[str]:
        lines = self._metrics.prometheus_lines() + self._audit.prometheus_lines()
        cache = self._cache.stats()
        lines += [
            "# HELP wakemark_vector_cache_bytes Bytes held by the in-process vector matrices.",
            "# TYPE wakemark_vector_cache_bytes gauge",
            f"wakemark_vector_cache_bytes {cache['bytes']}",
            "# HELP wakemark_vector_cache_rows Embedded records held in the vector cache.",
            "# TYPE wakemark_vector_cache_rows gauge",
            f"wakemark_vector_cache_rows {cache['rows']}",
        ]
        return lines

    def close(self) -> None:
        self._outer.shutdown(wait=False, cancel_futures=True)
        self._inner.shutdown(wait=False, cancel_futures=True)

    # --- the search itself -----------------------------------------------------------------
    def _search(
        self,
        namespace: str,
        text: str,
        limit: int,
        observation_type: str | None,
        since: datetime | None,
    ) -> _Outcome:
        # At least the prompt's depth: the gate's rarity pool and cosine baseline are then
        # the same whatever the limit, and so is the relevance of a hit.
        k = max(limit, PROMPT_LIMIT) * CANDIDATES
        vector_future = self._inner.submit(
            self._vector_leg, namespace, text, k, observation_type, since
        )
        lexical = self._rt.storage.search_lexical(namespace, text, k, observation_type, since)
        vector = self._vector_result(vector_future)
        if vector is None:
            items = [
                SearchHit(h.record, "fts", 1.0 / (RRF_K + rank + 1))
                for rank, h in enumerate(lexical[:limit])
            ]
            return _Outcome(_with_relevance(text, items, lexical, None), True, len(lexical))
        fused = fuse(
            [Candidate(h.record.record_id, h.record.created_at.timestamp()) for h in lexical],
            vector.candidates,
            limit,
            self._fusion,
        )
        items = self._hydrate(namespace, fused, lexical)
        return _Outcome(_with_relevance(text, items, lexical, vector), False, len(lexical))

    def _vector_result(self, future: Future[_VectorLeg | str]) -> _VectorLeg | None:
        """The vector candidates, or None (after one rate-limited warning) to degrade."""
        try:
            outcome = future.result()
        except Exception as exc:
            outcome = f"vector stage failed: {exc.__class__.__name__}: {exc}"
        if isinstance(outcome, str):
            self._warn(outcome)
            return None
        return outcome

    def _vector_leg(
        self,
        namespace: str,
        text: str,
        k: int,
        observation_type: str | None,
        since: datetime | None,
    ) -> _VectorLeg | str:
        """Candidates best first, or a string saying why the search degrades."""
        if self._settings.embedder == "off":
            return "embedder off"
        embedder = self._rt.embedder
        state = embedder.state
        if state == "not_loaded":
            self.warm_up()
            return "embedder not loaded yet (warming up)"
        if state != "ready":
            return f"embedder {state}"
        vectors = self._cache.get_within(namespace, COLD_LOAD_WAIT_S)
        if vectors is None:
            return "vectors of the namespace still loading"
        if not vectors.ids:
            return "no embedded records in the namespace"
        query = embedder.embed_query(text)
        return _VectorLeg(vectors.top(query, k, observation_type, since), query, vectors)

    def _hydrate(
        self, namespace: str, fused: list[Fused], lexical: list[LexicalHit]
    ) -> list[SearchHit]:
        known = {h.record.record_id: h.record for h in lexical}
        missing = [f.record_id for f in fused if f.record_id not in known]
        if missing:
            known.update((r.record_id, r) for r in self._rt.storage.get_memory_records(missing))
        items = []
        for f in fused:
            record = known.get(f.record_id)
            # A record deleted after the matrix was cached is simply gone; the prefix check
            # is a second lock on the namespace door.
            if record is not None and record.namespace.startswith(namespace):
                items.append(SearchHit(record, f.match_source, f.score))
        return items

    def _iter_records(self, namespace: str) -> Iterator[MemoryRecord]:
        """Pinned first, then newest, one storage page at a time."""
        offset = 0
        while True:
            page = self._rt.storage.list_memory_records(
                namespace, limit=INDEX_PAGE, offset=offset, pinned_first=True, count=False
            )
            yield from page.items
            offset += len(page.items)
            if len(page.items) < INDEX_PAGE:
                return

    def _warm_for_prompts(self, namespace: str) -> None:
        """A session is starting: have the model and the namespace's vectors loaded (in
        the background) by the time its first prompt searches."""
        if self._settings.embedder == "off":
            return
        self._after_fork()
        if self._rt.embedder.state == "not_loaded":
            self.warm_up()
        self._cache.warm(namespace)

    def warm_up(self) -> None:
        """Load the model in the background: a search never waits for a cold model."""
        with self._warm_lock:
            if self._warming:
                return
            self._warming = True

        def load() -> None:
            try:
                self._rt.embedder.embed_query("warm up")
            except Exception as exc:
                log.warning("embedder warm-up failed: %s", exc)
            finally:
                with self._warm_lock:
                    self._warming = False

        threading.Thread(target=load, name="wakemark-embedder-warmup", daemon=True).start()

    def _warn(self, reason: str) -> None:
        now = time.monotonic()
        key = reason.split(":", 1)[0]
        if now - self._warned.get(key, -WARN_EVERY_S) >= WARN_EVERY_S:
            self._warned[key] = now
            log.warning("search degraded to lexical only: %s", reason)


def _with_relevance(
    text: str, items: list[SearchHit], lexical: list[LexicalHit], vector: _VectorLeg | None
) -> list[SearchHit]:
    """The hits with the gate's evidence and relevance; their order is unchanged."""
    if not items:
        return items
    lexical_ranks = {h.record.record_id: h.rank for h in lexical}
    vector_ranks: dict[str, int] = {}
    cosines = baseline = None
    if vector is not None:
        vector_ranks = {c.record_id: i for i, c in enumerate(vector.candidates)}
        cosines = {c.record_id: c.cosine for c in vector.candidates}
        missing = [h.record.record_id for h in items if h.record.record_id not in cosines]
        cosines.update(vector.vectors.cosines(vector.query, missing))
        if vector.candidates:
            baseline = vector.candidates[min(gate.BASELINE_RANK, len(vector.candidates)) - 1].cosine
    pool = [h.record for h in lexical]
    evidence = gate.gather(
        text, [h.record for h in items], pool, lexical_ranks, vector_ranks, cosines, baseline
    )
    return [
        replace(hit, relevance=gate.relevance(ev), evidence=ev)
        for hit, ev in zip(items, evidence, strict=True)
    ]


def _ms(start: float) -> float:
    return round((time.perf_counter() - start) * 1000.0, 2)

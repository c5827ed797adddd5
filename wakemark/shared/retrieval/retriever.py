"""Hybrid search: ranked lists of several legs fused by rank, inside a deadline, never
failing (a failed search is empty and marked degraded)."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, Protocol

from wakemark.shared.models import Event, MemoryRecord, is_namespace_prefix, new_ulid
from wakemark.shared.retrieval import dates, gate, inject
from wakemark.shared.retrieval.audit import Audit, Queued, build_row
from wakemark.shared.retrieval.formatting import format_index
from wakemark.shared.retrieval.fusion import Candidate, Fused, fuse, params_for
from wakemark.shared.retrieval.hits import PromptContext, SearchHit, SearchResult, SessionIndex
from wakemark.shared.retrieval.legs import (
    LEGS,
    Leg,
    LegParts,
    NothingToSearch,
    TopicLeg,
    Unavailable,
)
from wakemark.shared.retrieval.metrics import SearchMetrics
from wakemark.shared.retrieval.query import QuerySource, query_text
from wakemark.shared.retrieval.staleness import (
    FROM_CLIENT,
    NOT_READ,
    PROMPT_READ_BYTES,
    UNCHECKED,
    CodeCheck,
    Verdict,
)
from wakemark.shared.storage import (
    Anchors,
    NotFoundError,
    Records,
    RetrievalLog,
    Search,
    SearchQuery,
    Vectors,
)

if TYPE_CHECKING:
    from wakemark.shared.cache import Epochs
    from wakemark.shared.config import Settings
    from wakemark.shared.embedding import Embedder

log = logging.getLogger(__name__)

CANDIDATES = 4  # each leg returns limit x 4 candidates for the fusion
PROMPT_LIMIT = 5  # records in the prompt-time context block, at most
PROMPT_CANDIDATES = 10  # hits the relevance gate chooses those from
INDEX_PAGE = 100
WARN_EVERY_S = 60.0  # one warning per degrade reason per minute, not one per search
# Every leg must answer within this share of the search's budget (their database
# statements are cancelled there; a leg still running is left out, and the search counts
# as degraded), leaving the rest to fusion, hydration and the gate: the search answers
# with the legs it has instead of running out of time empty. On a large namespace the
# trigram leg took seconds (bench/results/scale.md) and ran on after the search had
# given up.
LEG_SHARE = 0.8
# The session of the best hit, for its neighbours: records in the namespace's time order
# no further from it than this (a record of the next day is another session).
SESSION_GAP = timedelta(hours=1)
# A neighbour's score is the best hit's times this, once per step away: next to the best
# hit, above the hits that only one leg ranked lower.
NEIGHBOUR_SHARE = 0.9
SESSION = "session"  # the label of a hit only the best hit's session brought


class RetrieverStorage(Search, Vectors, Records, RetrievalLog, Anchors, Protocol):
    """What retrieval reads and writes: the legs' search and vectors, the records they
    hydrate and list, the retrieval log, the records' code anchors."""


@dataclass(frozen=True)
class _Outcome:
    items: list[SearchHit]
    degraded: bool
    lexical_hits: int


class _Late(Exception):
    """The search thread started past the search's deadline: the search timed out even if
    its caller, itself late to wake, is still there to read this."""


class Retriever:
    """Searches its legs: the first (lexical) answers or the search fails; the others run
    beside it, and one that fails or is unavailable only degrades the search.

    Never fails: ``search``, ``for_prompt`` and ``session_index`` are where every error of
    retrieval ends, logged, as an empty result; their callers (API, MCP, viewer, hooks)
    add no guard of their own."""

    def __init__(
        self, settings: Settings, storage: RetrieverStorage, embedder: Embedder, epochs: Epochs
    ) -> None:
        self._settings = settings
        self._storage = storage
        parts = LegParts(settings, storage, embedder, epochs)
        self._legs: tuple[Leg, ...] = tuple(leg.build(parts) for leg in LEGS.values())
        self._fusion = params_for(settings.fusion, self._legs)
        self._semantic = next((leg for leg in self._legs if leg.evidence == "semantic"), None)
        self._topic = None
        if self._semantic is not None and settings.topic_query == "on":
            self._topic = TopicLeg(self._semantic)
            self._fusion = replace(self._fusion, labels={TopicLeg.name: self._semantic.name})
        self._metrics = SearchMetrics()
        self._audit = Audit(lambda: storage)
        self._code = CodeCheck(storage)
        self._start_pools()
        self._warned: dict[str, float] = {}

    def _start_pools(self) -> None:
        # Threads start on first submit, not here. The outer pool races the deadline; the
        # inner one runs the other legs beside the first (all release the GIL).
        self._outer = ThreadPoolExecutor(max_workers=4, thread_name_prefix="wakemark-search")
        self._inner = ThreadPoolExecutor(max_workers=4, thread_name_prefix="wakemark-legs")

    def after_fork(self) -> None:
        """A forked child inherits pools whose threads do not exist and locks another
        thread may hold: start afresh."""
        self._start_pools()
        self._code.after_fork()
        for leg in self._legs:
            leg.after_fork()
        self._audit.after_fork()

    # --- public ---------------------------------------------------------------------------
    @property
    def legs(self) -> tuple[Leg, ...]:
        return self._legs

    def search(
        self,
        namespace: str,
        query: QuerySource,
        limit: int = 10,
        observation_type: str | None = None,
        days: int | None = None,
        now: datetime | None = None,
    ) -> SearchResult:
        """``now``: when the query is asked, for its relative dates; default: now, in the
        server's time zone (the asker's, for a local server)."""
        start = time.perf_counter()
        try:
            text = query_text(query)
            if not text or limit <= 0 or not is_namespace_prefix(namespace):
                return SearchResult(latency_ms=_ms(start))
            since = datetime.now(UTC) - timedelta(days=days) if days else None
            budget_s = self._settings.retrieval_budget_ms / 1000.0
            future = self._outer.submit(
                self._search,
                namespace,
                text,
                limit,
                observation_type,
                since,
                now or datetime.now().astimezone(),
                start + budget_s * LEG_SHARE,
                start + budget_s,
            )
            outcome = future.result(timeout=max(0.0, budget_s - (time.perf_counter() - start)))
        except (FutureTimeout, _Late):
            # Still queued behind other searches: it never starts. Searches given up on but
            # run anyway make every later one wait for them and miss its own deadline in
            # turn (bench scale, on a loaded box: half of the big project's searches).
            future.cancel()
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
        self,
        namespace: str,
        event: QuerySource,
        min_relevance: float | None = None,
        audit: bool = True,
        read_files: bool = False,
        reported: Mapping[str, str | None] | None = None,
        root: str | None = None,
    ) -> PromptContext:
        """The gated context block for a prompt, with ``retrieval_id`` when ``event`` is a
        stored prompt event (its audit row). With ``audit=False`` (a preview) nothing is
        written or counted, and the audit row's ``candidates`` (relevance, injected, why
        not) come back instead. ``read_files``: the client is the server's own user, whose
        project files the hits are checked against (``staleness``), at ``root`` when the
        prompt came from there (else where each record was captured); else ``reported``:
        the client's own hashes of its files, when its forwarder sent them."""
        start = time.perf_counter()
        try:
            threshold = self._settings.min_relevance if min_relevance is None else min_relevance
            min_prompt = self._settings.min_prompt_relevance
            result = self.search(namespace, event, limit=PROMPT_CANDIDATES)
            seen = self._seen(event) if isinstance(event, Event) else set()
            items, gone, note, report = self._checked(result.items, read_files, reported, root)
            selection = inject.select(
                items,
                min_prompt,
                threshold,
                seen,
                self._settings.prompt_max_bytes,
                PROMPT_LIMIT,
            )
            selection = replace(
                selection, skipped={**gone, **selection.skipped}, reason=selection.reason + note
            )
            out = PromptContext(
                selection.context,
                [h.record.record_id for h in selection.injected],
                result.latency_ms,
                watch=report.watch,
                baselines=report.baselines,
            )
            if isinstance(event, Event) and event.namespace == namespace:
                args = (event, result, selection, min_prompt, threshold, _ms(start))
                if audit:
                    self._audit.count(selection)
                    retrieval_id, now = new_ulid(), datetime.now(UTC)
                    queued = Queued(
                        retrieval_id,
                        event.event_id,
                        event.namespace,
                        event.session_id,
                        [h.record.record_id for h in selection.injected],
                        lambda: build_row(*args, retrieval_id=retrieval_id, created_at=now),
                    )
                    self._audit.write(queued)
                    return replace(out, retrieval_id=retrieval_id)
                row = build_row(*args)
                candidates = [c.model_dump(mode="json") for c in row.candidates]
                return replace(out, candidates=candidates)
            if audit:
                self._audit.count(selection)
            return out
        except Exception:
            log.exception("prompt retrieval failed; returning no context")
            return PromptContext(latency_ms=_ms(start))

    def code_verdicts(
        self,
        record_ids: list[str],
        reported: Mapping[str, str | None] | None = None,
        root: str | None = None,
    ) -> dict[str, Verdict]:
        """Each record's state against the project's files now, at ``root`` (else where
        each record was captured; records without anchors are left out), reading no more
        than a prompt may, or from the client's ``reported`` hashes (never taken as a
        baseline here); a failed check is logged and leaves them all out."""
        try:
            return self._code.verdicts(
                record_ids, root, read_budget=PROMPT_READ_BYTES, reported=reported
            )
        except Exception:
            log.exception("code check failed; records left unchecked")
            return {}

    def _checked(
        self,
        hits: list[SearchHit],
        read_files: bool,
        reported: Mapping[str, str | None] | None,
        root: str | None,
    ) -> tuple[list[SearchHit], dict[str, str], str, PromptContext]:
        """The hits to offer the gate (gone ones dropped, changed ones marked and after
        current ones of equal relevance), why each gone one was dropped, the note the
        audit row's reason takes, and (``watch``, ``baselines``) for a client whose files
        are not read."""
        report = PromptContext()
        if not hits:
            return hits, {}, "", report
        ids = [h.record.record_id for h in hits]
        if read_files:
            verdicts, note = self.code_verdicts(ids, root=root), ""
        else:
            note = f"; {NOT_READ}" if reported is None else f"; {FROM_CLIENT}"
            try:
                verdicts = {} if reported is None else self._code.verdicts(
                    ids, reported=reported, baselines=report.baselines)  # fmt: skip
                report.watch.extend(self._code.cited(ids))
                if reported is not None:
                    note = f"; {self._code.client_note(ids)}"
            except Exception:
                log.exception("code check failed; records left unchecked")
                verdicts = {}
        kept: list[tuple[bool, SearchHit]] = []
        gone: dict[str, str] = {}
        for hit in hits:
            verdict = verdicts.get(hit.record.record_id, UNCHECKED)
            if verdict.state == "gone":
                gone[hit.record.record_id] = f"gone: {verdict.why()}"
                continue
            kept.append((verdict.state == "changed", _marked(hit, verdict)))
        # The gate takes hits by relevance, then in this order: a stable sort puts a
        # changed record after the current ones of equal relevance.
        kept.sort(key=lambda pair: pair[0])
        return [hit for _, hit in kept], gone, note, report

    def _seen(self, event: Event) -> set[str]:
        try:
            return self._audit.seen(event.namespace, event.session_id, event.event_id)
        except Exception as exc:  # no dedupe is better than no context
            log.warning("session injections unreadable: %r", exc)
            return set()

    def session_index(
        self,
        namespace: str,
        max_bytes: int | None = None,
        read_files: bool = False,
        reported: Mapping[str, str | None] | None = None,
        root: str | None = None,
    ) -> SessionIndex:
        """Pinned, then recent records, one line each, within ``max_bytes`` UTF-8 bytes;
        with ``read_files`` (at ``root``, as ``for_prompt``; else from the client's
        ``reported`` hashes), gone records left out and changed ones marked."""
        budget = max_bytes if max_bytes is not None else self._settings.context_max_bytes
        try:
            if not is_namespace_prefix(namespace) or budget <= 0:
                return SessionIndex()
            for leg in self._legs:
                leg.prepare(namespace)
            records = self._iter_records(namespace, read_files, reported, root)
            return SessionIndex(*format_index(records, budget))
        except Exception:
            log.exception("session index failed; returning no context")
            return SessionIndex()

    def metrics(self) -> dict[str, Any]:
        """For ``/health``: counts, rates and latencies only, never query or record text."""
        snap: dict[str, Any] = dict(self._metrics.snapshot())
        snap["fusion"] = self._settings.fusion
        for leg in self._legs:
            snap.update(leg.metrics())
        snap["prompts"] = self._audit.snapshot()
        return snap

    def prometheus_lines(self) -> list[str]:
        lines = self._metrics.prometheus_lines() + self._audit.prometheus_lines()
        for leg in self._legs:
            lines += leg.prometheus_lines()
        return lines

    def flush_audit(self) -> None:
        """Stores the queued audit rows: a reader of the audit sees every answer given."""
        self._audit.flush()

    def close(self) -> None:
        self._outer.shutdown(wait=False, cancel_futures=True)
        self._inner.shutdown(wait=False, cancel_futures=True)
        self._audit.close()

    # --- the search itself -----------------------------------------------------------------
    def _search(
        self,
        namespace: str,
        text: str,
        limit: int,
        observation_type: str | None,
        since: datetime | None,
        now: datetime,
        legs_deadline: float,
        deadline: float,
    ) -> _Outcome:
        """``legs_deadline``, ``deadline``: ``time.perf_counter()`` values."""
        if time.perf_counter() >= deadline:
            raise _Late
        # At least the prompt's depth: the gate's rarity pool and cosine baseline are then
        # the same whatever the limit, and so is the relevance of a hit.
        k = max(limit, PROMPT_LIMIT) * CANDIDATES
        window = dates.resolve(text, now) if self._settings.dates == "on" else None
        # The legs and the gate read the query's other words: "yesterday" names no topic.
        text = (window.strip(text) if window else "") or text
        first, *others = self._legs
        where = SearchQuery(namespace, k, observation_type, since)

        def submit(leg: Leg) -> tuple[Leg, Future[list[Candidate]]]:
            return leg, self._inner.submit(_bounded, leg, where, text, legs_deadline)

        extra = [self._topic] if self._topic is not None else []
        futures = [submit(leg) for leg in [*others, *extra] if leg.runs_beside(text)]
        degraded = False
        try:
            ranked = {first.name: _bounded(first, where, text, legs_deadline)}
        except Unavailable as exc:
            # The other legs' hits (and what it had), or none: degraded, not failed.
            self._warn(reason := f"{first.name}: {exc}", reason)
            ranked, degraded = {first.name: exc.partial}, True
        if not degraded:
            later = [leg for leg in others if not leg.runs_beside(text)]
            futures += [submit(leg) for leg in later if leg.runs_after(text, ranked[first.name], k)]
        for leg, future in futures:
            wait = deadline if leg.waits_to_end else legs_deadline
            found, missed = self._leg_result(leg, future, wait)
            degraded |= missed
            if found is not None:
                ranked[leg.name] = found
        # Every hit, for the window's order and the neighbours; cut to the limit after.
        fused = fuse(ranked, len({c.record_id for cs in ranked.values() for c in cs}), self._fusion)
        if window is not None:
            favoured = [f.record_id for f in fused if window.holds(f.created_ts)]
            fused = fuse(ranked, len(fused), self._fusion, favoured)
        fused, neighbours = self._with_neighbours(namespace, fused)
        items = self._hydrate(namespace, fused[:limit], [*ranked.values(), neighbours])
        items = self._with_relevance(namespace, text, items, ranked)
        return _Outcome(items, degraded, len(ranked[first.name]))

    def _with_neighbours(
        self, namespace: str, fused: list[Fused]
    ) -> tuple[list[Fused], list[Candidate]]:
        """The hits with the best hit's session neighbours among them, and those as
        candidates (their records read). A question that needs two facts often finds one
        and not the other, said in the same conversation a few turns away."""
        n = self._settings.session_neighbours
        if not n or not fused:
            return fused, []
        best = fused[0]
        try:
            around = self._storage.timeline(best.record_id, n, n)
        except NotFoundError:  # deleted since the legs read it
            return fused, []
        at = next((i for i, r in enumerate(around) if r.record_id == best.record_id), None)
        if at is None:
            return fused, []
        scores = {f.record_id: f for f in fused}
        found: list[Candidate] = []
        for i, record in enumerate(around):
            ts = record.created_at.timestamp()
            near = abs(ts - best.created_ts) <= SESSION_GAP.total_seconds()
            if i == at or not near or not record.namespace.startswith(namespace):
                continue
            score = best.score * NEIGHBOUR_SHARE ** abs(i - at)
            known = scores.get(record.record_id)
            if known is None:
                scores[record.record_id] = Fused(record.record_id, score, SESSION, ts)
            elif known.score < score:
                scores[record.record_id] = replace(known, score=score)
            found.append(Candidate(record.record_id, ts, record=record))
        order = sorted(scores.values(), key=lambda f: (-f.score, -f.created_ts, f.record_id))
        return order, found

    def _leg_result(
        self, leg: Leg, future: Future[list[Candidate]], deadline: float
    ) -> tuple[list[Candidate] | None, bool]:
        """The leg's candidates (or what it had when unavailable), or None, and whether the
        search is degraded for it (after one rate-limited warning); a leg that has not
        answered by ``deadline`` is left out (and never starts if queued)."""
        partial = None
        try:
            return future.result(timeout=max(0.0, deadline - time.perf_counter())), False
        except NothingToSearch:
            return None, False
        except FutureTimeout:
            future.cancel()
            key = reason = f"{leg.name}: not answered within {LEG_SHARE:.0%} of the budget"
        except Unavailable as exc:
            key = reason = f"{leg.name}: {exc}"
            partial = exc.partial or None
        except Exception as exc:
            key = f"{leg.name} failed"
            reason = f"{key}: {exc.__class__.__name__}: {exc}"
        self._warn(key, reason)
        return partial, True

    def _with_relevance(
        self, namespace: str, text: str, items: list[SearchHit], ranked: dict[str, list[Candidate]]
    ) -> list[SearchHit]:
        """The hits with the gate's evidence and relevance; their order is unchanged."""
        if not items:
            return items
        # Each lexical leg's hits the ones before it lack, in the legs' order.
        lexical: list[Candidate] = []
        known: set[str] = set()
        for leg in self._legs:
            if leg.evidence == "lexical":
                lexical += [c for c in ranked.get(leg.name, []) if c.record_id not in known]
                known.update(c.record_id for c in lexical)
        semantic = ranked.get(self._semantic.name) if self._semantic else None
        lexical_ranks = {c.record_id: i for i, c in enumerate(lexical)}
        vector_ranks: dict[str, int] = {}
        cosines = baseline = None
        if semantic is not None:
            vector_ranks = {c.record_id: i for i, c in enumerate(semantic)}
            cosines = {c.record_id: c.score for c in semantic}  # the vector leg's cosine
            missing = [h.record.record_id for h in items if h.record.record_id not in cosines]
            if missing and self._semantic:
                cosines.update(self._semantic.cosines(namespace, text, missing))
            if semantic:
                baseline = semantic[min(gate.BASELINE_RANK, len(semantic)) - 1].score
        pool = [c.record for c in lexical if c.record is not None]
        evidence = gate.gather(
            text, [h.record for h in items], pool, lexical_ranks, vector_ranks, cosines, baseline
        )
        return [
            replace(hit, relevance=gate.relevance(ev), evidence=ev)
            for hit, ev in zip(items, evidence, strict=True)
        ]

    def _hydrate(
        self, namespace: str, fused: list[Fused], ranked: Iterable[Sequence[Candidate]]
    ) -> list[SearchHit]:
        known = {c.record_id: c.record for cands in ranked for c in cands if c.record is not None}
        missing = [f.record_id for f in fused if f.record_id not in known]
        if missing:
            known.update((r.record_id, r) for r in self._storage.get_memory_records(missing))
        items = []
        for f in fused:
            record = known.get(f.record_id)
            # A record deleted after the matrix was cached is simply gone; the prefix check
            # is a second lock on the namespace door.
            if record is not None and record.namespace.startswith(namespace):
                items.append(SearchHit(record, f.match_source, f.score))
        return items

    def _iter_records(
        self,
        namespace: str,
        read_files: bool,
        reported: Mapping[str, str | None] | None,
        root: str | None,
    ) -> Iterator[MemoryRecord]:
        """Pinned first, then newest, one storage page at a time."""
        for page in self._storage.record_pages(namespace, INDEX_PAGE, pinned_first=True):
            if not read_files and reported is None:
                yield from page
                continue
            verdicts = self.code_verdicts([r.record_id for r in page], reported, root)
            for record in page:
                verdict = verdicts.get(record.record_id, UNCHECKED)
                if verdict.state != "gone":
                    yield _marked(SearchHit(record, "", 0.0), verdict).record

    def warm_up(self) -> None:
        """Load the model and the full-text index in the background: the first search
        waits for neither."""
        for leg in self._legs:
            leg.warm_up()

    def _warn(self, key: str, reason: str) -> None:
        now = time.monotonic()
        if now - self._warned.get(key, -WARN_EVERY_S) >= WARN_EVERY_S:
            self._warned[key] = now
            log.warning("search degraded, a leg is missing: %s", reason)


def _marked(hit: SearchHit, verdict: Verdict) -> SearchHit:
    """The hit with its record's title marked when its code changed since capture."""
    if verdict.state != "changed":
        return hit
    # "Fix the cache (changed since: …)", not "Fix the cache. (changed since: …)": the
    # marker ends the title.
    title = f"{hit.record.title.rstrip(' .:;,') or hit.record.title} {verdict.marker()}"
    return replace(hit, record=hit.record.model_copy(update={"title": title}))


def _bounded(leg: Leg, where: SearchQuery, text: str, deadline: float) -> list[Candidate]:
    """The leg's search with what is left until ``deadline`` (``time.perf_counter()``)
    when it starts, not when it was queued."""
    return leg.search(replace(where, timeout_s=deadline - time.perf_counter()), text)


def _ms(start: float) -> float:
    return round((time.perf_counter() - start) * 1000.0, 2)

"""Retrieval legs: each turns a query into one ranked list of candidates.

The legs are plug-ins, listed in ``LEGS``: the retriever builds each with
``build(LegParts)`` and knows none by name. A ``Leg`` has a ``name`` (what fusion weighs
it by and labels its hits with), a ``search``, and declares the rest of its part: its
fusion weight and tuned floor and cap, when it runs (``runs_beside``, ``runs_after``),
how long it is waited for (``waits_to_end``) and the evidence the relevance gate reads
from its list. The retriever runs the first leg on the calling thread (it answers or the
search fails) and the others beside it; fusion (``fusion.fuse``) takes however many
lists come back. A leg that cannot answer now raises ``Unavailable``, and the search goes
on without it, marked degraded; so does a leg whose database statements ran past the
``timeout_s`` it was given (they are cancelled: a search given up on does not hold a
connection and a thread).
"""

from __future__ import annotations

import logging
import re
import threading
import time
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, ClassVar, Literal, Protocol, Self

import numpy as np

from wakemark.shared.registry import Registry
from wakemark.shared.retrieval import gate
from wakemark.shared.retrieval.fusion import Candidate
from wakemark.shared.retrieval.lexical import search_lexical
from wakemark.shared.retrieval.query import cjk_bigrams, has_cjk, topic_text
from wakemark.shared.retrieval.vectors import MAX_ENTRIES, VectorCache, VectorSet
from wakemark.shared.storage import Search, SearchQuery, StorageTimeoutError, Vectors

if TYPE_CHECKING:
    from wakemark.shared.cache import Epochs
    from wakemark.shared.config import Settings
    from wakemark.shared.embedding import Embedder, Model
    from wakemark.shared.models import MemoryRecord

log = logging.getLogger(__name__)

LEXICAL = "fts"
TOPIC = "topic"
TRIGRAM = "trigram"
RECENT_QUERIES = 32  # query vectors kept for the gate's second look
VECTOR = "semantic"
# A search waits this long for a namespace's vectors to load (or, after many writes, to
# refresh); past it the search goes on without the vector leg while the load finishes
# in the background. A backend with a vector index waits for nothing: the database
# answers meanwhile.
COLD_LOAD_WAIT_S = 0.15
# A starting process loads the vectors of the namespaces searched this recently (by any
# process sharing its epochs), the latest first, as many as its cache holds.
PRELOAD_WITHIN_S = 3600.0
# Up to this many rows a namespace the process does not hold is scanned exactly in the
# database rather than through the HNSW graph, which is shared by every namespace and so
# visits ever more other namespaces' rows the smaller this one's share of the table is.
# For query vectors of the model (not samples of the records' own clusters) the walk of
# a project of a few percent of a million rows or less was slower than the scan at every
# size measured up to here (bench/results/README.md, teamload).
EXACT_MAX_ROWS = 16_000
# A search from the cache reads the stored model when this long has passed since the
# last read found it the process's own: a model swap (``backfill --rebuild``) bumps the
# epochs of processes sharing them through Redis, but not those of a process with
# epochs of its own, which would otherwise search its cached vectors of the old model
# until its next vector write. Searches between reads pay nothing.
MODEL_CHECK_S = 5.0


class Unavailable(Exception):
    """The leg cannot answer now; the message says why (logged, rate-limited).
    ``partial``: what it could answer meanwhile (fused with the other legs' lists; the
    search is still marked degraded)."""

    def __init__(self, reason: str, partial: list[Candidate] | None = None) -> None:
        super().__init__(reason)
        self.partial = partial or []


class NothingToSearch(Unavailable):
    """The leg has no data for the namespace (nothing embedded yet): it is left out of
    the search, which is not degraded for it, since no leg could have done better."""


class LegStorage(Vectors, Search, Protocol):
    """What legs read: the database's searches, and the vectors a leg caches."""


@dataclass(frozen=True)
class LegParts:
    """What a leg may be built from: the process's parts (``Runtime``)."""

    settings: Settings
    storage: LegStorage
    embedder: Embedder
    epochs: Epochs


class Leg:
    """A retrieval leg. Subclasses set ``name`` and implement ``build`` and ``search``;
    the defaults below make a leg that runs beside the first on every query, weighs 1,
    and gives the relevance gate no evidence."""

    name: ClassVar[str]
    weight: ClassVar[float] = 1.0  # its lists' weight in the rank fusion
    # The tuned fusion (WAKEMARK_FUSION=tuned): a hit only this leg found, with a leg score
    # below the floor, is dropped; at most ``cap`` such hits on a page.
    tuned_floor: ClassVar[float | None] = None
    tuned_cap: ClassVar[int | None] = None
    # What the relevance gate reads from its list: ranks as lexical evidence, or ranks and
    # cosines (``cosines``) as semantic evidence.
    evidence: ClassVar[Literal["lexical", "semantic"] | None] = None
    # Waited for until the search's deadline, not the legs': its statements are cancelled
    # at the legs' deadline, so it ends (and says why) before the search answers.
    waits_to_end: ClassVar[bool] = False

    @classmethod
    def build(cls, parts: LegParts) -> Leg:
        raise NotImplementedError

    def search(self, where: SearchQuery, query: str) -> list[Candidate]:
        """At most ``where.limit`` candidates under ``where.namespace`` (a prefix), best
        first; ``where.timeout_s`` bounds the database's statements."""
        raise NotImplementedError

    def runs_beside(self, query: str) -> bool:
        """Started with the first leg."""
        return True

    def runs_after(self, query: str, first: list[Candidate], k: int) -> bool:
        """Started once the first leg answered ``first`` (``k`` asked), if not beside it."""
        return False

    def cosines(self, namespace: str, query: str, record_ids: list[str]) -> dict[str, float]:
        """A semantic leg: the query's cosine with each of ``record_ids`` it can score."""
        return {}

    def prepare(self, namespace: str) -> None:
        """A session is starting in ``namespace``: load what its first search needs."""

    def warm_up(self) -> None:
        """Load what the first search needs, in the background."""

    def after_fork(self) -> None:
        """A forked child inherits threads that do not exist and locks they may hold."""

    def metrics(self) -> dict[str, Any]:
        """For ``/health``: counts only, never query or record text."""
        return {}

    def prometheus_lines(self) -> list[str]:
        return []


class DatabaseLeg(Leg):
    """A leg whose every answer is a database search (nothing held in the process)."""

    def __init__(self, storage: Search) -> None:
        self._storage = storage

    @classmethod
    def build(cls, parts: LegParts) -> Self:
        return cls(parts.storage)


class LexicalLeg(DatabaseLeg):
    """Full-text search on the rarest terms, or substring match (``lexical``)."""

    name = LEXICAL
    evidence = "lexical"

    def search(self, where: SearchQuery, query: str) -> list[Candidate]:
        try:
            hits = search_lexical(
                self._storage,
                where.namespace,
                query,
                where.limit,
                where.observation_type,
                where.since,
                where.timeout_s,
                read=gate.POOL,  # the records the gate reads; hydration reads the others it keeps
            )
        except StorageTimeoutError as exc:
            raise Unavailable(str(exc)) from exc
        return [Candidate(h.record_id, h.created_ts, record=h.record) for h in hits]

    def warm_up(self) -> None:
        """Start building the storage's full-text index held in memory, if it keeps one."""
        self._storage.warm_up()


_TOKEN = re.compile(r"[A-Za-z0-9][\w.\-]*\w")
_INNER_CAPITAL = re.compile(r"[a-z0-9][A-Z]|[A-Z][A-Z][a-z]")
_CAMEL = re.compile(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|[0-9]+")
IDENTIFIER_CHARS = 8  # a shorter token is a word, which the lexical leg matches whole
PART_CHARS = 3
MAX_FRAGMENTS = 16  # each costs a query: a long CJK paragraph is cut here


def _identifiers(query: str) -> list[tuple[str, list[str]]]:
    """Each long identifier (snake_case, dotted.name, kebab-case, camelCase) with its
    ``_``/``.``/camel parts of ``PART_CHARS`` or more (kebab-case stays whole: it is as
    often a hyphenated word)."""
    out = []
    for token in dict.fromkeys(_TOKEN.findall(query)):
        if len(token) < IDENTIFIER_CHARS:
            continue
        if not (any(c in token for c in "_.-") or _INNER_CAPITAL.search(token)):
            continue
        pieces = [p for piece in re.split(r"[_.]", token) for p in _camel(piece)]
        parts = [p for p in dict.fromkeys(pieces) if len(p) >= PART_CHARS and p != token]
        out.append((token, parts))
    return out


def _camel(piece: str) -> list[str]:
    return _CAMEL.findall(piece) if "-" not in piece else [piece]


def fragments(query: str) -> list[str]:
    """What the trigram leg looks for: CJK bigrams, then each long identifier whole and
    its parts. Empty for ordinary prose."""
    out = dict.fromkeys(cjk_bigrams(query))
    for whole, parts in _identifiers(query):
        out.update(dict.fromkeys([whole, *parts]))
    return list(out)[:MAX_FRAGMENTS]


class TrigramLeg(DatabaseLeg):
    """Substrings a word index cannot see: CJK words and parts of identifiers, through the
    trigram indexes (FTS5 ``trigram``, ``pg_trgm``). Nothing to do for other queries.

    It runs beside the others for a CJK query, and for an identifier only when the
    lexical leg came back short of candidates: with a full lexical list, its substring
    hits of the identifier's parts (mostly records the lexical leg ranked too) only
    pushed better-ranked records down (recall@10 .925 -> .919 on codemem-dev). Its hits
    the word index lacks are lexical evidence too: a CJK word or an identifier's parts is
    what the prompt says.
    """

    name = TRIGRAM
    evidence = "lexical"
    waits_to_end = True

    def runs_beside(self, query: str) -> bool:
        return has_cjk(query)

    def runs_after(self, query: str, first: list[Candidate], k: int) -> bool:
        return not has_cjk(query) and len(first) < k

    def search(self, where: SearchQuery, query: str) -> list[Candidate]:
        wanted = fragments(query)
        if not wanted:
            return []
        bigrams, idents = cjk_bigrams(query), _identifiers(query)
        try:
            records = self._storage.search_fragments(where, wanted)
        except StorageTimeoutError as exc:
            raise Unavailable(str(exc)) from exc
        return [
            Candidate(r.record_id, r.created_at.timestamp(), record=r)
            for r in records
            if _holds(r, bigrams, idents)
        ]


def _holds(record: MemoryRecord, bigrams: list[str], idents: list[tuple[str, list[str]]]) -> bool:
    """Any CJK bigram, or an identifier whole or all its parts (two or more). One part
    alone ("error" of RuntimeError) is a common word the lexical leg already ranks: such
    hits cost recall on the labelled set (tests/retrieval/test_relevance.py)."""
    text = " ".join([record.title, record.summary, *record.facts]).lower()
    if any(b.lower() in text for b in bigrams):
        return True
    return any(
        whole.lower() in text or (len(parts) > 1 and all(p.lower() in text for p in parts))
        for whole, parts in idents
    )


class VectorLeg(Leg):
    """Cosine nearest neighbours of the query's embedding in the namespace's cached
    matrix or, for a namespace too large for the cache or still loading, in the database
    (backends with a vector index). The model loads in the background: a search never
    waits for a cold model."""

    name = VECTOR
    evidence = "semantic"
    # Chosen on tests/fixtures/relevance (bench/relevance.py): see bench/results/relevance.md.
    tuned_floor = 0.3
    tuned_cap = 3

    def __init__(
        self, settings: Settings, storage: LegStorage, embedder: Embedder, epochs: Epochs
    ) -> None:
        self._settings = settings
        self._storage = storage
        self._embedder = embedder
        self._in_database = storage.vector_index
        self._epochs = epochs
        # Looked up at each call rather than bound now, so a replaced method is used.
        self._cache = VectorCache(
            lambda ns, since: storage.list_embeddings(ns, since),
            self._epoch,
            lambda ns: storage.embedded_ids(ns),
            settings.vector_cache_mb * 2**20,
            (lambda ns: storage.count_embeddings(ns)) if self._in_database else None,
        )
        self._wait = 0.0 if self._in_database else COLD_LOAD_WAIT_S
        self._warm_lock = threading.Lock()
        self._preloaded = False
        # (model, query) -> vector, oldest first
        self._recent: dict[tuple[str, str], np.ndarray] = {}
        self._recent_lock = threading.Lock()
        self.database_searches = 0
        self.other_model: str | None = None  # why the leg is left out, for ``/health``
        self._model_read = float("-inf")  # when the stored model was last read as this one

    def _epoch(self, namespace: str) -> int:
        """The namespace's epoch as the cache compares it. Without Redis the epochs are
        this process's own, and another gunicorn worker's writes show only in the
        database's change stamp, so the pair is compared."""
        epoch = self._epochs.get(namespace)
        if self._settings.redis_url:
            return epoch
        return hash((epoch, self._storage.change_stamp(namespace)))

    @classmethod
    def build(cls, parts: LegParts) -> VectorLeg:
        return cls(parts.settings, parts.storage, parts.embedder, parts.epochs)

    def search(self, where: SearchQuery, query: str) -> list[Candidate]:
        """``where.timeout_s`` bounds the database's search, not the query's embedding."""
        end = None if where.timeout_s is None else time.monotonic() + where.timeout_s
        if self._settings.embedder == "off":
            raise Unavailable("embedder off")
        state = self._embedder.state
        if state == "not_loaded":
            self._embedder.warm_in_background()
            raise Unavailable("embedder not loaded yet (warming up)")
        if state != "ready":
            raise Unavailable(f"embedder {state}")
        # One model throughout, even if the process switches models meanwhile.
        model = self._embedder.model()
        self._epochs.searched(where.namespace)
        vectors = self._cache.get_within(where.namespace, self._wait)
        if vectors is None and not self._in_database:
            held = self._cache.held(where.namespace)
            if held is None or not held.ids:
                raise Unavailable("vectors of the namespace still loading")
            # A refresh outlasting the wait (a delete, a backfill, a busy machine) leaves the
            # vectors as last read to answer: a record deleted since drops out at hydration,
            # one embedded since is missing until the refresh is in.
            self._comparable(held, where.namespace, model)
            vector = self._query_vector(query, model)
            partial = held.top(vector, where.limit, where.observation_type, where.since)
            raise Unavailable("vectors of the namespace still refreshing", partial)
        if vectors is None:
            # The statement itself finds nothing if the model changes after this check.
            self._same_model(model)
            return self._search_database(where, query, end, model)
        if not vectors.ids:
            raise NothingToSearch("no embedded records in the namespace")
        self._comparable(vectors, where.namespace, model)
        return vectors.top(
            self._query_vector(query, model), where.limit, where.observation_type, where.since
        )

    def _search_database(
        self, where: SearchQuery, query: str, end: float | None, model: Model
    ) -> list[Candidate]:
        """``end``: ``time.monotonic()`` past which the database's statement is cancelled."""
        rows = self._cache.rows(where.namespace)
        if rows is None:  # neither cached nor counted yet: the load counts it soon
            rows = self._storage.count_embeddings(where.namespace)
        if rows == 0:
            raise NothingToSearch("no embedded records in the namespace")
        vector = self._query_vector(query, model)
        self.database_searches += 1
        left = None if end is None else end - time.monotonic()
        try:
            bounded = replace(where, timeout_s=left)
            exact = rows <= EXACT_MAX_ROWS
            hits = self._storage.search_vector(bounded, vector, exact, model.identity)
        except StorageTimeoutError as exc:
            raise Unavailable(str(exc)) from exc
        return [Candidate(h.record_id, h.created_at, h.cosine) for h in hits]

    def cosines(self, namespace: str, query: str, record_ids: list[str]) -> dict[str, float]:
        """The query's cosine with each of ``record_ids`` that has a vector here (the
        relevance gate's evidence for hits this leg did not rank); after ``search``."""
        model = self._embedder.model()
        vectors = self._cache.get_within(namespace, 0.0)
        if vectors is None and not self._in_database:
            vectors = self._cache.held(namespace)  # refreshing: as ``search`` answered
        if vectors is None and self._in_database:
            vector = self._query_vector(query, model)
            return self._storage.vector_cosines(namespace, vector, record_ids, model.identity)
        if vectors is None or not vectors.ids or vectors.model not in (None, model.identity):
            return {}
        return vectors.cosines(self._query_vector(query, model), record_ids)

    def _comparable(self, vectors: VectorSet, namespace: str, model: Model) -> None:
        """The cached vectors compare with this process's query vectors: they are of its
        model, or were read before any was recorded and the stored one is its own. A
        cache of the model before a swap still compares with a process of that model (it
        is only stale), so a set of this process's model reads the stored one only every
        ``MODEL_CHECK_S``."""
        fresh = time.monotonic() - self._model_read < MODEL_CHECK_S
        if vectors.model == model.identity and fresh:
            self.other_model = None
            return
        self._same_model(model)  # raises if another's
        if vectors.model not in (None, model.identity):  # the stored model is this one
            self._epochs.bump({namespace})  # the next search reads them again
            raise Unavailable("vectors of the namespace reloading after a model change")

    def _same_model(self, model: Model) -> None:
        """Returns if the vectors searched are of ``model``, which a database from before
        models were recorded takes as theirs; else the leg is left out (a query vector of
        one model says nothing of another's vectors) and the process switches to the
        stored model in the background, if it finds its file (``Embedder.stored_other``)."""
        read_at = time.monotonic()
        stored = self._embedder.stored_other(self._storage, model)
        if stored is None:
            self.other_model = None
            self._model_read = read_at
            return
        reason = (
            f"the stored vectors are of model {stored.model}, the loaded one is {model.identity} "
            "(embedder.switch says whether the stored one is loading, or why it cannot)"
        )
        if self.other_model != reason:
            log.warning("vector leg left out: %s", reason)
        self.other_model = reason
        raise Unavailable(reason)

    def _query_vector(self, query: str, model: Model) -> np.ndarray:
        # The gate asks again for the query ``search`` just embedded: reuse that vector.
        key = (model.identity, query)
        with self._recent_lock:
            hit = self._recent.get(key)
        if hit is None:
            hit = np.asarray(model.embed_query(query), dtype=np.float32)
            with self._recent_lock:
                self._recent[key] = hit
                while len(self._recent) > RECENT_QUERIES:
                    self._recent.pop(next(iter(self._recent)))
        return hit

    def prepare(self, namespace: str) -> None:
        """A session is starting: have the model and the namespace's vectors loaded (in
        the background) by the time its first prompt searches."""
        if self._settings.embedder == "off":
            return
        if self._embedder.state == "not_loaded":
            self._embedder.warm_in_background()
        self._cache.warm(namespace)

    def warm_up(self) -> None:
        """A server starting: load the model and (once per process) the vectors of the
        namespaces searched lately, in the background. Only a server's warm-up preloads:
        a one-shot process (the CLI) would load vectors it never searches."""
        if self._settings.embedder == "off":
            return
        with self._warm_lock:
            preload, self._preloaded = not self._preloaded, True
        if preload:
            recent = self._epochs.recently_searched(PRELOAD_WITHIN_S, MAX_ENTRIES)
            self._cache.preload(recent)
        self._embedder.warm_in_background()

    def cache_stats(self) -> dict[str, int]:
        return {**self._cache.stats(), "database_searches": self.database_searches}

    def metrics(self) -> dict[str, Any]:
        if self.other_model is not None:
            return {"vector_cache": self.cache_stats(), "vector_leg_off": self.other_model}
        return {"vector_cache": self.cache_stats()}

    def prometheus_lines(self) -> list[str]:
        cache = self.cache_stats()
        return [
            "# HELP wakemark_vector_cache_bytes Bytes held by the in-process vector matrices.",
            "# TYPE wakemark_vector_cache_bytes gauge",
            f"wakemark_vector_cache_bytes {cache['bytes']}",
            "# HELP wakemark_vector_cache_rows Embedded records held in the vector cache.",
            "# TYPE wakemark_vector_cache_rows gauge",
            f"wakemark_vector_cache_rows {cache['rows']}",
            "# HELP wakemark_vector_cache_budget_bytes The vector cache's byte budget.",
            "# TYPE wakemark_vector_cache_budget_bytes gauge",
            f"wakemark_vector_cache_budget_bytes {cache['budget_bytes']}",
            "# HELP wakemark_vector_cache_evictions_total Namespaces evicted to fit the budget.",
            "# TYPE wakemark_vector_cache_evictions_total counter",
            f"wakemark_vector_cache_evictions_total {cache['evictions']}",
            "# HELP wakemark_vector_database_searches_total Vector searches run in the"
            " database (namespace too large for the cache, or loading).",
            "# TYPE wakemark_vector_database_searches_total counter",
            f"wakemark_vector_database_searches_total {cache['database_searches']}",
        ]

    def after_fork(self) -> None:
        # The parent's loading threads do not exist here, and its locks may be held.
        self._cache = self._cache.fresh()
        self._warm_lock = threading.Lock()
        self._preloaded = False
        self._recent_lock = threading.Lock()


class TopicLeg(Leg):
    """A second semantic search for the query's topic alone: its words without the names
    and function words (``query.topic_text``), for a query that names someone. A question
    about a person is embedded as much for the name as for what it asks: its nearest
    records are then the short turns that name or address that person, not the ones
    that answer it ("What movies did Paola watch?" against "Paola: I loved The
    Protector"). The lexical leg still holds the name. Not one of ``LEGS``: the
    retriever builds it over its semantic leg when ``topic_query`` is on, and its hits
    count as that leg's (``fusion.FusionParams.labels``)."""

    name = TOPIC

    def __init__(self, semantic: Leg) -> None:
        self._semantic = semantic

    def runs_beside(self, query: str) -> bool:
        return bool(topic_text(query, gate.STOPWORDS))

    def search(self, where: SearchQuery, query: str) -> list[Candidate]:
        return self._semantic.search(where, topic_text(query, gate.STOPWORDS))


# The legs of every search, in order: the first answers or the search fails.
LEGS: Registry[type[Leg]] = Registry(
    "retrieval leg",
    {
        LEXICAL: "wakemark.shared.retrieval.legs:LexicalLeg",
        VECTOR: "wakemark.shared.retrieval.legs:VectorLeg",
        TRIGRAM: "wakemark.shared.retrieval.legs:TrigramLeg",
    },
)

"""The relevance gate: how likely each search hit is to matter to the query, from evidence
that means the same for every query, and which hits (0 to 5) a prompt gets.

Evidence per hit (``Evidence``):
- ``coverage``: the share of the query's content terms the record contains, each term
  weighted by how rare it is among the query's own candidates (a term every candidate
  has says little). A record that holds all the query's distinctive words scores 1,
  however long or short the query: unlike a raw BM25 score, comparable across queries.
- ``cosine`` and ``lift``: the embedding similarity, and how far it stands above the
  query's ``BASELINE_RANK``-th nearest record (a query that is near everything is near
  nothing in particular).
- ``both``: the lexical and the vector leg both returned it; ``top``: it is the first of
  both legs at once.

A logistic model turns these into ``relevance`` (0-1); ``bench/fit_gate.py`` fits its
coefficients on labelled data and prints the constants below. Without the vector leg
(embedder off, failed or still loading) a second model fitted on lexical evidence alone
is used, and the decision says so. Recency never enters: it only orders equal hits.

Whether a prompt gets anything is a decision of its own (``prompt_relevance``), over all
its candidates at once: ``expected``, the log of the relevant records the candidates are
expected to hold (the sum of their relevance: a project that has worked on the topic has
several near hits, a question from elsewhere at best one lookalike); ``top_cosine``, the
best cosine among them; ``top_coverage``, the best share of the query's distinctive terms
one of them holds; and ``query_terms``, the log of the query's content terms (a long
query spreads the same evidence thinner). A prompt that passes gets its hits above a low
per-record floor; one that does not, nothing.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache

from wakemark.shared.models import MemoryRecord
from wakemark.shared.retrieval.query import CJK_RUN, cjk_bigrams, has_cjk

BASELINE_RANK = 10  # the vector candidate whose cosine is the query's "background"
POOL = 20  # the lexical candidates a term's rarity is counted among
STEM_CHARS = 6  # terms compare on their first six characters: deprecate ~ deprecation
_SUFFIXES = ("ing", "ed", "es", "s")  # dropped first: failing ~ failed ~ fails

# Function words: never evidence of a topic. Everything else is weighted by rarity.
STOPWORDS = frozenset(
    """
    a about above after again all also am an and any are as at be been before being
    below between both but by can could did do does doing down during each few for
    from further had has have having he her here hers him his how if in instead into
    is it its itself just me more most my new no nor not now of off on once only or
    other our out over own same she should so some such than that the their them
    then there these they this those through to too under until up use used using
    very was we were what when where which while who whom why will with would you
    your
    """.split()  # noqa: SIM905
)
_WORD = re.compile(r"[^\W_]+")
# A code identifier: snake_case, dotted.name or camelCase. One the record shares with the
# query is near proof of topic.
IDENTIFIER = re.compile(r"\b[A-Za-z]\w*(?:(?:_|\.)\w+|[a-z][A-Z]\w*)\b")

# --- fitted by bench/fit_gate.py (see bench/results/fit_gate.md); do not edit by hand ---
FEATURES = (
    "coverage", "title_coverage", "identifier", "cosine", "lift", "both", "top",
    "lexical_rr", "vector_rr",
)  # fmt: skip
HYBRID_COEF = (1.2192, 3.0731, 0.5708, 3.4296, 1.0688, 1.4036, 0.0081, 2.0708, 1.3397)
HYBRID_INTERCEPT = -9.1204
LEXICAL_FEATURES = ("coverage", "title_coverage", "identifier", "top", "lexical_rr")
LEXICAL_COEF = (2.5131, 4.7013, 1.2908, -0.2981, 2.9924)
LEXICAL_INTERCEPT = -6.8987
PROMPT_FEATURES = ("expected", "top_cosine", "top_coverage", "query_terms")
PROMPT_COEF = (1.7307, 4.1905, 4.844, 2.0543)
PROMPT_INTERCEPT = -5.6627
LEXICAL_PROMPT_FEATURES = ("expected", "top_coverage", "query_terms")
LEXICAL_PROMPT_COEF = (1.8597, 6.635, 2.5108)
LEXICAL_PROMPT_INTERCEPT = -6.1633
# --- end of fitted constants ----------------------------------------------------------------


@dataclass(frozen=True)
class Evidence:
    coverage: float  # 0-1: the query's rarity-weighted terms the record holds
    title_coverage: float  # 0-1: the record title's terms the query holds
    identifier: bool  # shares a code identifier with the query
    cosine: float | None  # None: no vector evidence for this search
    lift: float | None
    both: bool
    top: bool
    lexical_rank: int | None = None
    vector_rank: int | None = None
    query_terms: int = 0  # the query's content terms (the same for all its hits)

    def to_json(self) -> dict[str, float | bool | None]:
        return {
            "coverage": round(self.coverage, 4),
            "title_coverage": round(self.title_coverage, 4),
            "identifier": self.identifier,
            "cosine": None if self.cosine is None else round(self.cosine, 4),
            "lift": None if self.lift is None else round(self.lift, 4),
            "both": self.both,
            "top": self.top,
            "lexical_rank": self.lexical_rank,
            "vector_rank": self.vector_rank,
            "query_terms": self.query_terms,
        }


def terms(text: str) -> list[str]:
    """Content terms, crudely stemmed (a suffix off, then truncated), deduplicated in order;
    a run of CJK characters (no spaces between its words) as its two-character pieces."""
    seen: dict[str, None] = {}
    text = text.lower()
    cjk = has_cjk(text)
    # A word seen again gives the stems it gave the first time: each is looked at once.
    for word in dict.fromkeys(_WORD.findall(text)):
        pieces = [word]
        if cjk and has_cjk(word):
            pieces = [p for p in CJK_RUN.split(word) if p] + cjk_bigrams(word)
        for piece in pieces:
            if len(piece) > 1 and piece not in STOPWORDS:
                seen.setdefault(_stem(piece), None)
    return list(seen)


@lru_cache(maxsize=65536)
def _stem(word: str) -> str:
    for suffix in _SUFFIXES:
        if len(word) > len(suffix) + 2 and word.endswith(suffix):
            word = word[: -len(suffix)]
            break
    return word[:STEM_CHARS]


def record_text(record: MemoryRecord) -> str:
    return " ".join(
        [record.title, record.summary, *record.facts, *record.concepts, *record.files_touched]
    )


def record_terms(record: MemoryRecord) -> frozenset[str]:
    return _text_terms(record_text(record))


@lru_cache(maxsize=8192)
def _text_terms(text: str) -> frozenset[str]:
    # Records never change their text, and the same ones come back query after query.
    return frozenset(terms(text))


def gather(
    query: str,
    records: Sequence[MemoryRecord],
    pool: Sequence[MemoryRecord],
    lexical_ranks: Mapping[str, int],
    vector_ranks: Mapping[str, int],
    cosines: Mapping[str, float] | None,
    baseline: float | None,
) -> list[Evidence]:
    """Evidence for each of ``records`` (the hits). ``pool``: the first ``POOL`` lexical
    candidates, among which rarity is counted. ``cosines`` is None when the vector leg did
    not run; ``baseline`` is the cosine of its ``BASELINE_RANK``-th candidate (or its last).
    """
    query_terms = terms(query)
    query_set = set(query_terms)
    idents = {m.lower() for m in IDENTIFIER.findall(query)}
    bags = [record_terms(r) for r in records]
    pool_bags = [record_terms(r) for r in pool[:POOL]]
    # Rarity among the candidates, counted against a full pool whatever its size (a term
    # in the only candidate of a short list is rare, not common): in none of them a term
    # weighs ~3.8, in all of them ~0.1 (the floor keeps a query of only common terms
    # from weighing nothing).
    weights = {
        t: math.log((POOL + 1) / (sum(t in bag for bag in pool_bags) + 0.5)) + 0.1
        for t in query_terms
    }
    total = sum(weights.values())
    out = []
    for record, bag in zip(records, bags, strict=True):
        rid = record.record_id
        covered = sum(w for t, w in weights.items() if t in bag)
        cosine = None if cosines is None else cosines.get(rid, baseline or 0.0)
        lift = None if cosine is None or baseline is None else cosine - baseline
        both = rid in lexical_ranks and rid in vector_ranks
        top = lexical_ranks.get(rid) == 0 and (cosines is None or vector_ranks.get(rid) == 0)
        title = terms(record.title)
        title_cov = sum(t in query_set for t in title) / len(title) if title else 0.0
        text = record_text(record).lower()
        identifier = any(i in text for i in idents)
        out.append(
            Evidence(
                covered / total if total else 0.0, title_cov, identifier, cosine, lift, both,
                top, lexical_ranks.get(rid), vector_ranks.get(rid), len(query_terms),
            )
        )  # fmt: skip
    return out


def feature_vector(evidence: Evidence, lexical_only: bool) -> list[float]:
    values = {
        "coverage": evidence.coverage,
        "title_coverage": evidence.title_coverage,
        "identifier": float(evidence.identifier),
        "lexical_rr": 0.0 if evidence.lexical_rank is None else 1.0 / (1 + evidence.lexical_rank),
        "vector_rr": 0.0 if evidence.vector_rank is None else 1.0 / (1 + evidence.vector_rank),
        "cosine": evidence.cosine or 0.0,
        "lift": evidence.lift or 0.0,
        "both": float(evidence.both),
        "top": float(evidence.top),
    }
    names = LEXICAL_FEATURES if lexical_only else FEATURES
    return [values[name] for name in names]


def relevance(evidence: Evidence) -> float:
    """The fitted probability that a hit with this evidence is relevant to its query."""
    lexical_only = evidence.cosine is None
    coef, intercept = (
        (LEXICAL_COEF, LEXICAL_INTERCEPT) if lexical_only else (HYBRID_COEF, HYBRID_INTERCEPT)
    )
    return _logistic(coef, intercept, feature_vector(evidence, lexical_only))


EXPECTED_FLOOR = 0.01  # keeps the log finite for a prompt without candidates


def prompt_vector(
    relevances: Sequence[float], evidence: Sequence[Evidence | None], lexical_only: bool
) -> list[float]:
    """The prompt's features (``PROMPT_FEATURES``) from its candidates' relevance and
    evidence."""
    known = [e for e in evidence if e is not None]
    values = {
        "expected": math.log(sum(relevances) + EXPECTED_FLOOR),
        "top_cosine": max((e.cosine for e in known if e.cosine is not None), default=0.0),
        "top_coverage": max((e.coverage for e in known), default=0.0),
        "query_terms": math.log1p(max((e.query_terms for e in known), default=0)),
    }
    names = LEXICAL_PROMPT_FEATURES if lexical_only else PROMPT_FEATURES
    return [values[name] for name in names]


def prompt_relevance(
    relevances: Sequence[float], evidence: Sequence[Evidence | None], lexical_only: bool
) -> float:
    """The fitted probability that the prompt's project holds something relevant to it."""
    coef, intercept = (
        (LEXICAL_PROMPT_COEF, LEXICAL_PROMPT_INTERCEPT)
        if lexical_only
        else (PROMPT_COEF, PROMPT_INTERCEPT)
    )
    return _logistic(coef, intercept, prompt_vector(relevances, evidence, lexical_only))


def _logistic(coef: Sequence[float], intercept: float, values: Sequence[float]) -> float:
    z = intercept + sum(c * x for c, x in zip(coef, values, strict=True))
    return 1.0 / (1.0 + math.exp(-max(-30.0, min(30.0, z))))

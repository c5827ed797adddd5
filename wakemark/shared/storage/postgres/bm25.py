"""The order of Postgres' full-text matches: BM25, as SQLite's FTS5 ranks them.

``ts_rank`` weighs every query term alike, so a record holding two common words of the
query outranks one holding its rarest word; FTS5's ``bm25()`` weighs each term by its
rarity. The relevance gate reads the lexical rank as evidence, fitted on FTS5's order, so
the candidates ``ts_rank`` picks are put in BM25 order here: each term weighed by its
inverse document frequency (``lexeme_df``), its occurrences counted with the column
weights of SQLite's index (title 4, summary 2, facts 1), the length (distinct words)
normalised against the candidates' mean. Words compare on their first ``STEM_CHARS``
characters, a crude stand-in for the index's stemmer (deprecated ~ deprecation).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping, Sequence
from functools import lru_cache

from wakemark.shared.models import MemoryRecord
from wakemark.shared.storage.lexical import tokenize

K1 = 1.2
B = 0.75
FIELD_WEIGHTS = (4.0, 2.0, 1.0)  # title, summary, facts: bm25(memory_fts, 4.0, 2.0, 1.0)
STEM_CHARS = 6


@lru_cache(maxsize=16384)
def _profile(title: str, summary: str, facts: tuple[str, ...]) -> tuple[list[Counter[str]], int]:
    """Each column's words by stem, and the record's length in distinct words. Records never
    change their text, and the same ones come back query after query; callers only read
    them."""
    words = [tokenize(text) for text in (title, summary, " ".join(facts))]
    stems = [Counter(w[:STEM_CHARS] for w in column) for column in words]
    return stems, len(set().union(*words))


def order(
    records: Sequence[MemoryRecord], terms: Sequence[str], doc_freq: Mapping[str, int], total: int
) -> list[MemoryRecord]:
    """``records`` best BM25 first (ties keep their order); ``doc_freq`` and ``total`` are
    the index's document frequency of each of ``terms`` and its document count."""
    profiles = [_profile(r.title, r.summary, tuple(r.facts)) for r in records]
    mean = max(1.0, sum(n for _, n in profiles) / len(profiles)) if profiles else 1.0
    idf = {}
    for term in terms:
        df = min(max(doc_freq.get(term, 0), 0), total)
        idf[term[:STEM_CHARS]] = math.log(1 + (total - df + 0.5) / (df + 0.5))

    def score(i: int) -> float:
        columns, length = profiles[i]
        tf: dict[str, float] = {}
        for weight, column in zip(FIELD_WEIGHTS, columns, strict=True):
            # In query order, not a set's: a set's order follows the per-process string
            # hash, so the float sum, and the order of near-ties, changed between processes.
            for stem in idf:
                if stem in column:
                    tf[stem] = tf.get(stem, 0.0) + weight * column[stem]
        norm = K1 * (1 - B + B * length / mean)
        return sum(idf[stem] * f * (K1 + 1) / (f + norm) for stem, f in tf.items())

    ranked = sorted(range(len(records)), key=lambda i: (-score(i), i))
    return [records[i] for i in ranked]

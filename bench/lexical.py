"""Where the SQLite lexical leg's time goes at 50k records, and what an inverted index held
in the process would cost instead (issue 27, item 2).

Records and queries are ``bench/search.py``'s (one namespace, no vectors). Each query runs
every variant below in turn, rotating the order, so all of them see the same machine load:

- ``leg``: ``search_lexical`` as the retriever calls it (term stats, MATCH, bm25, records).
- ``bm25_fixed``: the leg's MATCH with bm25() asked for the newest match only: what bm25
  costs per statement before it scores a row (it counts every document holding each
  query phrase, in the whole index).
- ``walk``: the newest ``WINDOW`` matches' rowids, no bm25: the walk alone.
- ``one_walk``: bm25 over the newest ``WINDOW`` matches in that one walk (instead of a
  walk to find the window's start, then a second, scored one).
- ``in_memory``: BM25 with FTS5's formula and column weights over postings held in numpy
  arrays (read once from FTS5's own index, so the tokens and stems are the index's), the
  whole namespace scored, no window. Its build time and bytes are reported; ``agree@10``
  is its top 10 against FTS5 bm25 ranking the whole namespace, for queries of single-stem
  tokens (an identifier's phrase is approximated here by all its parts).
- ``tantivy``: the same terms, each a phrase in every field (boosts 4/2/1), in a tantivy
  index held in RAM (its ``en_stem`` tokenizer), built from the records' text; only when
  the ``tantivy`` package is importable (it is no dependency of wakemark).

Run: ``python -m bench lexical``; ``WAKEMARK_BENCH_LEXICAL_RECORDS`` sets the size and
``WAKEMARK_BENCH_LEXICAL_HOME`` keeps the built database there for the next run.
"""

from __future__ import annotations

import math
import os
import random
import sqlite3
import tempfile
import time
from collections.abc import Callable
from contextlib import nullcontext
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

from bench.search import BATCH, NS, _queries, _record, _stats
from wakemark.shared.config import Settings, prepare_home
from wakemark.shared.retrieval.lexical import search_lexical, select_terms
from wakemark.shared.runtime import Runtime
from wakemark.shared.storage import lexical, migrate
from wakemark.shared.storage.sqlite import fts

RECORDS = int(os.environ.get("WAKEMARK_BENCH_LEXICAL_RECORDS", "50000"))
QUERIES = 200
K = 40  # what bench/search.py's lexical stage asks for
WINDOW = fts.WINDOW
K1, B = 1.2, 0.75  # FTS5's bm25 constants
BM25 = "bm25(memory_fts, 4.0, 2.0, 1.0, 0.0)"
FIXED = f"SELECT rowid, {BM25} FROM memory_fts WHERE memory_fts MATCH ? ORDER BY rowid DESC LIMIT 1"
WALK = "SELECT rowid FROM memory_fts WHERE memory_fts MATCH ? ORDER BY rowid DESC LIMIT ?"
ONE_WALK = (
    f"SELECT rowid, {BM25} FROM memory_fts WHERE memory_fts MATCH ? ORDER BY rowid DESC LIMIT ?"
)
WHOLE = (
    f"SELECT rowid FROM memory_fts WHERE memory_fts MATCH ? ORDER BY {BM25}, rowid DESC LIMIT 10"
)
INSTANCES = (
    "CREATE VIRTUAL TABLE IF NOT EXISTS temp.bench_instances"
    " USING fts5vocab(main, memory_fts, instance)"
)
POSTINGS = """
SELECT term, doc, sum(CASE col WHEN 'title' THEN 4.0 WHEN 'summary' THEN 2.0
                               WHEN 'facts_text' THEN 1.0 ELSE 0.0 END)
  FROM temp.bench_instances GROUP BY term, doc
"""
FIELDS = {"title": 4.0, "summary": 2.0, "facts": 1.0}
TEXTS = "SELECT id, title, summary, coalesce(facts_text, '') FROM memory_records"
LENGTHS = "SELECT doc, count(*) FROM temp.bench_instances GROUP BY doc ORDER BY doc"


class MemoryIndex:
    """The namespace's postings as numpy arrays: per stem, the documents holding it and
    its weighted frequency in each; per document, its length in tokens."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        conn.execute(INSTANCES)
        lengths = conn.execute(LENGTHS).fetchall()
        self.rowids = np.array([r[0] for r in lengths], dtype=np.int64)
        length = np.array([r[1] for r in lengths], dtype=np.float32)
        self.norm = K1 * (1 - B + B * length / float(length.mean()))
        grouped: dict[str, tuple[list[int], list[float]]] = {}
        for term, doc, tf in conn.execute(POSTINGS):
            rowids, tfs = grouped.setdefault(term, ([], []))
            rowids.append(doc)
            tfs.append(tf)
        self.postings: dict[str, tuple[np.ndarray, np.ndarray]] = {}
        for term, (d, f) in grouped.items():
            at = np.searchsorted(self.rowids, np.array(d)).astype(np.int32)
            self.postings[term] = (at, np.array(f, np.float32))
        # A one-stem term's part of the score but for its IDF, computed once per posting.
        self.parts = {t: f * (K1 + 1) / (f + self.norm[d]) for t, (d, f) in self.postings.items()}

    @property
    def nbytes(self) -> int:
        arrays = sum(d.nbytes + f.nbytes for d, f in self.postings.values())
        arrays += sum(p.nbytes for p in self.parts.values())
        return arrays + self.rowids.nbytes + self.norm.nbytes

    def top(self, phrases: list[list[str]], k: int) -> list[int]:
        """Rowids of the best ``k`` by FTS5's bm25 (ties newest first); a phrase of several
        stems counts where all of them occur, with the least of their frequencies."""
        n = len(self.rowids)
        scores = np.zeros(n, dtype=np.float32)
        for stems in phrases:
            found = [self.postings.get(s) for s in stems]
            if not found or any(p is None for p in found):
                continue
            docs, tf = found[0]  # type: ignore[misc]
            part = self.parts[stems[0]]
            for other_docs, other_tf in found[1:]:  # type: ignore[misc]
                docs, mine, theirs = np.intersect1d(docs, other_docs, return_indices=True)
                tf = np.minimum(tf[mine], other_tf[theirs])
                part = tf * (K1 + 1) / (tf + self.norm[docs])
            idf = math.log((n - len(docs) + 0.5) / (len(docs) + 0.5))
            scores[docs] += (idf if idf > 0 else 1e-6) * part
        hit = np.flatnonzero(scores)
        if len(hit) > k:
            hit = hit[np.argpartition(-scores[hit], k - 1)[:k]]
        best = hit[np.lexsort((-hit, -scores[hit]))]
        return [int(r) for r in self.rowids[best]]


class TantivyIndex:
    """The namespace's records in a tantivy index held in RAM."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        import tantivy

        builder = tantivy.SchemaBuilder()
        for field in FIELDS:
            builder.add_text_field(field, stored=False, tokenizer_name="en_stem")
        builder.add_integer_field("rowid", stored=True, fast=True)
        self._index = tantivy.Index(builder.build())
        writer = self._index.writer(heap_size=100_000_000, num_threads=1)
        for rowid, *texts in conn.execute(TEXTS):
            writer.add_document(
                tantivy.Document(rowid=rowid, **dict(zip(FIELDS, texts, strict=True)))
            )
        writer.commit()
        self._index.reload()
        self._searcher = self._index.searcher()

    def top(self, terms: list[str], k: int) -> list[int]:
        query = self._index.parse_query(
            " OR ".join(lexical.quote_term(t) for t in terms), list(FIELDS), field_boosts=FIELDS
        )
        hits = self._searcher.search(query, k).hits
        return [int(self._searcher.doc(address)["rowid"][0]) for _, address in hits]


def _tantivy(conn: sqlite3.Connection) -> tuple[TantivyIndex | None, float]:
    try:
        began = time.perf_counter()
        return TantivyIndex(conn), time.perf_counter() - began
    except ImportError:
        return None, 0.0


def _build(home: Path) -> Settings:
    settings = Settings(home=home)
    prepare_home(settings)
    migrate(settings)
    if (home / "bench-built").exists():
        return settings
    runtime = Runtime.build(settings)
    storage = runtime.storage
    rng, base = random.Random(7), datetime(2024, 1, 1, tzinfo=UTC)
    try:
        for lo in range(0, RECORDS, BATCH):
            with storage.transaction() as tx:
                for i in range(lo, min(RECORDS, lo + BATCH)):
                    tx.put_memory_record(_record(rng, i, base))
    finally:
        runtime.close()
    (home / "bench-built").write_text(f"{RECORDS}\n")
    return settings


def _measure(settings: Settings) -> dict[str, Any]:
    runtime = Runtime.build(settings)
    storage = runtime.storage
    conn = sqlite3.connect(settings.sqlite_path)
    try:
        queries = _queries(random.Random(11))[:QUERIES]
        began = time.perf_counter()
        index = MemoryIndex(conn)
        build_s = time.perf_counter() - began
        plans = {q: _plan(storage, conn, q) for q in queries}
        tv, tv_build_s = _tantivy(conn)

        def run(sql: str, *args: Any) -> Callable[[str], Any]:
            return lambda q: conn.execute(sql, (plans[q][0], *args)).fetchall()

        variants: dict[str, Callable[[str], Any]] = {
            "leg": lambda q: search_lexical(storage, NS, q, K),
            "bm25_fixed": run(FIXED),
            "walk": run(WALK, WINDOW),
            "one_walk": lambda q: sorted(run(ONE_WALK, WINDOW)(q), key=lambda r: r[1])[:K],
            "in_memory": lambda q: index.top(plans[q][1], K),
        }
        if tv is not None:
            variants["tantivy"] = lambda q: tv.top(plans[q][2], K)
        samples: dict[str, list[float]] = {name: [] for name in variants}
        names = list(variants)
        for i, q in enumerate(queries):
            for name in names[i % len(names) :] + names[: i % len(names)]:
                t = time.perf_counter()
                variants[name](q)
                samples[name].append((time.perf_counter() - t) * 1000.0)
        single = [p for p in plans.values() if all(len(stems) == 1 for stems in p[1])]
        whole = [{r[0] for r in conn.execute(WHOLE, (p[0],))} for p in single]
        agree = [len(set(index.top(p[1], 10)) & w) / 10 for p, w in zip(single, whole, strict=True)]
        if tv is not None:
            tv_agree = [
                len(set(tv.top(p[2], 10)) & w) / 10 for p, w in zip(single, whole, strict=True)
            ]
        tantivy = (
            {"tantivy_build_s": round(tv_build_s, 1), "tantivy_agree_at_10": _mean(tv_agree)}
            if tv is not None
            else {}
        )
        return {
            **tantivy,
            "records": RECORDS,
            "queries": len(queries),
            "window": WINDOW,
            **{name: _stats(s) for name, s in samples.items()},
            "in_memory_build_s": round(build_s, 1),
            "in_memory_mb": round(index.nbytes / 2**20, 1),
            "in_memory_terms": len(index.postings),
            "agree_at_10": _mean(agree),
            "agree_queries": len(agree),
        }
    finally:
        conn.close()
        runtime.close()


def _mean(values: list[float]) -> float | None:
    return round(float(np.mean(values)), 3) if values else None


def _plan(
    storage: Any, conn: sqlite3.Connection, query: str
) -> tuple[str, list[list[str]], list[str]]:
    """The MATCH the leg runs first (its rarest terms), those terms' stems, and the terms."""
    tokens = lexical.tokenize(query)
    stats = storage.term_stats(tokens)
    terms = select_terms(tokens, lambda _: stats.doc_freq, total=stats.total)
    stems = fts._stems(conn, terms)
    return lexical.or_query(terms), [stems[t] for t in terms if t in stems], terms


def run() -> dict[str, Any]:
    keep = os.environ.get("WAKEMARK_BENCH_LEXICAL_HOME")
    load = [round(x, 2) for x in os.getloadavg()]
    with nullcontext(keep) if keep else tempfile.TemporaryDirectory() as home:
        result = _measure(_build(Path(home)))
    return {**result, "load_before": load, "load_after": [round(x, 2) for x in os.getloadavg()]}


def markdown(result: dict[str, Any]) -> str:
    rows = [
        r for r in ("leg", "bm25_fixed", "walk", "one_walk", "in_memory", "tantivy") if r in result
    ]
    lines = [
        f"# SQLite lexical leg at {result['records']} records: where the time goes",
        "",
        f"{result['queries']} queries of `bench/search.py`, every variant per query in rotating "
        f"order (same process, same load). Load average {result['load_before']} → "
        f"{result['load_after']} on 2 cores: compare the rows with each other, not with "
        "another run.",
        "",
        "| variant | p50 ms | p95 ms | mean ms |",
        "|---|---|---|---|",
    ]
    for name in rows:
        m = result[name]
        lines.append(f"| {name} | {m['p50_ms']} | {m['p95_ms']} | {m['mean_ms']} |")
    lines += [
        "",
        f"In-memory index: built in {result['in_memory_build_s']} s from FTS5's own index, "
        f"{result['in_memory_mb']} MB of arrays over {result['in_memory_terms']} stems; "
        f"top 10 agrees with FTS5 bm25 over the whole namespace at {result['agree_at_10']} "
        f"({result['agree_queries']} queries of single-stem terms).",
    ]
    if "tantivy" in result:
        lines.append(
            f"\ntantivy (RAM, `en_stem`): built in {result['tantivy_build_s']} s from the "
            f"records' text; top 10 agrees with FTS5 bm25 at {result['tantivy_agree_at_10']} "
            "on the same queries."
        )
    return "\n".join(lines) + "\n"

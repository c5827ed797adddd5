"""The labelled set in tests/fixtures/relevance and its scores: recall@5 and MRR (over the
top 10) for lexical only, vector only, plain RRF, the tuned fusion, and the shipped
configuration end to end through ``Retriever.search``. ``tests/retrieval/test_relevance.py``
holds the shipped fusion to it; ``bench/relevance.py`` reports it for both backends.
"""

from __future__ import annotations

import hashlib
import json
import time
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from ulid import ULID

from wakemark.shared.config import Settings, prepare_home
from wakemark.shared.models import MemoryRecord
from wakemark.shared.retrieval.fusion import Candidate, FusionParams, fuse, params_for
from wakemark.shared.retrieval.legs import LEGS
from wakemark.shared.retrieval.lexical import search_lexical
from wakemark.shared.retrieval.retriever import CANDIDATES, Retriever
from wakemark.shared.retrieval.vectors import VectorSet
from wakemark.shared.runtime import Runtime
from wakemark.shared.storage import migrate

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "relevance"
ACTOR = "/actor/eval/"
BASE_TIME = datetime(2024, 5, 1, 9, 0, tzinfo=UTC)
K = 5  # recall@K
DEPTH = 10  # ranks considered for MRR


@dataclass(frozen=True)
class Query:
    text: str
    namespace: str
    kind: str
    relevant: frozenset[str]  # record ids


def namespace(project: str) -> str:
    return ACTOR if project == "*" else f"{ACTOR}project/{project}/"


def record_id(key: str, created: datetime) -> str:
    entropy = hashlib.sha256(key.encode()).digest()[:10]
    ms = int(created.timestamp() * 1000).to_bytes(6, "big")
    return "mr_" + str(ULID.from_bytes(ms + entropy))


def load() -> tuple[list[MemoryRecord], list[Query]]:
    records: list[MemoryRecord] = []
    ids: dict[str, str] = {}
    lines = (FIXTURES / "records.jsonl").read_text().splitlines()
    for i, line in enumerate(lines):
        row = json.loads(line)
        created = BASE_TIME + timedelta(hours=i)
        ids[row["key"]] = record_id(row["key"], created)
        records.append(
            MemoryRecord(
                record_id=ids[row["key"]],
                namespace=namespace(row["project"]),
                title=row["title"],
                summary=row["summary"],
                facts=row["facts"],
                files_touched=row["files"],
                observation_type=row["type"],
                created_at=created,
            )
        )
    queries = []
    for line in (FIXTURES / "queries.jsonl").read_text().splitlines():
        row = json.loads(line)
        queries.append(
            Query(
                row["query"],
                namespace(row["project"]),
                row["kind"],
                frozenset(ids[k] for k in row["relevant"]),
            )
        )
    return records, queries


def populate(runtime: Runtime, records: list[MemoryRecord]) -> None:
    """Records and their real embeddings, written in one transaction."""
    vectors = runtime.embedder.embed([r.embedding_text() for r in records])
    with runtime.storage.transaction() as tx:
        for record, vector in zip(records, vectors, strict=True):
            tx.put_memory_record(record)
            tx.put_embedding(record.record_id, vector)


def score(ranking: list[str], relevant: frozenset[str]) -> tuple[float, float]:
    """(recall@K, reciprocal rank within DEPTH) of one ranked id list."""
    recall = len(relevant & set(ranking[:K])) / len(relevant)
    rr = next((1.0 / (i + 1) for i, rid in enumerate(ranking[:DEPTH]) if rid in relevant), 0.0)
    return recall, rr


def rankings(
    runtime: Runtime, queries: list[Query], variants: dict[str, FusionParams]
) -> dict[str, list[list[str]]]:
    """Per variant, the ranked ids of each query (legs computed once per query)."""
    storage, embedder = runtime.storage, runtime.embedder
    depth = DEPTH * CANDIDATES
    sets = {
        ns: VectorSet.build(storage.list_embeddings(ns)) for ns in {q.namespace for q in queries}
    }
    out: dict[str, list[list[str]]] = {"lexical": [], "vector": [], **{v: [] for v in variants}}
    for q in queries:
        lexical = search_lexical(storage, q.namespace, q.text, depth)
        vector = sets[q.namespace].top(embedder.embed_query(q.text), depth)
        lex = [Candidate(h.record.record_id, h.record.created_at.timestamp()) for h in lexical]
        out["lexical"].append([c.record_id for c in lex][:DEPTH])
        out["vector"].append([c.record_id for c in vector][:DEPTH])
        for name, params in variants.items():
            ranked = {"fts": lex, "semantic": vector}
            out[name].append([f.record_id for f in fuse(ranked, DEPTH, params)])
    return out


def summarize(queries: list[Query], ranked: list[list[str]]) -> dict[str, Any]:
    per_kind: dict[str, list[tuple[float, float]]] = {}
    scores = [score(r, q.relevant) for q, r in zip(queries, ranked, strict=True)]
    for q, s in zip(queries, scores, strict=True):
        per_kind.setdefault(q.kind, []).append(s)

    def agg(items: list[tuple[float, float]]) -> dict[str, float]:
        n = len(items) or 1
        return {
            f"recall@{K}": round(sum(r for r, _ in items) / n, 4),
            "mrr": round(sum(m for _, m in items) / n, 4),
        }

    return {**agg(scores), "by_kind": {k: agg(v) for k, v in sorted(per_kind.items())}}


def warm(retriever: Retriever, namespace: str, embedder_on: bool) -> None:
    """Until the namespace's vectors answer from the process's cache: a score must not see
    cold searches, nor (Postgres) searches pgvector answers while the cache loads, which
    rank a little differently. A namespace the cache leaves to the database ends it too."""
    deadline = time.monotonic() + 120
    while embedder_on and time.monotonic() < deadline:
        before = retriever.metrics()["vector_cache"]
        if not retriever.search(namespace, "warm up the vector cache", 1).degraded:
            after = retriever.metrics()["vector_cache"]
            if after["database_searches"] == before["database_searches"] or after["in_database"]:
                return
        time.sleep(0.5)


def evaluate(runtime: Runtime, queries: list[Query]) -> dict[str, Any]:
    variants = {
        "rrf": params_for("plain", LEGS.values()),
        "tuned": params_for("tuned", LEGS.values()),
    }
    ranked = rankings(runtime, queries, variants)
    retriever = runtime.retriever
    for namespace in {q.namespace for q in queries}:
        warm(retriever, namespace, True)  # the vector cache loads in the background
    ranked["shipped"] = [
        [h.record.record_id for h in retriever.search(q.namespace, q.text, DEPTH).items]
        for q in queries
    ]
    return {name: summarize(queries, r) for name, r in ranked.items()}


def build_runtime(settings: Settings) -> Runtime:
    if settings.backend == "sqlite":
        prepare_home(settings)
    migrate(settings)
    runtime = Runtime.build(settings)
    runtime.embedder.warm()
    return runtime

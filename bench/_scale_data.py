"""The million-record database of ``bench scale``: built once, resumable, outside the repo.

1,000,000 records over 200 namespaces (one of 200,000; the other 800,000 spread from a
few hundred to ~20k per namespace). Vectors are synthetic but structured: per namespace a
set of Gaussian clusters in a 16-d latent space, projected to 384-d by one fixed random
matrix, plus isotropic noise, then normalised, so neighbourhoods exist as they do among
real embeddings. Rows go in by binary COPY with the row triggers off (as a superuser),
and what the triggers keep (memory_fts, lexeme_df, fts_doc_count) is then derived in
bulk; the indexes are dropped first and built last, as a restore would. Each step
commits with a marker in ``bench_scale_state``, so an interrupted build resumes there.
"""

from __future__ import annotations

import json
import random
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np
import psycopg
from pgvector import Vector
from pgvector.psycopg import register_vector

from wakemark.shared.config import Settings
from wakemark.shared.models import EMBEDDING_DIM, OBSERVATION_TYPES
from wakemark.shared.storage import migrate

LATENT = 16
TOTAL = 1_000_000
BIG = 200_000
NAMESPACES = 200
NOISE = 1.0  # per-dimension noise std; the projected latent has ~5x its variance
SEED = 20261201
BIG_NS = "/actor/team0/project/big/"
T_END = datetime(2026, 11, 30, tzinfo=UTC)
SPAN = timedelta(days=365)
# A generous build budget for this bench session only, never the server's settings.
BUILD_SETTINGS = {"maintenance_work_mem": "3GB", "max_parallel_maintenance_workers": "1"}
COLUMNS = (
    "record_id, namespace, title, summary, facts, concepts, files_touched, observation_type,"
    " source_event_ids, strategy, quality, pinned, created_at, embedding, embedded_xid"
)
TYPES = ["text", "text", "text", "text", "text[]", "text[]", "text[]", "text", "text[]",
         "text", "text", "bool", "timestamptz", "vector", "int8"]  # fmt: skip
_CROCKFORD = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"
_WORD_TEXT = (
    "cache redis token login session webhook stripe parser migration index timeout retry "
    "worker celery queue consumer kafka partition offset schema validation import export "
    "config settings logging tracing metrics histogram latency budget fusion embedding "
    "vector cosine lexical sqlite postgres pgvector transaction deadlock lock pool "
    "connection socket http grpc json protobuf decimal rounding invoice refund checkout "
    "cart coupon shipping thumbnail upload nginx gunicorn docker compose image pytest "
    "fixture flaky race channel context deadline panic slice pandas dataframe merge "
    "groupby parquet arrow torch cuda gradient loss optimizer scheduler checkpoint"
)
_WORDS = _WORD_TEXT.split()
IDENTIFIERS = [f"{a}_{b}" for a in _WORDS[:40] for b in _WORDS[40:80]]
WORDS = _WORDS + IDENTIFIERS
WEIGHTS = np.array([1.0 / (r + 1) for r in range(len(WORDS))])
WEIGHTS /= WEIGHTS.sum()


@dataclass(frozen=True)
class Space:
    """One namespace's generator: its name, size and latent clusters."""

    index: int
    namespace: str
    size: int
    centers: np.ndarray  # (clusters, LATENT)


def projection() -> np.ndarray:
    return np.random.default_rng(SEED).standard_normal((LATENT, EMBEDDING_DIM)) / np.sqrt(
        LATENT / 5.0
    )


def spaces() -> list[Space]:
    """The 200 namespaces: the big one first, then 199 of geometric sizes summing to 800k."""
    rest = NAMESPACES - 1
    weights = np.exp(np.linspace(0.0, np.log(40.0), rest))
    sizes = np.floor(weights / weights.sum() * (TOTAL - BIG)).astype(int)
    sizes[-1] += TOTAL - BIG - int(sizes.sum())
    rng = np.random.default_rng(SEED + 1)
    out = []
    for i, size in enumerate([BIG, *sizes.tolist()]):
        ns = BIG_NS if i == 0 else f"/actor/team{i % 8}/project/p{i:03d}/"
        clusters = max(4, size // 250)
        out.append(Space(i, ns, int(size), rng.standard_normal((clusters, LATENT)) * 2.0))
    return out


def vectors(space: Space, n: int, rng: np.random.Generator, proj: np.ndarray) -> np.ndarray:
    """``n`` unit rows from the namespace's distribution (records, or queries)."""
    which = rng.integers(0, len(space.centers), n)
    latent = space.centers[which] + rng.standard_normal((n, LATENT))
    out = (latent @ proj + NOISE * rng.standard_normal((n, EMBEDDING_DIM))).astype(np.float32)
    out /= np.linalg.norm(out, axis=1, keepdims=True)
    return out


def record_id(space: int, i: int) -> str:
    """A valid, deterministic ``mr_`` + 26 Crockford characters id."""
    value, chars = (space << 32) | i, []
    for _ in range(26):
        value, r = divmod(value, 32)
        chars.append(_CROCKFORD[r])
    return "mr_" + "".join(reversed(chars))


def _rows(space: Space, proj: np.ndarray) -> Iterator[tuple[Any, ...]]:
    rng = np.random.default_rng(SEED + 100 + space.index)
    text = random.Random(SEED + space.index)
    words = rng.choice(len(WORDS), size=(space.size, 14), p=WEIGHTS)
    secs = rng.uniform(0, SPAN.total_seconds(), space.size)
    kinds = rng.integers(0, len(OBSERVATION_TYPES), space.size)
    chunk = 4096
    for lo in range(0, space.size, chunk):
        vecs = vectors(space, min(chunk, space.size - lo), rng, proj)
        for j, vec in enumerate(vecs):
            i = lo + j
            w = [WORDS[k] for k in words[i]]
            yield (
                record_id(space.index, i),
                space.namespace,
                f"{' '.join(w[:5])} in {text.choice(['api.py', 'worker.go', 'cart.ts'])}",
                " ".join(w[5:]) + ".",
                [f"{w[0]} {w[9]}"],
                [],
                [],
                OBSERVATION_TYPES[kinds[i]],
                [],
                "deterministic",
                "full",
                False,
                T_END - timedelta(seconds=float(secs[i])),
                Vector(vec),
                0,
            )


def _state(conn: psycopg.Connection) -> set[str]:
    conn.execute(
        "CREATE TABLE IF NOT EXISTS bench_scale_state (stage text PRIMARY KEY, info jsonb)"
    )
    return {r[0] for r in conn.execute("SELECT stage FROM bench_scale_state")}


def _mark(conn: psycopg.Connection, stage: str, info: Any = None) -> None:
    conn.execute("INSERT INTO bench_scale_state VALUES (%s, %s)", (stage, json.dumps(info)))


def _session(conn: psycopg.Connection) -> None:
    for name, value in BUILD_SETTINGS.items():
        conn.execute(f"SET {name} = '{value}'")


def build(admin_url: str, url: str, log: Any = print) -> dict[str, Any]:
    """Brings the database at ``url`` to the full million (``admin_url``: the same database
    as a superuser, for the trigger-free load). Returns the seconds each step took."""
    migrate(Settings(database_url=url))
    timings: dict[str, float] = {}
    proj = projection()
    with psycopg.connect(admin_url, autocommit=True) as conn:
        register_vector(conn)
        _session(conn)
        done = _state(conn)
        if "indexes_dropped" not in done:
            defs = conn.execute(
                "SELECT indexname, indexdef FROM pg_indexes WHERE schemaname = 'public'"
                " AND tablename IN ('memory_records', 'memory_fts')"
                " AND indexname NOT LIKE '%%_pkey'"
            ).fetchall()
            with conn.transaction():
                for name, _ in defs:
                    conn.execute(f'DROP INDEX "{name}"')
                _mark(conn, "indexes_dropped", dict(defs))
        for space in spaces():
            stage = f"ns:{space.index}"
            if stage in done:
                continue
            t = time.perf_counter()
            with conn.transaction():
                conn.execute("SET LOCAL session_replication_role = replica")  # no triggers
                with (
                    conn.cursor() as cur,
                    cur.copy(f"COPY memory_records ({COLUMNS}) FROM STDIN (FORMAT BINARY)") as cp,
                ):
                    cp.set_types(TYPES)
                    for row in _rows(space, proj):
                        cp.write_row(row)
                _mark(conn, stage, space.size)
            log(f"loaded {space.namespace} ({space.size} rows) in {time.perf_counter() - t:.1f}s")
        derived = {
            "memory_fts": "INSERT INTO memory_fts (record_id, namespace, created_at,"
            " observation_type, tsv) SELECT record_id, namespace, created_at, observation_type,"
            " wakemark_fts_doc(title, summary, facts) FROM memory_records",
            "lexeme_df": "INSERT INTO lexeme_df (lexeme, df) SELECT l, count(*) FROM memory_fts,"
            " unnest(tsvector_to_array(tsv)) AS l GROUP BY l",
            "fts_doc_count": "UPDATE fts_doc_count SET n = (SELECT count(*) FROM memory_records)",
        }
        for stage, statement in derived.items():
            if stage in _state(conn):
                continue
            t = time.perf_counter()
            with conn.transaction():
                conn.execute("SET LOCAL session_replication_role = replica")  # no triggers
                conn.execute(statement)
                _mark(conn, stage, round(time.perf_counter() - t, 1))
            timings[stage] = round(time.perf_counter() - t, 1)
            log(f"{stage} in {timings[stage]}s")
        saved = conn.execute(
            "SELECT info FROM bench_scale_state WHERE stage = 'indexes_dropped'"
        ).fetchone()
        # The HNSW graph last: it is the long one, and the others are then cached.
        defs = sorted(saved[0].items() if saved else [], key=lambda kv: "hnsw" in kv[1])
        for name, definition in defs:
            stage = f"index:{name}"
            if stage in _state(conn):
                continue
            t = time.perf_counter()
            conn.execute(definition)
            _mark(conn, stage, round(time.perf_counter() - t, 1))
            timings[stage] = round(time.perf_counter() - t, 1)
            log(f"{stage} in {timings[stage]}s")
        if "analyzed" not in _state(conn):
            conn.execute("VACUUM (ANALYZE) memory_records, memory_fts, lexeme_df")
            _mark(conn, "analyzed")
        steps = conn.execute(
            "SELECT stage, info FROM bench_scale_state WHERE stage NOT LIKE 'ns:%%'"
            " AND stage <> 'indexes_dropped'"
        ).fetchall()
    return {stage: info for stage, info in steps}


if __name__ == "__main__":
    import sys

    build(sys.argv[1], sys.argv[2])

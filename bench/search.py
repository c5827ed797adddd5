"""Search latency at 1k/10k/50k records in one namespace, SQLite and Postgres, plus parts.

Synthetic but realistic records (identifiers, file names, error words) with random unit
vectors, written through the storage's transaction API in batches. Each size reports the
full search (query embedding, lexical, cosine, fusion, hydration) and, measured in the
same run, the raw cost of its parts: query embed alone, lexical alone, cosine alone. The
RSS of a warm process holding the 50k namespace is measured in a subprocess.
Postgres: ``WAKEMARK_BENCH_DATABASE_URL`` (default: the test database, in a fresh schema).
Run alone: ``python -m bench.search``; ``python -m bench.search --rss DIR`` measures only
the warm RSS (SQLite, 50k records built in ``DIR`` once and kept), ``--http DIR`` only
searches of 10k records through ``wakemark serve``, timed by the client; ``--postgres
SCHEMA`` only the 50k measures on Postgres, in a schema built once and kept.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import quote

import numpy as np

from bench._stats import percentiles
from wakemark.shared.config import Settings, prepare_home
from wakemark.shared.heap import release_free_memory
from wakemark.shared.models import OBSERVATION_TYPES, Event, MemoryRecord, new_ulid
from wakemark.shared.retrieval.lexical import search_lexical
from wakemark.shared.retrieval.retriever import CANDIDATES, PROMPT_LIMIT
from wakemark.shared.retrieval.vectors import VectorCache, VectorSet
from wakemark.shared.runtime import Runtime
from wakemark.shared.storage import SearchQuery, migrate

SIZES = (1_000, 10_000, 50_000)
QUERIES = 500
STAGE_QUERIES = 200  # the trigram leg timed alone is slow on large namespaces
REFRESH_WRITES = 5  # one-record embedding writes timed at the largest size
BATCH = 1_000
NS = "/actor/bench/project/search/"
DEFAULT_PG = "postgresql://wakemark@127.0.0.1:5432/wakemark_test"
# At a query-embedding p95 of about 5 ms: scale it with that run's yardstick (issue #27).
TARGET_P95_MS = 15.0
TARGET_RSS_MB = 300.0
HTTP_RECORDS = 10_000
HTTP_QUERIES = 300
TARGET_HTTP_P95_MS = 14.0  # client-side, at the same yardstick as TARGET_P95_MS

_VOCAB_TEXT = (
    "cache redis token login session webhook stripe parser migration index timeout retry "
    "worker celery queue consumer kafka partition offset schema validation import export "
    "config settings logging tracing metrics histogram latency budget fusion embedding "
    "vector cosine lexical sqlite postgres pgvector transaction deadlock lock pool "
    "connection socket http grpc json protobuf decimal rounding invoice refund checkout "
    "cart coupon shipping thumbnail upload s3 cdn nginx gunicorn docker compose image "
    "pytest fixture hypothesis flaky race goroutine channel context deadline panic nil "
    "map slice pandas dataframe merge groupby parquet arrow torch cuda gradient loss "
    "optimizer scheduler checkpoint tokenizer onnx quantize airflow dag sensor backfill"
)
VOCAB = _VOCAB_TEXT.split()
FILES = ["api/ingest.py", "store/writer.go", "train/loop.py", "cart/pricing.py", "app.ts"]
ERRORS = ["TimeoutError", "KeyError", "IntegrityError", "panic", "ValueError", "OOMKilled"]


# Real notes mix a few common words with many rare identifiers: a Zipf-weighted vocabulary
# of the common words plus generated identifiers (snake_case names, numbered modules), so
# a query term matches a realistic share of records rather than all of them.
IDENTIFIERS = [f"{a}_{b}" for a in VOCAB[:60] for b in VOCAB[40:100]]
WORDS = VOCAB + IDENTIFIERS
WEIGHTS = [1.0 / (rank + 1) for rank in range(len(WORDS))]


def _words(rng: random.Random, k: int) -> list[str]:
    return rng.choices(WORDS, weights=WEIGHTS, k=k)


def _record(rng: random.Random, i: int, base: datetime) -> MemoryRecord:
    words = _words(rng, 12)
    return MemoryRecord(
        namespace=NS,
        title=f"{rng.choice(ERRORS)} in {rng.choice(FILES)}: {' '.join(words[:5])}",
        summary=" ".join(_words(rng, 40)) + ".",
        facts=[f"{rng.choice(FILES)}:{rng.randint(1, 900)} {' '.join(words[5:9])}"],
        files_touched=[rng.choice(FILES)],
        observation_type=rng.choice(OBSERVATION_TYPES),
        created_at=base + timedelta(seconds=i),
    )


def _fill(runtime: Runtime, start: int, stop: int, rng: random.Random) -> float:
    """Insert records ``start..stop`` with random unit vectors; returns seconds taken."""
    base = datetime(2024, 1, 1, tzinfo=UTC)
    began = time.perf_counter()
    for lo in range(start, stop, BATCH):
        records = [_record(rng, i, base) for i in range(lo, min(stop, lo + BATCH))]
        vectors = np.random.default_rng(lo).standard_normal((len(records), 384))
        vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
        with runtime.storage.transaction() as tx:
            for record, vector in zip(records, vectors.astype(np.float32), strict=True):
                tx.put_memory_record(record)
                tx.put_embedding(record.record_id, vector)
    return time.perf_counter() - began


def _queries(rng: random.Random) -> list[str]:
    out = []
    for _ in range(QUERIES):
        words = _words(rng, rng.randint(2, 6))
        if rng.random() < 0.3:
            words.append(rng.choice(FILES + ERRORS))
        out.append(" ".join(words))
    return out


def _samples(fn: Callable[[str], Any], queries: list[str]) -> list[float]:
    samples = []
    for q in queries:
        t = time.perf_counter()
        fn(q)
        samples.append((time.perf_counter() - t) * 1000.0)
    return samples


def _timed(fn: Callable[[str], Any], queries: list[str]) -> dict[str, float]:
    return _stats(_samples(fn, queries))


def _stats(samples: list[float]) -> dict[str, float]:
    return {**percentiles(samples), "mean_ms": round(float(np.mean(samples)), 2)}


def _measure(runtime: Runtime, queries: list[str]) -> dict[str, Any]:
    retriever, storage, embedder = runtime.retriever, runtime.storage, runtime.embedder
    if hasattr(storage, "memory_index"):  # SQLite: its full-text index, built or refreshed
        storage.memory_index(wait_s=600)
    vectors = VectorSet.build(storage.list_embeddings(NS))
    qvecs = {q: embedder.embed_query(q) for q in queries}
    # The first search starts loading the namespace matrix; wait until it is in.
    while retriever.search(NS, queries[0]).degraded:
        time.sleep(0.05)
    degraded = 0

    # Each query's embedding is timed right after its search, so the yardstick sees the
    # same minute as the search: timed in a phase of its own, it drifts with the box.
    searched, embedded = [], []
    for q in queries:
        t = time.perf_counter()
        degraded += retriever.search(NS, q, limit=10).degraded
        searched.append((time.perf_counter() - t) * 1000.0)
        t = time.perf_counter()
        embedder.embed_query(q)
        embedded.append((time.perf_counter() - t) * 1000.0)

    out = {
        "search": _stats(searched),
        "embed_query": _stats(embedded),
        "lexical": _timed(lambda q: search_lexical(storage, NS, q, 40), queries),
        "cosine": _timed(lambda q: vectors.top(qvecs[q], 40), queries),
        # The session-start index (GET /v1/context): pinned, then newest, within 8 KiB.
        "session_index": _timed(lambda q: retriever.session_index(NS), queries[:100]),
    }
    out["degraded"] = degraded
    # Whether the lexical leg read the full-text index held in the process: Postgres ranks
    # with its own full-text search instead, a slower leg, while the index is not kept
    # (past its size limit) or not current (a transaction open anywhere in the cluster
    # holds back the horizon its check reads).
    out["text_index_current"] = storage.memory_index() is not None
    out["stages"] = _stages(runtime, queries)
    return out


def _stages(runtime: Runtime, queries: list[str]) -> dict[str, dict[str, float]]:
    """Where a search's time goes, each part timed alone in the same run: every leg at
    the depth the retriever asks of it (the vector leg includes the query embedding), the
    relevance gate and the audit row of a prompt (``for_prompt`` of a stored prompt event
    minus the latency of its own search), the audit row's write, and the JSON of an
    answer."""
    retriever, storage = runtime.retriever, runtime.storage
    queries = queries[:STAGE_QUERIES]
    k = max(10, PROMPT_LIMIT) * CANDIDATES
    out = {
        f"leg_{leg.name}": _timed(lambda q, leg=leg: leg.search(SearchQuery(NS, k), q), queries)
        for leg in retriever.legs
    }
    session = "bench-" + uuid.uuid4().hex[:8]
    events = {q: _prompt_event(q, session) for q in queries}
    storage.put_events(list(events.values()))
    gate: list[float] = []

    def prompt(q: str) -> None:
        t = time.perf_counter()
        answer = retriever.for_prompt(NS, events[q])
        gate.append((time.perf_counter() - t) * 1000.0 - answer.latency_ms)

    out["for_prompt"] = _timed(prompt, queries)
    out["gate_and_audit"] = _stats(gate)  # for_prompt minus the latency of its search
    retriever.flush_audit()
    row = storage.list_retrievals(NS, session, 1)[0]
    out["audit_write"] = _timed(
        lambda q: storage.put_retrieval(row.model_copy(update={"retrieval_id": new_ulid()})),
        queries[:100],
    )
    results = {q: retriever.search(NS, q, limit=10).to_json() for q in queries}
    out["json"] = _timed(lambda q: json.dumps(results[q]), queries)
    return out


def _prompt_event(text: str, session: str) -> Event:
    return Event(
        event_id=new_ulid(),
        session_id=session,
        actor_id="bench",
        namespace=NS,
        kind="prompt",
        body={"type": "text", "content": text},
        valid_time=datetime.now(UTC),
        source={"surface": "bench"},
    )


def _refresh(runtime: Runtime, done: int, queries: list[str]) -> dict[str, Any]:
    """The first read after one embedding write, at the current size: the cache patched
    from what changed (incremental) vs the whole namespace loaded again (full reload),
    and the first full search after the write (which pays the incremental refresh)."""
    storage, rng, epoch = runtime.storage, random.Random(5), [0]
    cache = VectorCache(storage.list_embeddings, lambda ns: epoch[0], storage.embedded_ids, 2**31)
    cache.get(NS)
    samples: dict[str, list[float]] = {"incremental": [], "full_reload": [], "first_search": []}

    def timed(key: str, fn: Callable[[], Any]) -> None:
        t = time.perf_counter()
        fn()
        samples[key].append((time.perf_counter() - t) * 1000.0)

    def full() -> None:
        VectorSet.build(storage.list_embeddings(NS))
        release_free_memory()

    for i in range(REFRESH_WRITES):
        _fill(runtime, done + i, done + i + 1, rng)  # bumps the retriever's epoch too
        epoch[0] += 1
        timed("incremental", lambda: cache.get(NS))
        timed("full_reload", full)
        timed("first_search", lambda q=queries[i]: runtime.retriever.search(NS, q, limit=10))
    out = {f"{k}_ms": round(float(np.median(v)), 1) for k, v in samples.items()}
    out["writes"] = REFRESH_WRITES
    out["speedup"] = round(out["full_reload_ms"] / max(out["incremental_ms"], 1e-3), 1)
    return out


def _pg_schema_url(base: str, schema: str | None = None) -> tuple[str, str]:
    """A schema (a fresh one unless named) and the URL that searches it first."""
    import psycopg

    schema = schema or "bench_" + uuid.uuid4().hex[:10]
    with psycopg.connect(base, autocommit=True) as conn:
        conn.execute(f'CREATE SCHEMA IF NOT EXISTS "{schema}"')
    sep = "&" if "?" in base else "?"
    return schema, f"{base}{sep}options={quote(f'-csearch_path={schema},public')}"


def _drop_schema(base: str, schema: str) -> None:
    import psycopg

    with psycopg.connect(base, autocommit=True) as conn:
        conn.execute(f'DROP SCHEMA "{schema}" CASCADE')


def _vacuum(settings: Settings) -> None:
    """The tables as autovacuum would have left them by the time anyone searches: fresh
    planner statistics (without them Postgres estimates a handful of full-text matches and
    plans for that), and no dead tuples (the bulk load leaves one lexeme_df row version per
    record and common word; the test server runs no autovacuum)."""
    if settings.database_url:
        import psycopg

        with psycopg.connect(settings.database_url, autocommit=True) as conn:
            conn.execute("VACUUM (ANALYZE) memory_records, memory_fts, lexeme_df, fts_doc_count")


def _backend(settings: Settings, queries: list[str]) -> dict[str, Any]:
    if settings.backend == "sqlite":
        prepare_home(settings)
    migrate(settings)
    runtime = Runtime.build(settings)
    runtime.embedder.warm()
    rng = random.Random(7)
    out: dict[str, Any] = {}
    try:
        done = 0
        for size in SIZES:
            insert_s = _fill(runtime, done, size, rng)
            _vacuum(settings)
            done = size
            out[str(size)] = {"insert_s": round(insert_s, 1), **_measure(runtime, queries)}
        out["refresh_after_write"] = _refresh(runtime, done, queries)
    finally:
        runtime.close()
    return out


# A process serving the namespace as a gunicorn worker does: its hooks run (malloc
# settings, the warm-up of the model and the full-text index), the app built, then
# searches. Its RSS once warm, and its peak (VmHWM: the index build, the matrix load).
_RSS_CHILD = """
import json, sys, time
from pathlib import Path
from types import SimpleNamespace
from wakemark.services.api import create_app, gunicorn_conf
from wakemark.shared.config import Settings
args = json.loads(sys.argv[1])
settings = Settings(**{k: Path(v) if k in ("home", "model_path") else v for k, v in args.items()})
gunicorn_conf.post_fork(None, SimpleNamespace(app=None))
app = create_app(settings)
gunicorn_conf.post_worker_init(SimpleNamespace(wsgi=app))
rt = app.extensions["wakemark"]
if hasattr(rt.storage, "memory_index"):  # SQLite's full-text index, built in the background
    rt.storage.memory_index(wait_s=600)
while rt.retriever.search(sys.argv[3], "warm up").degraded:  # the matrix loads in the background
    time.sleep(0.05)
for q in json.loads(sys.argv[2]):
    rt.retriever.search(sys.argv[3], q)
status = dict(l.split(":", 1) for l in open("/proc/self/status"))
mb = {k: int(status[k].split()[0]) / 1024 for k in ("VmRSS", "VmHWM")}
print(json.dumps({"rss_mb": mb["VmRSS"], "hwm_mb": mb["VmHWM"],
                  "cache": rt.retriever.metrics()["vector_cache"]}))
"""


def _rss(settings: Settings, queries: list[str]) -> dict[str, Any]:
    """RSS of a fresh process serving the 50k-record namespace, warm."""
    args = {"home": str(settings.home), "model_path": str(settings.onnx_model_path)}
    if settings.database_url:
        args["database_url"] = settings.database_url
    proc = subprocess.run(
        [sys.executable, "-c", _RSS_CHILD, json.dumps(args), json.dumps(queries[:50]), NS],
        capture_output=True,
        text=True,
        check=True,
        cwd=Path(__file__).resolve().parents[1],
    )
    return dict(json.loads(proc.stdout.strip().splitlines()[-1]))


def rss_only(home: Path) -> dict[str, Any]:
    """``--rss DIR``: the warm RSS on SQLite alone, of the 50k namespace kept in ``DIR``
    (built there by the first run), so runs of two checkouts can alternate on one
    database."""
    settings = _built(home, SIZES[-1])
    load = [round(x, 2) for x in os.getloadavg()]
    return {"load": load, **_rss(settings, _queries(random.Random(11)))}


def postgres_only(schema: str) -> dict[str, Any]:
    """``--postgres SCHEMA``: the 50k measures on Postgres alone, in ``SCHEMA`` of the
    bench database (built there by the first run and kept), so runs of two checkouts can
    alternate on one database."""
    base = os.environ.get("WAKEMARK_BENCH_DATABASE_URL", DEFAULT_PG)
    _, url = _pg_schema_url(base, schema)
    with tempfile.TemporaryDirectory() as home:
        settings = Settings(
            home=Path(home), model_path=Settings.from_env().onnx_model_path, database_url=url
        )
        migrate(settings)
        runtime = Runtime.build(settings)
        try:
            runtime.embedder.warm()
            stored = len(runtime.storage.embedded_ids(NS))
            if stored not in (0, SIZES[-1]):
                raise SystemExit(f"schema {schema} holds {stored} records: use another one")
            if not stored:
                _fill(runtime, 0, SIZES[-1], random.Random(7))
                _vacuum(settings)
            load = [round(x, 2) for x in os.getloadavg()]
            out = _measure(runtime, _queries(random.Random(11)))
        finally:
            runtime.close()
    return {"records": SIZES[-1], "load": load, "load_after": list(os.getloadavg()), **out}


def _built(home: Path, records: int) -> Settings:
    """Settings of a SQLite home holding ``records`` records in ``NS``, built there once
    and kept (so runs of two checkouts can alternate on one database)."""
    settings = Settings(home=home, model_path=Settings.from_env().onnx_model_path)
    if not (home / "bench-built").exists():
        prepare_home(settings)
        migrate(settings)
        runtime = Runtime.build(settings)
        try:
            _fill(runtime, 0, records, random.Random(7))
        finally:
            runtime.close()
        (home / "bench-built").write_text(f"{records}\n")
    built = int((home / "bench-built").read_text())
    if built != records:
        raise SystemExit(f"{home} holds {built} records, not {records}: use another directory")
    return settings


def http_only(home: Path) -> dict[str, Any]:
    """``--http DIR``: searches of a 10k namespace (kept in ``DIR``) through ``wakemark
    serve`` as a client sees them: a new connection each, as the hook forwarder makes one
    per prompt; beside each, this process embeds the same query (the run's yardstick)."""
    from bench.ingest import Server, request

    settings = _built(home, HTTP_RECORDS)
    queries = _queries(random.Random(11))[:HTTP_QUERIES]
    yardstick = Runtime.build(settings)
    embedder = yardstick.embedder
    embedder.warm()
    load = [round(x, 2) for x in os.getloadavg()]
    server = Server(workers=1, home=home)
    try:
        headers = {"Authorization": f"Bearer {server.token}"}

        def search(q: str) -> dict[str, Any]:
            conn = server.connect()
            try:
                path = f"/v1/search?namespace={quote(NS)}&q={quote(q)}&limit=10"
                status, body = request(conn, "GET", path, None, headers)
            finally:
                conn.close()
            if status != 200:
                raise RuntimeError(f"search answered {status}: {body[:200]!r}")
            return dict(json.loads(body))

        for _ in range(600):  # the namespace's vectors load in the background
            if not search("warm up")["degraded"]:
                break
            time.sleep(0.05)
        client, server_ms, embed, degraded = [], [], [], 0
        for q in queries:
            t = time.perf_counter()
            answer = search(q)
            client.append((time.perf_counter() - t) * 1000.0)
            server_ms.append(float(answer["latency_ms"]))
            degraded += bool(answer["degraded"])
            t = time.perf_counter()
            embedder.embed_query(q)
            embed.append((time.perf_counter() - t) * 1000.0)
    finally:
        server.stop()
        yardstick.close()
    return {
        "records": HTTP_RECORDS,
        "queries": len(queries),
        "load": load,
        "load_after": [round(x, 2) for x in os.getloadavg()],
        "client": percentiles(client),
        "server": percentiles(server_ms),
        "embed_query": percentiles(embed),
        "degraded": degraded,
        "target_client_p95_ms": TARGET_HTTP_P95_MS,
    }


def run(model_path: Path | None = None, database_url: str | None = None) -> dict[str, Any]:
    model = model_path or Settings.from_env().onnx_model_path
    pg_base = database_url or os.environ.get("WAKEMARK_BENCH_DATABASE_URL", DEFAULT_PG)
    queries = _queries(random.Random(11))
    result: dict[str, Any] = {"queries": QUERIES, "sizes": list(SIZES), "backends": {}}
    with tempfile.TemporaryDirectory() as home:
        sqlite = Settings(home=Path(home), model_path=model)
        result["backends"]["sqlite"] = _backend(sqlite, queries)
        result["backends"]["sqlite"]["rss_50k"] = _rss(sqlite, queries)
    with tempfile.TemporaryDirectory() as home:
        result["http_10k"] = http_only(Path(home))
    schema, url = _pg_schema_url(pg_base)
    try:
        with tempfile.TemporaryDirectory() as home:
            pg = Settings(home=Path(home), model_path=model, database_url=url)
            result["backends"]["postgres"] = _backend(pg, queries)
            result["backends"]["postgres"]["rss_50k"] = _rss(pg, queries)
    finally:
        _drop_schema(pg_base, schema)
    result["targets"] = {"p95_ms_at_50k": TARGET_P95_MS, "rss_mb": TARGET_RSS_MB}
    return result


def markdown(result: dict[str, Any]) -> str:
    lines = [
        f"# Search latency ({result['queries']} queries per size, one namespace)",
        "",
        f"Targets: p95 <= {TARGET_P95_MS} ms at 50k; warm RSS <= {TARGET_RSS_MB} MB.",
    ]
    for backend, sizes in result["backends"].items():
        lines += [
            "",
            f"## {backend}",
            "",
            "| records | search p50 | search p95 | embed p95 | lexical p95 | cosine p95 "
            "| session index p95 |",
            "|---|---|---|---|---|---|---|",
        ]
        for size in result["sizes"]:
            m = sizes[str(size)]
            lines.append(
                f"| {size} | {m['search']['p50_ms']} | {m['search']['p95_ms']} | "
                f"{m['embed_query']['p95_ms']} | {m['lexical']['p95_ms']} | "
                f"{m['cosine']['p95_ms']} | {m['session_index']['p95_ms']} |"
            )
        largest = sizes[str(result["sizes"][-1])]
        lines += [
            "",
            f"Where the time goes at {result['sizes'][-1]} (each part timed alone, ms):",
            "",
            "| part | p50 | p95 |",
            "|---|---|---|",
        ]
        for part, m in largest["stages"].items():
            lines.append(f"| {part} | {m['p50_ms']} | {m['p95_ms']} |")
        current = largest.get("text_index_current")
        lines.append(f"\nFull-text index held in the process current after searching: {current}.")
        rss = sizes["rss_50k"]
        lines.append(
            f"\nWarm RSS of a process serving the 50k namespace: {rss['rss_mb']:.0f} MB "
            f"(peak {rss['hwm_mb']:.0f} MB)."
        )
        r = sizes["refresh_after_write"]
        lines.append(
            f"\nFirst vector read after one embedding write at {result['sizes'][-1]} "
            f"(median of {r['writes']}): incremental refresh {r['incremental_ms']} ms vs full "
            f"reload {r['full_reload_ms']} ms ({r['speedup']}x); first search after the write "
            f"{r['first_search_ms']} ms."
        )
    if "http_10k" in result:
        h = result["http_10k"]
        ratio = h["client"]["p95_ms"] / h["embed_query"]["p95_ms"]
        lines += [
            "",
            f"## Through HTTP (SQLite, {h['records']} records, `wakemark serve`)",
            "",
            f"{h['queries']} searches, a new connection each (as the hook forwarder makes); "
            f"load {h['load']} → {h['load_after']}; {h['degraded']} degraded.",
            "",
            "| timed by | p50 | p95 |",
            "|---|---|---|",
            f"| client | {h['client']['p50_ms']} | {h['client']['p95_ms']} |",
            f"| server (`latency_ms`) | {h['server']['p50_ms']} | {h['server']['p95_ms']} |",
            f"| query embedding alone | {h['embed_query']['p50_ms']} | "
            f"{h['embed_query']['p95_ms']} |",
            "",
            f"Client p95 / embedding p95: {ratio:.2f} (target {h['target_client_p95_ms']} ms "
            f"at an embedding p95 of 5 ms: {h['target_client_p95_ms'] / 5:.2f}).",
        ]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    if sys.argv[1:2] == ["--rss"] and len(sys.argv) == 3:
        print(json.dumps(rss_only(Path(sys.argv[2]))))
    elif sys.argv[1:2] == ["--http"] and len(sys.argv) == 3:
        print(json.dumps(http_only(Path(sys.argv[2]))))
    elif sys.argv[1:2] == ["--postgres"] and len(sys.argv) == 3:
        print(json.dumps(postgres_only(sys.argv[2])))
    elif len(sys.argv) == 1:
        print(markdown(run()))
    else:
        usage = "python -m bench.search [--rss DIR | --http DIR | --postgres SCHEMA]"
        sys.exit(f"usage: {usage}\n\n{__doc__}")

"""The team server under load: searches arriving at a fixed offered rate (Poisson, open
loop) at the real HTTP API on ``bench scale``'s million records, for several API worker
counts and Postgres pool sizes.

Deployment shape: ``wakemark serve`` (gunicorn, threaded workers, as docker/entrypoint.sh
runs it) on the ``wakemark_scale`` database (1M records over 200 namespaces, one of 200k;
built by ``bench/_scale_data.py`` if missing) with Redis. Each search is sent when it is
due, however slowly earlier ones are answered, and timed from then: a client never waits
for its last answer before asking again (a closed loop would slow its offered rate to what
the server serves and hide the queue). Query texts are real: the changelog entries of
codemem-dev (queries and negatives of both projects), embedded by the server's own model,
so the vectors are MiniLM's, far from the synthetic records' (the HNSW walk's worst case).
A search goes to one of ``ACTIVE`` namespaces (the big one among them), chosen uniformly.

Per configuration (API workers x pool size x vector cache MB), the server starts as after
a restart while its projects are in use: the active namespaces are noted as searched
lately (the epochs' record in Redis), so each worker preloads their vectors, as many as
its cache holds; the bench waits for the preload to end (its seconds are reported), then
warms up at the lowest rate and runs each rate of ``RATES`` for ``STEP_S`` seconds,
stopping after the first rate that misses the target.
Per step: client p50/p95/p99 (from when the search was due), the server's own p95, the
shares past the search deadline, answered without the vector leg (lexical-only) and
failed (non-200), the CPU seconds per search of the API workers and of Postgres, and what
the database was busy with (pg_stat_activity sampled). The saturation point is the
highest rate meeting the target.

Run: ``python -m bench teamload``; ``WAKEMARK_TEAMLOAD_CONFIGS=2x8,4x8`` (workers x pool)
and ``WAKEMARK_TEAMLOAD_RATES=10,20,30`` narrow a run. The machine is shared: each step
records the load average around it.
"""

from __future__ import annotations

import json
import os
import random
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import psycopg

from bench import _scale_data as data
from bench._codemem import DATASET
from bench._stats import percentiles
from bench.scale import ADMIN_URL, BUDGET_MS, URL, _Api
from wakemark.shared.cache import RedisEpochs
from wakemark.shared.config import Settings

REDIS_URL = os.environ.get("WAKEMARK_TEST_REDIS_URL", "redis://127.0.0.1:6379/8")
ACTIVE = 120  # namespaces searched
RATES = tuple(float(r) for r in os.environ.get("WAKEMARK_TEAMLOAD_RATES", "10,20,30,40").split(","))
# workers x pool size [x vector cache MB per worker; default the setting's]. 1280 MB holds
# the active namespaces' vectors (1.1 GB of float32 rows), the big one among them.
CONFIGS = tuple(
    tuple(int(n) for n in c.split("x"))
    for c in os.environ.get("WAKEMARK_TEAMLOAD_CONFIGS", "2x8x1280,4x8x1280,2x4x1280,2x8").split(
        ","
    )
)
CACHE_MB = Settings().vector_cache_mb
STEP_S = float(os.environ.get("WAKEMARK_TEAMLOAD_STEP_S", "30"))
WARM_S = 30.0
SENDERS = 96  # client threads: more than the searches in flight at any rate it can serve
TARGET = {"rate_per_s": 20.0, "p95_ms": 150.0, "past_deadline": 0.0, "lexical_only": 0.01}
SAMPLE_S = 0.1  # pg_stat_activity sampling period
PRELOAD_QUIET_S = 5.0  # no vector load seen this long: the preload is over
PRELOAD_MAX_S = 600.0


def query_texts() -> list[str]:
    """Real query text: every changelog entry of codemem-dev (queries and negatives)."""
    out = []
    for path in sorted(DATASET.glob("*/*.jsonl")):
        if path.name in ("queries.jsonl", "negatives.jsonl"):
            out += [json.loads(line)["query"] for line in path.read_text().splitlines()]
    return out


# --- what the processes and the database spend -----------------------------------------------
def _cpu_s(pids: list[int]) -> float:
    """User + system CPU seconds of ``pids`` so far (exited ones count 0)."""
    tick = os.sysconf("SC_CLK_TCK")
    total = 0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += int(fields[11]) + int(fields[12])
    return total / tick


def _backends() -> list[int]:
    with psycopg.connect(ADMIN_URL, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT pid FROM pg_stat_activity WHERE datname = current_database()"
            " AND pid <> pg_backend_pid() AND usename = 'wakemark'"
        ).fetchall()
    return [r[0] for r in rows]


def _statement_kind(query: str) -> str:
    q = query.lower()
    for marker, kind in (
        ("wakemark_trgm_text", "trigram"),
        ("ts_rank", "full-text"),
        ("plainto_tsquery", "full-text terms"),
        ("lexeme_df", "term stats"),
        ("with nearest", "vector HNSW"),
        ("with scored", "vector exact"),
        ("vector_send", "vector cache load"),
        ("pg_snapshot_xmin", "vector cache load"),
        ("embedding <=>", "vector cosines"),
        ("ilike any", "substring"),
        ("count(*)", "count"),
        ("record_id = any", "hydrate"),
        ("set_config", "set_config"),
    ):
        if marker in q:
            return kind
    return "other"


class _Sampler:
    """What the database's wakemark backends are doing, sampled every ``SAMPLE_S``: per
    statement kind and wait event, the mean number of backends busy with it."""

    def __init__(self) -> None:
        self._stop = threading.Event()
        self.counts: dict[str, int] = {}
        self.samples = 0
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        with psycopg.connect(ADMIN_URL, autocommit=True) as conn:
            while not self._stop.wait(SAMPLE_S):
                rows = conn.execute(
                    "SELECT query, coalesce(wait_event_type, 'CPU') FROM pg_stat_activity"
                    " WHERE datname = current_database() AND state = 'active'"
                    " AND pid <> pg_backend_pid() AND usename = 'wakemark'"
                ).fetchall()
                self.samples += 1
                for query, wait in rows:
                    key = f"{_statement_kind(query)} ({wait})"
                    self.counts[key] = self.counts.get(key, 0) + 1

    def stop(self) -> dict[str, float]:
        self._stop.set()
        self._thread.join()
        n = max(1, self.samples)
        busy = sorted(self.counts.items(), key=lambda kv: -kv[1])
        return {k: round(v / n, 3) for k, v in busy}


def _await_preload(api: _Api, began: float) -> float:
    """Seconds from ``began`` (``time.monotonic()`` when the server was started) until the
    workers' preloads end: for ``PRELOAD_QUIET_S``, no vector load or count statement
    running in the database and no worker's RSS growing (a load's rows are decoded after
    its statement ended). At most: one that ended before the call counts until then."""
    quiet_since, rss = time.monotonic(), 0.0
    with psycopg.connect(ADMIN_URL, autocommit=True) as conn:
        while time.monotonic() - began < PRELOAD_MAX_S:
            rows = conn.execute(
                "SELECT query FROM pg_stat_activity WHERE datname = current_database()"
                " AND state = 'active' AND usename = 'wakemark'"
            ).fetchall()
            now_rss = sum(r["rss_mb"] for r in api.rss().values())
            loading = any(_statement_kind(q) in ("vector cache load", "count") for (q,) in rows)
            if loading or now_rss > rss + 2.0:
                quiet_since, rss = time.monotonic(), now_rss
            elif time.monotonic() - quiet_since >= PRELOAD_QUIET_S:
                break
            time.sleep(SAMPLE_S * 5)
    return round(quiet_since - began, 1)


# --- the open-loop client --------------------------------------------------------------------
def _get(api: _Api, ns: str, text: str) -> tuple[int, dict[str, Any] | None]:
    query = urllib.parse.urlencode({"namespace": ns, "q": text, "limit": 10})
    req = urllib.request.Request(
        f"http://127.0.0.1:{api.port}/v1/search?{query}",
        headers={"Authorization": f"Bearer {api.token}"},
    )
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            return resp.status, dict(json.loads(resp.read()))
    except urllib.error.HTTPError as exc:
        return exc.code, None
    except OSError:
        return 0, None


def _offer(
    api: _Api, rate: float, seconds: float, namespaces: list[str], texts: list[str], seed: int
) -> list[tuple[float, int, dict[str, Any] | None]]:
    """Searches due at Poisson arrivals of ``rate`` for ``seconds``, each sent when due
    (by a free sender thread) and timed from then: (client ms, status, body)."""
    rng = random.Random(seed)
    due, at = [], rng.expovariate(rate)
    while at < seconds:
        due.append((at, rng.choice(namespaces), rng.choice(texts)))
        at += rng.expovariate(rate)
    results: list[tuple[float, int, dict[str, Any] | None]] = []
    lock = threading.Lock()

    def one(when: float, ns: str, text: str) -> None:
        status, body = _get(api, ns, text)
        with lock:
            results.append(((time.perf_counter() - when) * 1000.0, status, body))

    began = time.perf_counter()
    with ThreadPoolExecutor(max_workers=SENDERS) as pool:
        for offset, ns, text in due:
            time.sleep(max(0.0, began + offset - time.perf_counter()))
            pool.submit(one, began + offset, ns, text)
    return results


def outcome(body: dict[str, Any]) -> str:
    """``ok``; ``timed_out``: empty at the deadline; ``lexical_only``: degraded, and no hit
    came from the vector leg (alone or with another: ``hybrid``), so the vector leg did
    not answer (it always has candidates here: every namespace is embedded); ``degraded``:
    another leg missing (the trigram leg past its share of the deadline)."""
    if not body["degraded"]:
        return "ok"
    if not body["items"] and body["latency_ms"] >= 0.95 * BUDGET_MS:
        return "timed_out"
    if any(i["match_source"] in ("semantic", "hybrid") for i in body["items"]):
        return "degraded"
    return "lexical_only"


def _pcts(samples: list[float]) -> dict[str, float]:
    return percentiles(samples, (50, 95, 99), digits=1)


def _step(
    api: _Api, rate: float, namespaces: list[str], texts: list[str], seed: int
) -> dict[str, Any]:
    workers, backends = api.workers(), _backends()
    load_before = os.getloadavg()[0]
    api_cpu, db_cpu = _cpu_s(workers), _cpu_s(backends)
    sampler = _Sampler()
    began = time.perf_counter()
    results = _offer(api, rate, STEP_S, namespaces, texts, seed)
    wall = time.perf_counter() - began
    busy = sampler.stop()
    api_cpu, db_cpu = _cpu_s(workers) - api_cpu, _cpu_s(backends) - db_cpu
    n = len(results)
    bodies = [b for _, status, b in results if status == 200 and b is not None]
    outcomes = [outcome(b) for b in bodies]
    return {
        "offered_per_s": rate,
        "searches": n,
        "served_per_s": round(len(bodies) / wall, 1),
        "client": _pcts([ms for ms, _, _ in results]),
        "server_p95_ms": _pcts([b["latency_ms"] for b in bodies])["p95_ms"],
        "past_deadline": round(outcomes.count("timed_out") / max(1, n), 4),
        "lexical_only": round(outcomes.count("lexical_only") / max(1, n), 4),
        "degraded_other": round(outcomes.count("degraded") / max(1, n), 4),
        "failed": round((n - len(bodies)) / max(1, n), 4),
        "api_cpu_ms_per_search": round(api_cpu * 1000.0 / max(1, n), 1),
        "db_cpu_ms_per_search": round(db_cpu * 1000.0 / max(1, n), 1),
        "db_busy": busy,
        "load_avg": [round(load_before, 2), round(os.getloadavg()[0], 2)],
    }


def meets(step: dict[str, Any]) -> bool:
    return (
        step["client"]["p95_ms"] <= TARGET["p95_ms"]
        and step["past_deadline"] <= TARGET["past_deadline"]
        and step["lexical_only"] <= TARGET["lexical_only"]
        and step["failed"] == 0.0
    )


def _config(
    model: Path,
    workers: int,
    pool: int,
    namespaces: list[str],
    texts: list[str],
    cache_mb: int = CACHE_MB,
) -> dict[str, Any]:
    epochs = RedisEpochs(REDIS_URL)
    for ns in reversed(namespaces):  # the big one noted last: the first preloaded
        epochs.searched(ns)
    epochs.close()
    with tempfile.TemporaryDirectory() as home:
        started = time.monotonic()
        api = _Api(
            Path(home),
            model,
            workers=workers,
            redis_url=REDIS_URL,
            WAKEMARK_DB_POOL_SIZE=str(pool),
            WAKEMARK_VECTOR_CACHE_MB=str(cache_mb),
        )
        try:
            api.wait_ready(namespaces[:1])
            preload_s = _await_preload(api, started)
            _offer(api, RATES[0], WARM_S, namespaces, texts, seed=1)  # untimed
            steps = []
            for i, rate in enumerate(RATES):
                step = _step(api, rate, namespaces, texts, seed=100 + i)
                steps.append(step)
                print(
                    f"{workers}x{pool}x{cache_mb} @ {rate}/s: {json.dumps(step)}", file=sys.stderr
                )
                if not meets(step):
                    break  # past saturation: higher rates only queue longer
            passing = [s["offered_per_s"] for s in steps if meets(s)]
            return {
                "workers": workers,
                "pool_size": pool,
                "vector_cache_mb": cache_mb,
                "threads_per_worker": 4,
                "preload_s": preload_s,
                "steps": steps,
                "saturation_per_s": max(passing) if passing else None,
                "rss": api.rss(),
            }
        finally:
            api.close()


def run() -> dict[str, Any]:
    data.build(ADMIN_URL, URL, log=lambda m: print(m, file=sys.stderr))
    model = Settings.from_env().onnx_model_path
    spaces = data.spaces()
    rng = random.Random(3)
    namespaces = [data.BIG_NS, *rng.sample([s.namespace for s in spaces[1:]], ACTIVE - 1)]
    texts = query_texts()
    result: dict[str, Any] = {
        "records": data.TOTAL,
        "namespaces": data.NAMESPACES,
        "active_namespaces": ACTIVE,
        "query_texts": len(texts),
        "step_s": STEP_S,
        "budget_ms": BUDGET_MS,
        "target": TARGET,
        "configs": [],
    }
    for workers, pool, *cache_mb in CONFIGS:
        result["configs"].append(_config(model, workers, pool, namespaces, texts, *cache_mb))
    return result


def _saturation(c: dict[str, Any]) -> str:
    rate = c["saturation_per_s"]
    return (
        f"{rate:g} searches/s" if rate else f"below {c['steps'][0]['offered_per_s']:g} searches/s"
    )


def _name(c: dict[str, Any]) -> str:
    return f"{c['workers']} x {c['pool_size']} x {c.get('vector_cache_mb', CACHE_MB)}"


def markdown(result: dict[str, Any]) -> str:
    t = result["target"]
    lines = [
        "# The team server under load",
        "",
        f"{result['records']:,} records over {result['namespaces']} namespaces (one of 200k)"
        f" on Postgres; searches at a fixed offered rate (Poisson arrivals, open loop) over"
        f" {result['active_namespaces']} namespaces, {result['step_s']:.0f} s per rate,"
        f" {result['query_texts']} real query texts (codemem-dev changelog entries) embedded"
        " by the server's model; gunicorn with 4 threads per worker, on a 2-core box shared"
        " with other work (load average before/after each step in the table).",
        f"Target: {t['rate_per_s']:.0f} searches/s with client p95 <= {t['p95_ms']:.0f} ms,"
        f" {t['past_deadline']:.0%} past the {result['budget_ms']} ms deadline,"
        f" <= {t['lexical_only']:.0%} lexical-only.",
        "",
        "| workers x pool x cache MB | offered/s | served/s | p50 | p95 | p99 | server p95 |"
        " past deadline | lexical-only | other leg missing | failed | API CPU ms | DB CPU ms |"
        " load | meets |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for c in result["configs"]:
        for s in c["steps"]:
            cl = s["client"]
            lines.append(
                f"| {_name(c)} | {s['offered_per_s']:g} |"
                f" {s['served_per_s']} | {cl['p50_ms']} | {cl['p95_ms']} | {cl['p99_ms']} |"
                f" {s['server_p95_ms']} | {s['past_deadline']:.1%} | {s['lexical_only']:.1%} |"
                f" {s['degraded_other']:.1%} |"
                f" {s['failed']:.1%} | {s['api_cpu_ms_per_search']} |"
                f" {s['db_cpu_ms_per_search']} | {s['load_avg']} |"
                f" {'yes' if meets(s) else 'no'} |"
            )
    lines += ["", "Saturation point (highest offered rate meeting the target):", ""]
    for c in result["configs"]:
        rss = ", ".join(str(r["rss_mb"]) for r in c["rss"].values())
        lines.append(
            f"- {_name(c)} (workers x pool x vector cache MB):"
            f" {_saturation(c)}; preload {c.get('preload_s', '-')} s;"
            f" worker RSS after (MB): {rss}"
        )
    lines += [
        "",
        "API / DB CPU ms: CPU seconds of the gunicorn workers and of their Postgres"
        " backends over the step, per search sent. Past deadline: an empty answer at the"
        " deadline. Lexical-only: answered without the vector leg (no hit of it). Other leg"
        " missing: degraded with the vector leg's hits (the trigram leg, for an identifier"
        " query, cut at its share of the deadline).",
        "",
        "## What the database was busy with (mean busy backends, by statement and wait)",
        "",
    ]
    for c in result["configs"]:
        for s in c["steps"]:
            top = ", ".join(f"{k} {v}" for k, v in list(s["db_busy"].items())[:6])
            lines.append(f"- {_name(c)} @ {s['offered_per_s']:g}/s: {top}")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    print(markdown(run()))

"""The viewer's pages at 50k records in one project, SQLite and Postgres, server-side.

Each record comes from a turn of its own (prompt, shell command, answer) in sessions of
50 turns, one turn in ten kept nothing (a skipped turn), and every record has a vector,
so rows are as wide as in use. A page's time is the sum of the API calls it makes,
measured around the app's WSGI call (Flask test client: no network, no browser):
the feed's first page is ``/v1/memories?count=false`` + ``/v1/events``; a record page
is ``/v1/memories/<id>`` + ``/v1/memories/<id>/source``. Also reported: the projects
page (``/v1/projects`` + ``/v1/stats``: counts the triggers keep) and the feed's last
page, 50k records deep (``after=`` a keyset cursor, as the viewer's "Older" sends it).
Postgres: ``WAKEMARK_BENCH_DATABASE_URL`` (default: the test database, in a fresh
schema). Run alone: ``python -m bench viewer``.
"""

from __future__ import annotations

import os
import random
import statistics
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import quote

import numpy as np

from bench.search import DEFAULT_PG, _drop_schema, _pg_schema_url
from wakemark.services.api import create_app
from wakemark.services.api.schemas import cursor
from wakemark.services.api.security import ensure_token
from wakemark.shared.config import Settings, prepare_home
from wakemark.shared.models import Event, MemoryRecord, new_ulid
from wakemark.shared.runtime import Runtime
from wakemark.shared.storage import migrate

RECORDS = 50_000
SESSION_TURNS = 50
SKIP_EVERY = 10
SAMPLES = 200
BATCH = 500  # turns per write transaction
NS = "/actor/bench/project/viewer/"
TARGET_MS = 100.0
T0 = datetime(2025, 1, 1, tzinfo=UTC)


def _event(kind: str, body: dict[str, Any], session: str, at: datetime) -> Event:
    return Event.model_validate(
        {
            "event_id": new_ulid(),
            "session_id": session,
            "actor_id": "bench",
            "namespace": NS,
            "kind": kind,
            "body": body,
            "valid_time": at.isoformat(),
            "source": {"surface": "bench", "project_path": "/home/bench/viewer"},
        }
    )


def _turn(i: int, skipped: bool) -> list[Event]:
    session = f"s{i // SESSION_TURNS}"
    at = T0 + timedelta(minutes=i)
    prompt = _event(
        "prompt", {"type": "text", "content": f"why does job {i} time out?"}, session, at
    )
    if skipped:
        return [prompt]
    tool = {
        "tool_name": "Bash",
        "tool_input": {"command": f"pytest -q tests/test_job_{i % 97}.py"},
        "tool_response": {"stdout": "1 failed, 12 passed", "exit_code": 1},
    }
    return [
        prompt,
        _event("tool_use", {"type": "json", "data": tool}, session, at + timedelta(seconds=5)),
        _event("session_summary", {"type": "text", "content": f"Raised the timeout of job {i}."},
               session, at + timedelta(seconds=9)),
    ]  # fmt: skip


def _fill(rt: Runtime) -> list[str]:
    """At least RECORDS records (whole batches), each from its own turn; their ids."""
    rng = np.random.default_rng(5)
    ids: list[str] = []
    i = 0
    while len(ids) < RECORDS:
        turns = []
        for _ in range(BATCH):
            skipped = i % SKIP_EVERY == SKIP_EVERY - 1
            turns.append((i, skipped, _turn(i, skipped)))
            i += 1
        # A skipped turn is closed by the next prompt of its session: store them in order.
        results = rt.storage.put_events([e for _, _, events in turns for e in events])
        turn_of = {r.event_id: r.turn_id for r in results}
        with rt.storage.transaction() as tx:
            for n, skipped, events in turns:
                turn_id = turn_of[events[0].event_id] or ""
                if skipped:
                    tx.mark_turn_extracted(turn_id, [])
                    continue
                record = MemoryRecord(
                    namespace=NS,
                    title=f"Job {n} timed out under load",
                    summary=f"The job {n} worker hit the 30 s timeout; raised it to 120 s.",
                    facts=[f"pytest -q tests/test_job_{n % 97}.py failed", "timeout is 120 s"],
                    files_touched=[f"jobs/job_{n % 97}.py"],
                    observation_type="bugfix",
                    source_event_ids=[e.event_id for e in events],
                    created_at=events[-1].valid_time,
                )
                tx.put_memory_record(record)
                vector = rng.standard_normal(384).astype(np.float32)
                tx.put_embedding(record.record_id, vector / np.linalg.norm(vector))
                tx.mark_turn_extracted(turn_id, [record.record_id])
                ids.append(record.record_id)
    return ids


def _analyze(url: str) -> None:
    """Planner statistics and reclaimed row versions, as autovacuum would have them by
    the time anyone browses (the fill's transactions of 500 turns each leave a thousand
    dead versions of the project's record-count row)."""
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("ANALYZE memory_records, memory_fts, events, turns")
        conn.execute("VACUUM (ANALYZE) namespace_event_counts, namespace_record_counts")


def _timed(client: Any, headers: dict[str, str], paths: list[str]) -> float:
    start = time.perf_counter()
    for path in paths:
        res = client.get(path, headers=headers)
        if res.status_code != 200:
            raise RuntimeError(f"{path}: HTTP {res.status_code} {res.get_data(as_text=True)[:200]}")
    return (time.perf_counter() - start) * 1000.0


def _summary(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples)
    return {
        "p50_ms": round(statistics.median(ordered), 2),
        "p95_ms": round(ordered[int(0.95 * (len(ordered) - 1))], 2),
        "max_ms": round(ordered[-1], 2),
    }


def _backend(settings: Settings) -> dict[str, Any]:
    prepare_home(settings)
    migrate(settings)
    rt = Runtime.build(settings)
    try:
        started = time.perf_counter()
        ids = _fill(rt)
        fill_s = time.perf_counter() - started
        if settings.database_url:
            _analyze(settings.database_url)
        client = create_app(runtime=rt).test_client()
        headers = {
            "Authorization": f"Bearer {ensure_token(settings)}",
            "Host": f"127.0.0.1:{settings.port}",
        }
        rng = random.Random(3)
        # The last page holds the 50 oldest records: it starts after the 51st oldest.
        start = rt.storage.get_memory_record(ids[50])
        assert start is not None
        deep = quote(cursor(start.created_at, start.record_id))
        pages: dict[str, Callable[[], list[str]]] = {
            "feed_first_page": lambda: [
                f"/v1/memories?namespace={NS}&limit=50&count=false",
                f"/v1/events?namespace={NS}&limit=30",
            ],
            "record_page": lambda: [
                f"/v1/memories/{(rid := rng.choice(ids))}",
                f"/v1/memories/{rid}/source",
            ],
            "projects_page": lambda: ["/v1/projects", f"/v1/stats?namespace={NS}"],
            "feed_last_page": lambda: [
                f"/v1/memories?namespace={NS}&limit=50&after={deep}&count=false"
            ],
            # The baseline of the last page: the same call for the first page.
            "feed_first_records": lambda: [f"/v1/memories?namespace={NS}&limit=50&count=false"],
        }
        stats = rt.storage.stats(NS)
        out: dict[str, Any] = {
            "records": stats["memories"],
            "events": stats["events"],
            "fill_s": round(fill_s, 1),
        }
        samples: dict[str, list[float]] = {name: [] for name in pages}
        for paths in pages.values():
            _timed(client, headers, paths())  # warm: first-use costs are not the page's
        out["load_avg_1m"] = [round(os.getloadavg()[0], 2)]
        for _ in range(SAMPLES):  # interleaved: a load spike hits every page alike
            for name, paths in pages.items():
                samples[name].append(_timed(client, headers, paths()))
        out["load_avg_1m"].append(round(os.getloadavg()[0], 2))
        out.update((name, _summary(times)) for name, times in samples.items())
        out["last_vs_first_p50"] = round(
            out["feed_last_page"]["p50_ms"] / out["feed_first_records"]["p50_ms"], 2
        )
        return out
    finally:
        rt.close()


def run(database_url: str | None = None) -> dict[str, Any]:
    pg_base = database_url or os.environ.get("WAKEMARK_BENCH_DATABASE_URL", DEFAULT_PG)
    result: dict[str, Any] = {"records": RECORDS, "samples": SAMPLES, "backends": {}}
    with tempfile.TemporaryDirectory() as home:
        result["backends"]["sqlite"] = _backend(Settings(home=Path(home), embedder="off"))
    schema, url = _pg_schema_url(pg_base)
    try:
        with tempfile.TemporaryDirectory() as home:
            pg = Settings(home=Path(home), embedder="off", database_url=url)
            result["backends"]["postgres"] = _backend(pg)
    finally:
        _drop_schema(pg_base, schema)
    result["target_ms"] = TARGET_MS
    return result


def markdown(result: dict[str, Any]) -> str:
    lines = [
        "# viewer",
        "",
        f"{result['records']:,}+ records in one project (each from its own turn, one turn in "
        f"{SKIP_EVERY} skipped, every record embedded); {result['samples']} samples per page; "
        "a page is the sum of its API calls, server-side (Flask test client).",
        "",
        "| backend | page | p50 ms | p95 ms | max ms |",
        "|---|---|---:|---:|---:|",
    ]
    for backend, res in result["backends"].items():
        for page in (
            "feed_first_page", "record_page", "projects_page", "feed_last_page",
            "feed_first_records",
        ):  # fmt: skip
            s = res[page]
            lines.append(f"| {backend} | {page} | {s['p50_ms']} | {s['p95_ms']} | {s['max_ms']} |")
    lines += [
        "",
        f"Target: every page within {result['target_ms']:.0f} ms (p95); the last page is "
        "50k records deep (keyset). Fill time: "
        + ", ".join(f"{b} {r['fill_s']} s" for b, r in result["backends"].items())
        + ". The last page against the first (same call, same run, p50): "
        + ", ".join(f"{b} {r['last_vs_first_p50']}x" for b, r in result["backends"].items())
        + ". 1-min load average before and after the samples (2 cores, shared): "
        + ", ".join(
            f"{b} {r['load_avg_1m'][0]} / {r['load_avg_1m'][1]}"
            for b, r in result["backends"].items()
        )
        + ".",
        "",
        "Run: `.venv/bin/python -m bench viewer`.",
        "",
    ]
    return "\n".join(lines)

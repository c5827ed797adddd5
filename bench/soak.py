"""Database size over a long soak: retention off, on (30 days), on with event expiry,
and on with event expiry and record retention.

EVENTS events (turns of a prompt, two tool uses with 1-6 kB outputs and an answer) over
DAYS simulated days, written straight through storage in batches of 500, each prompt
with the retrieval audit row the API writes for it, each day's turns extracted
in-process (``tasks.extract_turns``, deterministic extractor, no embedder) at that
day's simulated time, then the retention pass run for that day (``retention.expire``:
trim after 30 days and audit rows of that age; in the third run also the trimmed turns
and their stubs after EXPIRY_DAYS; in the fourth also the records after RECORD_DAYS).
Sampled every SAMPLE_EVERY days: the database's size (its pages, WAL included, no
VACUUM), the bytes of the stored event bodies, and each table's bytes. Without record
retention what still grows is what is kept for good by design: the records (one per
turn here, as nothing repeats) with their full-text and trigram entries. A final
``wakemark gc`` compaction shows what VACUUM gives back. Simulated time: event
``valid_time`` and the storage clock that stamps transaction, extraction and audit
times. Run alone: ``python -m bench.soak [events]``.
"""

from __future__ import annotations

import random
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

EVENTS = 100_000
DAYS = 100
RETENTION_DAYS = 30
EXPIRY_DAYS = 60
RECORD_DAYS = 60
CANDIDATES = 10  # hits a retrieval audit row lists, as the gate sees them
SAMPLE_EVERY = 10  # days between two size samples
NS = "/actor/soak/project/0000000000000001/"
T0 = datetime(2026, 1, 1, 9, 0, tzinfo=UTC)
_WORDS = ("cart", "coupon", "total", "invoice", "retry", "cache", "token", "session",
          "parser", "config", "migrate", "index", "query", "render", "worker", "queue")  # fmt: skip


def _text(rng: random.Random, size: int) -> str:
    words: list[str] = []
    length = 0
    while length < size:
        w = f"{rng.choice(_WORDS)}_{rng.randrange(10_000)}"
        words.append(w)
        length += len(w) + 1
    return " ".join(words)


def _turn(rng: random.Random, day: int, i: int, at: datetime) -> list[Any]:
    from wakemark.shared.models import Event, new_ulid

    session = f"d{day}-t{i}"
    module = f"src/{rng.choice(_WORDS)}_{rng.randrange(40)}.py"

    def ev(kind: str, body: dict[str, Any], k: int) -> Event:
        return Event(event_id=new_ulid(), session_id=session, actor_id="soak", namespace=NS,
                     kind=kind, body=body, valid_time=at + timedelta(seconds=k),
                     source={"surface": "bench", "project_path": "/home/soak/shop"})  # fmt: skip

    def tool(name: str, tool_input: dict[str, Any], k: int) -> Event:
        out = _text(rng, rng.randrange(1000, 6000))
        response = {"stdout": out, "stderr": "", "exit_code": rng.choice((0, 0, 1))}
        data = {"tool_name": name, "tool_input": tool_input, "tool_response": response}
        return ev("tool_use", {"type": "json", "data": data}, k)

    prompt = f"fix the {rng.choice(_WORDS)} bug in {module}"
    return [
        ev("prompt", {"type": "text", "content": prompt}, 0),
        tool("Read", {"file_path": module}, 1),
        tool("Bash", {"command": "pytest -q"}, 2),
        ev("session_summary", {"type": "text", "content": _text(rng, 400)}, 3),
    ]


class _Clock:
    """The storage clock: the simulated time of the day being written."""

    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> datetime:
        return self.now


def _retrieval(rng: random.Random, prompt: Any, at: datetime) -> Any:
    from wakemark.shared.models import Retrieval, RetrievalCandidate, new_record_id

    hits = [
        RetrievalCandidate(record_id=new_record_id(), rank=k, match_source="hybrid",
                           score=round(rng.random() / 30, 4), relevance=round(rng.random(), 3),
                           injected=k < 2)
        for k in range(CANDIDATES)
    ]  # fmt: skip
    return Retrieval(
        event_id=prompt.event_id, namespace=NS, session_id=prompt.session_id, created_at=at,
        decision="inject", reason="2 of 10 hits at or above 0.5", mode="hybrid",
        min_relevance=0.5, latency_ms=4.2, bytes=900, injected=[h.record_id for h in hits[:2]],
        candidates=hits,
    )  # fmt: skip


def _soak(
    root: Path, events: int, retention_days: int, expiry_days: int = 0, record_days: int = 0
) -> dict[str, Any]:
    from wakemark.shared.config import Settings, prepare_home
    from wakemark.shared.jobs import tasks
    from wakemark.shared.retention import expire
    from wakemark.shared.runtime import Runtime
    from wakemark.shared.storage import migrate

    settings = Settings(home=root, embedder="off", event_retention_days=retention_days)
    prepare_home(settings)
    migrate(settings)
    runtime = Runtime.build(settings)
    storage = runtime.storage
    clock = _Clock()
    # The backend's module clock stamps transaction and extraction times; found through
    # the instance, as nothing but the storage factory imports a backend.
    sqlite_storage = sys.modules[type(storage).__module__]
    real = sqlite_storage.utcnow
    sqlite_storage.utcnow = clock  # type: ignore[assignment]
    rng = random.Random(1)
    turns_per_day = max(1, events // 4 // DAYS)
    samples = []
    written = 0
    started = time.perf_counter()
    try:
        for day in range(DAYS):
            clock.now = T0 + timedelta(days=day)
            batch = []
            for i in range(turns_per_day):
                batch += _turn(rng, day, i, clock.now + timedelta(minutes=i))
            for k in range(0, len(batch), 500):
                storage.put_events(batch[k : k + 500])
            for e in batch:
                if e.kind == "prompt":
                    storage.put_retrieval(_retrieval(rng, e, e.valid_time))
            written += len(batch)
            while pending := storage.pending_turns(1000):
                for k in range(0, len(pending), 32):
                    tasks.extract_turns(runtime, pending[k : k + 32])
            expire(storage, retention_days, expiry_days, record_days, now=clock.now)
            if (day + 1) % SAMPLE_EVERY == 0:
                usage = storage.disk_usage()
                body = sum(p["event_bytes"] for p in usage.projects)
                samples.append(
                    {"day": day + 1, "events": written, "mb": _mb(usage.total),
                     "event_body_mb": _mb(body),
                     "tables_mb": {t: _mb(n) for t, n in sorted(usage.tables.items())}}
                )  # fmt: skip
        seconds = time.perf_counter() - started
        stats = storage.stats()
        compacted = storage.compact()
        after = _mb(storage.disk_usage().total)
    finally:
        sqlite_storage.utcnow = real  # type: ignore[assignment]
        runtime.close()
    return {
        "retention_days": retention_days,
        "expiry_days": expiry_days,
        "record_days": record_days,
        "samples": samples,
        "events": stats["events"],
        "memories": stats["memories"],
        "seconds": round(seconds, 1),
        "after_gc_mb": after,
        "gc": compacted[0],
    }


def _mb(size: int) -> float:
    return round(size / 1e6, 1)


def run(events: int = EVENTS) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        off = _soak(Path(tmp) / "off", events, 0)
        on = _soak(Path(tmp) / "on", events, RETENTION_DAYS)
        expiry = _soak(Path(tmp) / "expiry", events, RETENTION_DAYS, EXPIRY_DAYS)
        records = _soak(Path(tmp) / "records", events, RETENTION_DAYS, EXPIRY_DAYS, RECORD_DAYS)
    bodies = [s["event_body_mb"] for s in on["samples"] if s["day"] > RETENTION_DAYS]
    return {
        "event_bodies_on_mb_after_window": [min(bodies), max(bodies)],
        "events": events,
        "days": DAYS,
        "retention_off": off,
        "retention_on": on,
        "retention_expiry": expiry,
        "retention_records": records,
        # MB per 10 days once each run's windows are full (the last 30 days): what still grows
        "growth_per_10_days": {
            name: _slope(run["samples"], DAYS - 30)
            for name, run in (("off", off), ("on", on), ("expiry", expiry), ("records", records))
        },
        "final_ratio_on_off": round(on["samples"][-1]["mb"] / off["samples"][-1]["mb"], 3),
        "final_ratio_expiry_off": round(expiry["samples"][-1]["mb"] / off["samples"][-1]["mb"], 3),
        "final_ratio_records_off": round(
            records["samples"][-1]["mb"] / off["samples"][-1]["mb"], 3
        ),
    }


def _slope(samples: list[dict[str, Any]], from_day: int) -> dict[str, float]:
    """MB per SAMPLE_EVERY days from ``from_day`` to the end: the whole database and each
    table that moved."""
    first = next(s for s in samples if s["day"] >= from_day)
    last = samples[-1]
    per = SAMPLE_EVERY / (last["day"] - first["day"])
    out = {"database": round((last["mb"] - first["mb"]) * per, 2)}
    for table, mb in last["tables_mb"].items():
        delta = round((mb - first["tables_mb"].get(table, 0.0)) * per, 2)
        if abs(delta) >= 0.05:
            out[table] = delta
    return out


def markdown(r: dict[str, Any]) -> str:
    off, on = r["retention_off"], r["retention_on"]
    ex, rec = r["retention_expiry"], r["retention_records"]
    lines = [
        "# soak",
        "",
        f"{r['events']:,} events over {r['days']} simulated days (SQLite, no VACUUM), one"
        f" retrieval audit row per prompt. Runs: off (no retention); on (event bodies"
        f" trimmed after {on['retention_days']} days, the default); expiry (also the"
        f" trimmed turns and their stubs deleted after {ex['expiry_days']} days); records"
        f" (also records deleted after {rec['record_days']} days). Database MB (event"
        " bodies MB):",
        "",
        "| day | events | off | on | expiry | records |",
        "|---|---|---|---|---|---|",
    ]
    runs = zip(off["samples"], on["samples"], ex["samples"], rec["samples"], strict=True)
    for a, b, c, d in runs:
        lines.append(
            f"| {a['day']} | {a['events']:,} | {a['mb']} ({a['event_body_mb']}) | {b['mb']}"
            f" ({b['event_body_mb']}) | {c['mb']} ({c['event_body_mb']}) | {d['mb']}"
            f" ({d['event_body_mb']}) |"
        )
    lines += ["", "Growth over the last 30 days, MB per 10 days (tables that moved):", ""]
    for name, slope in r["growth_per_10_days"].items():
        parts = ", ".join(f"{t} {v:+}" for t, v in slope.items() if t != "database")
        lines.append(f"- {name}: database {slope['database']:+} ({parts or 'none'})")
    lines += [
        "",
        f"With retention the event bodies stay between"
        f" {r['event_bodies_on_mb_after_window'][0]} and"
        f" {r['event_bodies_on_mb_after_window'][1]} MB after day {on['retention_days']}."
        f" Final size against off: on {r['final_ratio_on_off']:.0%}, expiry"
        f" {r['final_ratio_expiry_off']:.0%}, records {r['final_ratio_records_off']:.0%}."
        f" `wakemark gc` (VACUUM) afterwards: off {off['after_gc_mb']} MB, on"
        f" {on['after_gc_mb']} MB, expiry {ex['after_gc_mb']} MB, records"
        f" {rec['after_gc_mb']} MB. Records kept: {on['memories']:,} (records run"
        f" {rec['memories']:,}); event rows kept: off {off['events']:,}, on {on['events']:,},"
        f" expiry {ex['events']:,}, records {rec['events']:,}. Run time: {off['seconds']} s"
        f" off, {on['seconds']} s on, {ex['seconds']} s expiry, {rec['seconds']} s records.",
    ]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    print(markdown(run(int(sys.argv[1]) if len(sys.argv) > 1 else EVENTS)))

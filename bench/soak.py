"""Database size over a long soak, with event retention off and on.

EVENTS events (turns of a prompt, two tool uses with 1-6 kB outputs and an answer) over
DAYS simulated days, written straight through storage in batches of 500, each day's
turns extracted in-process (``tasks.extract_turns``, deterministic extractor, no
embedder) at that day's simulated time, then, with retention on, the retention job run
for that day (``trim_expired``, 30 days). The size is the SQLite file after a WAL
the database's size (its pages, WAL included) and the bytes of the stored event bodies,
without VACUUM: with retention the bodies level off once the window is full and the
pages trimming frees are reused; what still grows is what is kept for good (records,
their full-text index, event stubs and the event indexes). A final ``wakemark gc``
compaction shows what VACUUM gives back. Simulated time: event ``valid_time`` and the
storage clock that stamps transaction and extraction times.
Run alone: ``python -m bench.soak [events]``.
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


def _soak(root: Path, events: int, retention_days: int) -> dict[str, Any]:
    from wakemark.shared.config import Settings, prepare_home
    from wakemark.shared.jobs import tasks
    from wakemark.shared.retention import trim_expired
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
            written += len(batch)
            while pending := storage.pending_turns(1000):
                for k in range(0, len(pending), 32):
                    tasks.extract_turns(runtime, pending[k : k + 32])
            if retention_days:
                trim_expired(storage, retention_days, now=clock.now)
            if (day + 1) % SAMPLE_EVERY == 0:
                usage = storage.disk_usage()
                body = sum(p["event_bytes"] for p in usage.projects)
                samples.append(
                    {"day": day + 1, "events": written, "mb": _mb(usage.total),
                     "event_body_mb": _mb(body)}
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
    last_on = on["samples"][-1]["mb"]
    at_window = next(s["mb"] for s in on["samples"] if s["day"] >= RETENTION_DAYS + SAMPLE_EVERY)
    bodies = [s["event_body_mb"] for s in on["samples"] if s["day"] > RETENTION_DAYS]
    return {
        "event_bodies_on_mb_after_window": [min(bodies), max(bodies)],
        "events": events,
        "days": DAYS,
        "retention_off": off,
        "retention_on": on,
        "growth_after_window_on": round(last_on - at_window, 1),
        "final_ratio_on_off": round(last_on / off["samples"][-1]["mb"], 3),
    }


def markdown(r: dict[str, Any]) -> str:
    off, on = r["retention_off"], r["retention_on"]
    lines = [
        "# soak",
        "",
        f"{r['events']:,} events over {r['days']} simulated days (SQLite, no VACUUM);"
        f" retention {on['retention_days']} days vs off.",
        "",
        "| day | events | off: database MB | off: event bodies MB | on: database MB"
        " | on: event bodies MB |",
        "|---|---|---|---|---|---|",
    ]
    for a, b in zip(off["samples"], on["samples"], strict=True):
        lines.append(
            f"| {a['day']} | {a['events']:,} | {a['mb']} | {a['event_body_mb']} | {b['mb']}"
            f" | {b['event_body_mb']} |"
        )
    lines += [
        "",
        f"With retention the event bodies stay between"
        f" {r['event_bodies_on_mb_after_window'][0]} and"
        f" {r['event_bodies_on_mb_after_window'][1]} MB after day {on['retention_days']};"
        f" the database grew {r['growth_after_window_on']} MB after day"
        f" {on['retention_days'] + SAMPLE_EVERY} and ended at {r['final_ratio_on_off']:.0%}"
        f" of the size without. `wakemark gc` (VACUUM) afterwards: off"
        f" {off['after_gc_mb']} MB, on {on['after_gc_mb']} MB. Records: {on['memories']:,}"
        f" (both runs {off['memories']:,}); every event row kept ({on['events']:,}). Run"
        f" time: {off['seconds']} s off, {on['seconds']} s on.",
    ]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    print(markdown(run(int(sys.argv[1]) if len(sys.argv) > 1 else EVENTS)))

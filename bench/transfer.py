"""Export and import rates, and the memory they hold, on both backends.

A SQLite database gets RECORDS records (each with a vector) and, per record, a turn of
two events, written straight through storage. It is exported (events and vectors),
imported into an empty Postgres, exported from there (the two files must be equal),
imported back into an empty SQLite. Memory: the Python heap's peak (tracemalloc)
while exporting and importing a tenth of the data and all of it: flat when both
stream. Postgres comes from ``WAKEMARK_TEST_DATABASE_URL`` (a schema of its own,
dropped after). Run alone: ``python -m bench.transfer [records]``.
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
import tracemalloc
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import quote

import numpy as np

RECORDS = 20_000
BATCH = 500


def _seed(storage: Any, n: int) -> None:
    from wakemark.shared.models import Event, MemoryRecord, new_ulid
    from wakemark.shared.storage import ImportBatch, TurnRow

    rng = np.random.default_rng(0)
    t0 = datetime(2026, 1, 1, tzinfo=UTC)
    ns = "/actor/bench/project/transfer/"
    for start in range(0, n, BATCH):
        batch = ImportBatch()
        for i in range(start, min(start + BATCH, n)):
            at = t0 + timedelta(seconds=i)
            turn_id = new_ulid()
            events = []
            for k, kind in enumerate(("prompt", "session_summary")):
                body = {"type": "text", "content": f"step {i}: fix module_{i % 97} " * 8}
                e = Event(event_id=new_ulid(), session_id=f"s{i}", actor_id="bench",
                          namespace=ns, kind=kind, body=body,
                          valid_time=at + timedelta(milliseconds=k),
                          source={"surface": "bench", "project_path": "/p"})  # fmt: skip
                events.append(e)
            record = MemoryRecord(
                namespace=ns,
                title=f"fixed module_{i % 97}",
                summary="a summary of the change " * 6,
                facts=[f"fact {j}" for j in range(4)],
                source_event_ids=[e.event_id for e in events],
                created_at=at,
            )
            vector = rng.standard_normal(384).astype(np.float32)
            batch.records.append((record, vector))
            batch.turns.append(TurnRow(turn_id, ns, f"s{i}", at, at, at, at, [record.record_id]))
            from wakemark.shared.models import StoredEvent

            batch.events += [
                StoredEvent(**e.model_dump(), transaction_time=at, turn_id=turn_id) for e in events
            ]
        storage.import_batch(batch)


def _export(storage: Any, path: Path) -> dict[str, float]:
    from wakemark.shared.transfer import export_lines

    start = time.perf_counter()
    lines = 0
    with path.open("wb") as out:
        for line in export_lines(storage, None, events=True, vectors=True):
            out.write(line)
            lines += 1
    seconds = time.perf_counter() - start
    return {"lines": lines, "seconds": round(seconds, 2), "lines_per_s": round(lines / seconds)}


def _import(storage: Any, path: Path) -> dict[str, float]:
    from wakemark.shared.transfer import import_lines

    start = time.perf_counter()
    with path.open("rb") as f:
        report = import_lines(storage, f)
    seconds = time.perf_counter() - start
    lines = sum(report.lines.values())
    return {"lines": lines, "seconds": round(seconds, 2), "lines_per_s": round(lines / seconds)}


def _peak(fn: Any) -> int:
    tracemalloc.start()
    try:
        fn()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def _pg_url() -> tuple[str, Any]:
    import psycopg

    base = os.environ.get(
        "WAKEMARK_TEST_DATABASE_URL", "postgresql://wakemark@127.0.0.1:5432/wakemark_test"
    )
    schema = "bench_" + uuid.uuid4().hex[:10]
    with psycopg.connect(base, autocommit=True) as conn:
        conn.execute(f'CREATE SCHEMA "{schema}"')

    def drop() -> None:
        with psycopg.connect(base, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA "{schema}" CASCADE')

    sep = "&" if "?" in base else "?"
    return f"{base}{sep}options={quote(f'-csearch_path={schema},public')}", drop


def _sqlite(home: Path) -> Any:
    from wakemark.shared.config import Settings, prepare_home
    from wakemark.shared.runtime import Runtime
    from wakemark.shared.storage import migrate

    settings = Settings(home=home)
    prepare_home(settings)
    migrate(settings)
    return Runtime.build(settings).storage


def run(records: int = RECORDS) -> dict[str, Any]:
    from wakemark.shared.config import Settings
    from wakemark.shared.runtime import Runtime
    from wakemark.shared.storage import migrate

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        src = _sqlite(root / "src")
        _seed(src, records)
        first, second = root / "first.jsonl", root / "second.jsonl"
        out: dict[str, Any] = {"records": records, "turns": records, "events": 2 * records}
        out["export_sqlite"] = _export(src, first)
        out["file_mb"] = round(first.stat().st_size / 1e6, 1)
        url, drop = _pg_url()
        try:
            settings = Settings(home=root / "pg", database_url=url)
            migrate(settings)
            pg = Runtime.build(settings).storage
            out["import_postgres"] = _import(pg, first)
            out["export_postgres"] = _export(pg, second)
            out["identical"] = first.read_bytes() == second.read_bytes()
            pg.close()
        finally:
            drop()
        back = _sqlite(root / "back")
        out["import_sqlite"] = _import(back, second)
        # Heap peak for a tenth of the data and for all of it.
        small = _sqlite(root / "small")
        _seed(small, records // 10)
        memory = {}
        for label, store in (("tenth", small), ("all", src)):
            path = root / f"peak-{label}.jsonl"
            export_peak = _peak(lambda s=store, p=path: _export(s, p))
            target = _sqlite(root / f"peak-target-{label}")
            import_peak = _peak(lambda t=target, p=path: _import(t, p))
            target.close()
            memory[label] = {
                "export_peak_mb": round(export_peak / 1e6, 2),
                "import_peak_mb": round(import_peak / 1e6, 2),
            }
        out["heap_peak"] = memory
        for store in (src, back, small):
            store.close()
    return out


def markdown(r: dict[str, Any]) -> str:
    rows = [
        ("export SQLite", r["export_sqlite"]),
        ("import into Postgres", r["import_postgres"]),
        ("export Postgres", r["export_postgres"]),
        ("import into SQLite", r["import_sqlite"]),
    ]
    lines = [
        "# transfer",
        "",
        f"{r['records']:,} records with vectors, {r['turns']:,} turns, {r['events']:,} events;"
        f" file {r['file_mb']} MB; export → Postgres → export identical: {r['identical']}.",
        "",
        "| step | lines | seconds | lines/s |",
        "|---|---|---|---|",
    ]
    lines += [f"| {n} | {s['lines']:,} | {s['seconds']} | {s['lines_per_s']:,} |" for n, s in rows]
    lines += ["", "| data | export heap peak MB | import heap peak MB |", "|---|---|---|"]
    for label, m in r["heap_peak"].items():
        lines.append(f"| {label} | {m['export_peak_mb']} | {m['import_peak_mb']} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    result = run(int(sys.argv[1]) if len(sys.argv) > 1 else RECORDS)
    print(markdown(result))

"""Deterministic extraction throughput (turns/s) over synthetic realistic turns.

Turns are built from the three fixture turns (bugfix, refactor, question), each copy
with fresh ids, renamed identifiers and a verbose test log of varying length, before the
clock starts. The baseline, measured in the same run on the same turns, is serializing
each turn's events with ``json.dumps``: the result is reported as a ratio to it as well
as in turns/s (target ≥ 500). Run alone: ``python -m bench.extraction [turns]``.
"""

from __future__ import annotations

import copy
import json
import os
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from ulid import ULID

TURNS = 2000
ROUNDS = 3
TARGET = 500
FIXTURES = Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "turns"


def _synthetic(n: int) -> list[list[dict[str, Any]]]:
    bases = [json.loads((FIXTURES / f"{name}.json").read_text()) for name in
             ("bugfix", "refactor", "question")]  # fmt: skip
    turns = []
    for i in range(n):
        events = copy.deepcopy(bases[i % len(bases)])
        log = "".join(f"tests/test_mod{i % 9}.py::test_case_{k} PASSED\n" for k in range(i % 60))
        for event in events:
            event["event_id"] = str(ULID())
            event["session_id"] = f"bench-{i}"
            raw = json.dumps(event["body"]).replace("Cart", f"Cart{i % 50}")
            event["body"] = json.loads(raw.replace("cart.py", f"cart_{i % 40}.py"))
            data = event["body"].get("data", {})
            response = data.get("tool_response")
            if isinstance(response, dict) and "stdout" in response:
                response["stdout"] = log + response["stdout"]
        turns.append(events)
    return turns


def _best(fn: Any, rounds: int) -> float:
    best = float("inf")
    for _ in range(rounds):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def run(turns: int = TURNS) -> dict[str, Any]:
    from wakemark.shared.extraction.deterministic import extract_deterministic
    from wakemark.shared.models import StoredEvent
    from wakemark.shared.storage import Turn

    raw = _synthetic(turns)
    now = datetime.now(UTC)
    built = [
        Turn(
            turn_id=str(ULID()),
            namespace=events[0]["namespace"],
            session_id=events[0]["session_id"],
            closed=True,
            extracted=False,
            events=[StoredEvent.model_validate({**e, "transaction_time": now}) for e in events],
        )
        for events in raw
    ]
    records: list[Any] = []

    def extract_all() -> None:
        records[:] = [extract_deterministic(t) for t in built]

    baseline_s = _best(lambda: [json.dumps(events) for events in raw], ROUNDS)
    extract_s = _best(extract_all, ROUNDS)
    assert all(r is not None for r in records)
    rate = turns / extract_s
    return {
        "name": "extraction",
        "machine": {"cpus": os.cpu_count(), "python": sys.version.split()[0]},
        "turns": turns,
        "events": sum(len(t.events) for t in built),
        "rounds": ROUNDS,
        "extract_s": round(extract_s, 4),
        "turns_per_s": round(rate, 1),
        "baseline": "json.dumps of each turn's events",
        "baseline_s": round(baseline_s, 4),
        "baseline_turns_per_s": round(turns / baseline_s, 1),
        "ratio_to_baseline": round(extract_s / baseline_s, 2),
        "target_turns_per_s": TARGET,
        "meets_target": rate >= TARGET,
    }


def markdown(result: dict[str, Any]) -> str:
    return "\n".join(
        [
            "# Deterministic extraction",
            "",
            f"{result['turns']} synthetic turns ({result['events']} events), best of "
            f"{result['rounds']} rounds.",
            "",
            "| measure | value |",
            "|---|---|",
            f"| extraction | {result['turns_per_s']} turns/s ({result['extract_s']} s) |",
            f"| baseline ({result['baseline']}) | {result['baseline_turns_per_s']} turns/s |",
            f"| extraction time / baseline time | {result['ratio_to_baseline']}× |",
            f"| target ≥ {result['target_turns_per_s']} turns/s | "
            f"{'met' if result['meets_target'] else 'NOT met'} |",
            "",
        ]
    )


if __name__ == "__main__":
    print(json.dumps(run(int(sys.argv[1]) if len(sys.argv) > 1 else TURNS), indent=2))

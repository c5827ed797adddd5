"""Wall time of one hostile Claude Code ``PostToolUse`` at ``POST /v1/hooks/claude-code``
(the Flask test client over embedded SQLite, one process), against its baseline in the
same run: the hook path as it was before Session 28, whose ``clip_json`` rebuilt and
serialized a huge structure of small strings at each of five limits and whose scrub
collected strings through one nested generator per level (both kept below, swapped in for
the baseline rounds). Payloads, each within the 2 MiB request limit: ``wide``, a
``tool_input`` of 480,000 empty objects; ``deep``, 500,000 empty strings 58 lists deep.
Rounds alternate baseline and current. Run: ``python -m bench hook_payload``.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from wakemark.services.agents import base
from wakemark.services.api import create_app
from wakemark.services.api.security import ensure_token
from wakemark.shared import privacy
from wakemark.shared.config import Settings, prepare_home
from wakemark.shared.runtime import Runtime
from wakemark.shared.storage import migrate

ROUNDS = 5
FIXTURE = Path(__file__).resolve().parents[1] / "tests/fixtures/hooks/claude-code/PostToolUse.json"


def _clip_json_before(value: Any) -> Any:
    limit = base.MAX_TOOL_TEXT
    clipped = base.clip_text(value, limit)
    while len(json.dumps(clipped, default=str)) > base.MAX_JSON_BYTES and limit > 256:
        limit //= 4
        clipped = base.clip_text(value, limit)
    if len(json.dumps(clipped, default=str)) > base.MAX_JSON_BYTES:
        return base.clip_text(json.dumps(value, default=str)[: base.MAX_JSON_BYTES // 2], limit)
    return clipped


def _yielded(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for k, v in value.items():
            if isinstance(k, str):
                yield k
            yield from _yielded(v)
    elif isinstance(value, list | tuple):
        for v in value:
            yield from _yielded(v)


def _strings_before(value: Any, out: list[str]) -> list[str]:
    out.extend(_yielded(value))
    return out


def _nested(depth: int, leaf: Any) -> Any:
    for _ in range(depth):
        leaf = [leaf]
    return leaf


PAYLOADS = {"wide": {"a": [{}] * 480_000}, "deep": {"a": _nested(58, [""] * 500_000)}}
SETTINGS = {
    "before": (_clip_json_before, _strings_before),
    "current": (base.clip_json, privacy._strings),
}


def run() -> dict[str, Any]:
    home = Path(tempfile.mkdtemp(prefix="wakemark-bench-"))
    settings = Settings(home=home / "home", embedder="off")
    prepare_home(settings)
    migrate(settings)
    runtime = Runtime.build(settings)
    client = create_app(runtime=runtime).test_client()
    headers = {
        "Authorization": f"Bearer {ensure_token(settings)}",
        "Host": "127.0.0.1:37800",
        "X-Wakemark-Actor": "bench",
    }
    (home / "shop" / ".git").mkdir(parents=True)
    payload = json.loads(FIXTURE.read_text()) | {"cwd": str(home / "shop")}
    sent = 0

    def post(tool_input: Any) -> tuple[float, int]:
        nonlocal sent
        sent += 1  # a new tool use each time: every request stores an event
        body = json.dumps(payload | {"tool_use_id": f"toolu_{sent}", "tool_input": tool_input})
        t0 = time.perf_counter()
        res = client.post(
            "/v1/hooks/claude-code", data=body, headers=headers, content_type="application/json"
        )
        elapsed = time.perf_counter() - t0
        assert res.status_code == 204, res.get_data(as_text=True)
        return elapsed, len(body)

    result: dict[str, Any] = {"load_before": os.getloadavg(), "rounds": ROUNDS}
    try:
        for name, tool_input in PAYLOADS.items():
            post(tool_input)  # warm-up
            times: dict[str, list[float]] = {k: [] for k in SETTINGS}
            for _ in range(ROUNDS):
                for which, (clip, strings) in SETTINGS.items():
                    base.clip_json, privacy._strings = clip, strings  # type: ignore[assignment]
                    elapsed, size = post(tool_input)
                    times[which].append(round(elapsed, 3))
            best = {k: min(v) for k, v in times.items()}
            result[name] = {
                "body_bytes": size,
                "seconds": times,
                "ratio": round(best["before"] / best["current"], 2),
            }
    finally:
        base.clip_json, privacy._strings = SETTINGS["current"]  # type: ignore[assignment]
        runtime.close()
        shutil.rmtree(home, ignore_errors=True)
    result["load_after"] = os.getloadavg()
    return result


def markdown(result: dict[str, Any]) -> str:
    load = ", ".join(f"{x:.2f}" for x in result["load_before"])
    lines = [
        "# hook_payload: a hostile PostToolUse, before Session 28 and now",
        "",
        f"Load average before the run: {load}. Best of {result['rounds']} rounds each.",
        "",
        "| payload | body bytes | before (s) | now (s) | ratio |",
        "|---|---|---|---|---|",
    ]
    for name in PAYLOADS:
        r = result[name]
        before, now = min(r["seconds"]["before"]), min(r["seconds"]["current"])
        lines.append(f"| {name} | {r['body_bytes']:,} | {before:.2f} | {now:.2f} | {r['ratio']} |")
    return "\n".join(lines) + "\n"

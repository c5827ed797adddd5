"""Secret scanning at capture: what it adds to ingest, and how often it fires on ordinary text.

Cost: events built from real text (codemem-dev commits as turns: the subject as the
prompt, each changed file as a tool use whose output is a slice of one of this
repository's source files, the message body as the answer), posted in batches of 100 to
the real app (Flask test client, SQLite in a temp home), rounds alternating the scan on
and off in the same process, so the difference is what the scan adds. "Off" keeps the
``<private>`` walk and drops only the credential scan. Every event is a ``tool_use`` of
one open turn per round, so no extraction runs in the background to blur the timing.
The scrub step alone is timed too, and detect-secrets' own ``scan_line`` on a sample of
lines for scale (why the scanner compiles the plugins' regexes itself).

Linear time: every capture-path regex on its worst derived input (``tests/regex_bait``)
at 100 KB, and each one's worst input as a 2 MiB request body, scrubbed and posted.

False positives: every line of this repository's text files, every string in
``tests/fixtures/**`` and every string of the codemem-dev set, scanned one by one; any
hit there is a false positive (none of that text holds a real credential), and each is
listed. Run alone: ``python -m bench.secrets``.
"""

from __future__ import annotations

import contextlib
import json
import os
import statistics
import tempfile
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from unittest import mock

from ulid import ULID

ROOT = Path(__file__).resolve().parents[1]
DATASET = Path(os.environ.get("WAKEMARK_CODEMEM_DEV", "/work/shared/datasets/codemem-dev"))
TEXT_SUFFIXES = {".py", ".md", ".sql", ".toml", ".yaml", ".yml", ".cfg", ".txt", ".json"}
SOURCE_DIRS = ("shared", "services", "tests", "bench", "migrations", "scripts", "docker")
BATCH = 100
ROUNDS = 5
TURNS_PER_ROUND = 200
NS = "/actor/bench/project/secrets/"


def _repo_files() -> list[Path]:
    files = [ROOT / "README.md", ROOT / "pyproject.toml", ROOT / "Makefile", ROOT / "Dockerfile"]
    for folder in SOURCE_DIRS:
        for path in sorted((ROOT / folder).rglob("*")):
            if path.is_file() and (path.suffix in TEXT_SUFFIXES or path.suffix == ".jsonl"):
                files.append(path)
    return [f for f in files if f.is_file() and "results" not in f.parts]


def _leaves(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for k, v in value.items():
            yield k
            yield from _leaves(v)
    elif isinstance(value, list):
        for v in value:
            yield from _leaves(v)


def _json_strings(path: Path) -> list[str]:
    text = path.read_text()
    try:
        return list(_leaves(json.loads(text)))
    except ValueError:
        out: list[str] = []
        for line in text.splitlines():
            try:
                out += _leaves(json.loads(line))
            except ValueError:
                out.append(line)
        return out


def corpus() -> dict[str, list[tuple[str, str]]]:
    """Ordinary text by origin: (where, string)."""
    fixtures = ROOT / "tests" / "fixtures"
    repo: list[tuple[str, str]] = []
    fixture_strings: list[tuple[str, str]] = []
    for path in _repo_files():
        rel = str(path.relative_to(ROOT))
        if fixtures in path.parents:
            if path.suffix in (".json", ".jsonl"):
                fixture_strings += [(rel, s) for s in _json_strings(path)]
            else:
                fixture_strings += [(rel, line) for line in path.read_text().splitlines()]
        else:
            repo += [(rel, line) for line in path.read_text().splitlines()]
    dataset: list[tuple[str, str]] = []
    for path in sorted(DATASET.glob("*/*.jsonl")):
        rel = f"codemem-dev/{path.parent.name}/{path.name}"
        dataset += [(rel, s) for s in _json_strings(path)]
    return {"repository": repo, "fixtures": fixture_strings, "codemem-dev": dataset}


def false_positives(strings: dict[str, list[tuple[str, str]]]) -> dict[str, Any]:
    from wakemark.shared import secrets

    out: dict[str, Any] = {}
    hits: list[dict[str, str]] = []
    started = time.perf_counter()
    total = 0
    for origin, items in strings.items():
        flagged = 0
        for where, text in items:
            spans = secrets.find(text)
            if spans:
                flagged += 1
                for start, end, kind in spans:
                    hits.append({"where": where, "kind": kind, "match": text[start:end][:80]})
        total += len(items)
        out[origin] = {"strings": len(items), "flagged": flagged}
    elapsed = time.perf_counter() - started
    flagged_total = sum(v["flagged"] for v in out.values())
    return {
        "by_origin": out,
        "strings": total,
        "flagged": flagged_total,
        "rate": flagged_total / total,
        "us_per_string": round(elapsed / total * 1e6, 1),
        "hits": hits,
    }


def _turns() -> list[dict[str, Any]]:
    commits = []
    for path in sorted(DATASET.glob("*/memories.jsonl")):
        commits += [json.loads(line) for line in path.read_text().splitlines()]
    return commits


def _source_slices() -> list[str]:
    slices = []
    for path in _repo_files():
        if path.suffix == ".py":
            text = path.read_text()
            slices += [text[i : i + 2000] for i in range(0, min(len(text), 8000), 2000)]
    return [s for s in slices if s.strip()]


def _events(commits: list[dict[str, Any]], slices: list[str], session: str) -> list[dict]:
    now = datetime.now(UTC).isoformat()

    def event(body: dict[str, Any]) -> dict[str, Any]:
        return {
            "event_id": str(ULID()),
            "session_id": session,
            "actor_id": "bench",
            "namespace": NS,
            "kind": "tool_use",
            "body": body,
            "valid_time": now,
            "source": {"surface": "bench", "project_path": "/home/bench/secrets"},
        }

    events = []
    for i, commit in enumerate(commits):
        events.append(event({"type": "text", "content": commit["prompt"]}))
        for j, file in enumerate(commit["files"][:3]):
            output = slices[(i * 3 + j) % len(slices)]
            data = {"tool": "Edit", "input": {"file_path": file}, "output": output}
            events.append(event({"type": "json", "data": data}))
        answer = commit["answer"] or commit["prompt"]
        turns = [
            {"role": "user", "content": commit["prompt"]},
            {"role": "assistant", "content": answer},
        ]
        events.append(event({"type": "message", "turns": turns}))
    return events


def _no_scan() -> Any:
    from wakemark.shared import privacy

    return mock.patch.object(privacy.secrets, "redact_each", lambda texts: texts)


@contextlib.contextmanager
def _events_api() -> Iterator[Callable[[bytes], Any]]:
    """``post(body)``: POST /v1/events to the real app (test client, token set) over a fresh
    SQLite home."""
    from wakemark.services.api import create_app
    from wakemark.services.api.security import ensure_token
    from wakemark.shared.config import Settings, prepare_home
    from wakemark.shared.runtime import Runtime
    from wakemark.shared.storage import migrate

    with tempfile.TemporaryDirectory() as home:
        settings = Settings(home=Path(home), embedder="off")
        prepare_home(settings)
        migrate(settings)
        rt = Runtime.build(settings)
        try:
            client = create_app(runtime=rt).test_client()
            headers = {"Authorization": f"Bearer {ensure_token(settings)}"}
            yield lambda body: client.post(
                "/v1/events",
                data=body,
                headers=headers,
                content_type="application/json",
                base_url="http://127.0.0.1:37800",
            )
        finally:
            rt.close()


def ingest_cost(commits: list[dict[str, Any]], slices: list[str]) -> dict[str, Any]:
    from wakemark.shared.privacy import scrub

    with _events_api() as post:
        timings: dict[str, list[float]] = {"scan": [], "no_scan": []}
        scrub_timings: dict[str, list[float]] = {"scan": [], "no_scan": []}
        n_events = 0
        for r in range(ROUNDS * 2):
            mode = "scan" if r % 2 == 0 else "no_scan"
            part = commits[(r // 2) * TURNS_PER_ROUND : (r // 2 + 1) * TURNS_PER_ROUND]
            events = _events(part, slices, f"round-{r}")
            bodies = [
                json.dumps({"events": events[i : i + BATCH]}).encode()
                for i in range(0, len(events), BATCH)
            ]
            patch = _no_scan() if mode == "no_scan" else contextlib.nullcontext()
            with patch:
                t0 = time.perf_counter()
                for e in events:
                    scrub(e)
                scrub_timings[mode].append((time.perf_counter() - t0) / len(events))
                t0 = time.perf_counter()
                for body in bodies:
                    res = post(body)
                    if res.status_code != 201:
                        raise RuntimeError(res.get_data(as_text=True)[:300])
                timings[mode].append((time.perf_counter() - t0) / len(events))
            n_events = len(events)

    def us(values: list[float]) -> float:
        return round(statistics.median(values) * 1e6, 1)

    return {
        "events_per_round": n_events,
        "rounds_per_mode": ROUNDS,
        "ingest_us_per_event": {"scan": us(timings["scan"]), "no_scan": us(timings["no_scan"])},
        "ingest_added_us_per_event": round(us(timings["scan"]) - us(timings["no_scan"]), 1),
        "scrub_us_per_event": {
            "scan": us(scrub_timings["scan"]),
            "no_scan": us(scrub_timings["no_scan"]),
        },
        "scrub_added_us_per_event": round(
            us(scrub_timings["scan"]) - us(scrub_timings["no_scan"]), 1
        ),
        "mean_event_bytes": round(
            statistics.mean(len(json.dumps(e)) for e in _events(commits[:500], slices, "s"))
        ),
    }


def small_event_cost() -> dict[str, Any]:
    """The scrub step on bench/ingest's own event (one 70-character text body), alone and
    in batches of 100 as ``POST /v1/events`` takes them."""
    from bench.ingest import _event
    from wakemark.shared.privacy import scrub

    events = [_event(i, "s") for i in range(2000)]
    batches = [{"events": events[i : i + BATCH]} for i in range(0, len(events), BATCH)]
    out: dict[str, float] = {}
    for mode in ("scan", "no_scan", "scan", "no_scan"):
        patch = _no_scan() if mode == "no_scan" else contextlib.nullcontext()
        with patch:
            t0 = time.perf_counter()
            for e in events:
                scrub(e)
            single = (time.perf_counter() - t0) / len(events) * 1e6
            t0 = time.perf_counter()
            for b in batches:
                scrub(b)
            batched = (time.perf_counter() - t0) / len(events) * 1e6
        out[f"single_{mode}"] = round(min(single, out.get(f"single_{mode}", single)), 1)
        out[f"batched_{mode}"] = round(min(batched, out.get(f"batched_{mode}", batched)), 1)
    return out


def detect_secrets_scan_line(lines: list[str]) -> dict[str, Any]:
    from detect_secrets.core.scan import scan_line
    from detect_secrets.settings import default_settings

    from wakemark.shared import secrets

    with default_settings():
        list(scan_line("warm up"))
        t0 = time.perf_counter()
        for line in lines:
            list(scan_line(line))
        theirs = (time.perf_counter() - t0) / len(lines)
    t0 = time.perf_counter()
    for line in lines:
        secrets.find(line)
    ours = (time.perf_counter() - t0) / len(lines)
    return {
        "lines": len(lines),
        "scan_line_us": round(theirs * 1e6, 1),
        "compiled_us": round(ours * 1e6, 1),
    }


RULE_CHARS = 100_000
BODY_BYTES = 2 * 1024 * 1024


def _cpu_ms(fn: Any) -> float:
    """Fastest of three runs, in thread CPU milliseconds (another process's load does
    not count)."""
    best = float("inf")
    for _ in range(3):
        t0 = time.thread_time()
        fn()
        best = min(best, time.thread_time() - t0)
    return round(best * 1000, 2)


def linear_time() -> dict[str, Any]:
    """Each capture-path pattern on the worst of its baits (``tests/regex_bait``) at 100 KB,
    alone and with the whole scrub; then each pattern's worst bait grown to a 2 MiB body,
    scrubbed and posted to the real app."""
    from tests.regex_bait import baits, capture_patterns
    from wakemark.shared.privacy import scrub, scrub_text

    rules = []
    for name, pattern in capture_patterns():
        found = baits(pattern, RULE_CHARS)
        timed = {}
        for bait, text in found.items():
            t0 = time.thread_time()
            for _ in pattern.finditer(text):
                pass
            timed[bait] = time.thread_time() - t0
        worst = max(timed, key=lambda b: timed[b])
        text = found[worst]

        def consume(text: Any = text, pattern: Any = pattern) -> None:
            for _ in pattern.finditer(text):
                pass

        as_str = text.decode() if isinstance(text, bytes) else text
        rules.append(
            {
                "pattern": name,
                "source": str(pattern.pattern)[:60],
                "baits": len(found),
                "worst_bait": worst,
                "rule_ms": _cpu_ms(consume),
                "scrub_ms": _cpu_ms(lambda as_str=as_str: scrub_text(as_str)),
            }
        )
    bodies = []
    for (name, pattern), rule in zip(capture_patterns(), rules, strict=True):
        raw = baits(pattern, BODY_BYTES)[rule["worst_bait"]]
        data = _bait_body(raw.decode() if isinstance(raw, bytes) else raw)
        event = json.loads(data)
        bodies.append(
            {
                "pattern": name,
                "bait": rule["worst_bait"],
                "bytes": len(data),
                "scrub_ms": _cpu_ms(lambda event=event: scrub(event)),
                "data": data,
            }
        )
    bodies.sort(key=lambda b: -b["scrub_ms"])
    posted = _post_bodies(bodies[:5])
    for body in bodies:
        del body["data"]
    return {"rule_chars": RULE_CHARS, "rules": rules, "bodies": bodies, "posted": posted}


def _bait_body(text: str) -> bytes:
    """An event holding ``text`` cut to a request of at most 2 MiB as JSON."""
    while True:
        event = {
            "event_id": str(ULID()),
            "session_id": "bait",
            "actor_id": "bench",
            "namespace": NS,
            "kind": "tool_use",
            "body": {"type": "text", "content": text},
            "valid_time": datetime.now(UTC).isoformat(),
            "source": {"surface": "bench", "project_path": "/home/bench/secrets"},
        }
        data = json.dumps(event).encode()
        if len(data) <= BODY_BYTES:
            return data
        text = text[: len(text) * BODY_BYTES // len(data) - 256]


def _post_bodies(bodies: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """2 MiB requests through ``POST /v1/events`` of the real app (wall time). Their
    bodies are over the 1 MiB event limit: the answer is a 422, after the scrub."""
    out = []
    with _events_api() as post:
        for body in bodies:
            t0 = time.perf_counter()
            res = post(body["data"])
            wall = time.perf_counter() - t0
            out.append(
                {
                    "pattern": body["pattern"],
                    "bait": body["bait"],
                    "bytes": body["bytes"],
                    "status": res.status_code,
                    "wall_ms": round(wall * 1000, 1),
                }
            )
    return out


def run() -> dict[str, Any]:
    strings = corpus()
    fp = false_positives(strings)
    commits = _turns()
    slices = _source_slices()
    sample = [s for _, s in strings["repository"][:: max(1, len(strings["repository"]) // 500)]]
    return {
        "config": {"cpus": os.cpu_count(), "loadavg_1m": round(os.getloadavg()[0], 2)},
        "linear_time": linear_time(),
        "ingest": ingest_cost(commits, slices),
        "small_events": small_event_cost(),
        "false_positives": fp,
        "detect_secrets": detect_secrets_scan_line(sample),
    }


def markdown(result: dict[str, Any]) -> str:
    ing = result["ingest"]
    fp = result["false_positives"]
    ds = result["detect_secrets"]
    sm = result["small_events"]
    origins = [
        f"| {name} | {v['strings']} | {v['flagged']} |" for name, v in fp["by_origin"].items()
    ]
    hits = [f"| {h['where']} | {h['kind']} | `{h['match']}` |" for h in fp["hits"]]
    lt = result["linear_time"]
    rule_rows = [
        f"| `{r['pattern']}` | `{r['source'].replace('|', '¦')}` | {r['baits']} | "
        f"{r['worst_bait']} | {r['rule_ms']} | {r['scrub_ms']} |"
        for r in sorted(lt["rules"], key=lambda r: -r["rule_ms"])
    ]
    body_rows = [
        f"| `{b['pattern']}` | {b['bait']} | {b['bytes']} | {b['scrub_ms']} |"
        for b in lt["bodies"][:10]
    ]
    posted_rows = [
        f"| `{p['pattern']}` | {p['bait']} | {p['bytes']} | {p['status']} | {p['wall_ms']} |"
        for p in lt["posted"]
    ]
    return "\n".join(
        [
            "# secrets",
            "",
            "## Linear time",
            "",
            f"On {result['config']['cpus']} CPUs, 1-min load average "
            f"{result['config']['loadavg_1m']} at the start. "
            f"Every regex on the capture path (found in the code by `tests/regex_bait.py`), on "
            f"the inputs derived from its own parts, {lt['rule_chars']} characters each: the "
            "worst bait's thread CPU time for the regex alone and for the whole scrub "
            "(`scrub_text`: every rule, anchors, gates and checks), fastest of three. "
            "Target: each rule ≤ 50 ms.",
            "",
            "| pattern | source | baits | worst bait | rule ms | whole scrub ms |",
            "|---|---|---|---|---|---|",
            *rule_rows,
            "",
            f"Each pattern's worst bait grown to a 2 MiB request body (one event), scrubbed "
            f"(`privacy.scrub`, thread CPU ms, fastest of three); the slowest ten of "
            f"{len(lt['bodies'])}, worst {lt['bodies'][0]['scrub_ms']} ms. Target: ≤ 1000 ms.",
            "",
            "| pattern | bait | request bytes | scrub ms |",
            "|---|---|---|---|",
            *body_rows,
            "",
            "The slowest five posted to `POST /v1/events` of the real app (Flask test client, "
            "SQLite; the event is over the 1 MiB body limit, so the answer is a 422 after "
            "the scrub), wall time:",
            "",
            "| pattern | bait | request bytes | status | wall ms |",
            "|---|---|---|---|---|",
            *posted_rows,
            "",
            "## Cost and false positives",
            "",
            f"Secret scanning at capture, on {result['config']['cpus']} CPUs (1-min load "
            f"average {result['config']['loadavg_1m']}). Ingest: the real app (Flask test "
            f"client, SQLite), {ing['events_per_round']} events a round (mean "
            f"{ing['mean_event_bytes']} bytes as JSON) in batches of {BATCH}, "
            f"{ing['rounds_per_mode']} rounds with the scan and as many without, "
            "interleaved; medians.",
            "",
            "| measure | with scan | without | added |",
            "|---|---|---|---|",
            f"| ingest µs/event (POST /v1/events) | {ing['ingest_us_per_event']['scan']} | "
            f"{ing['ingest_us_per_event']['no_scan']} | {ing['ingest_added_us_per_event']} |",
            f"| scrub step µs/event | {ing['scrub_us_per_event']['scan']} | "
            f"{ing['scrub_us_per_event']['no_scan']} | {ing['scrub_added_us_per_event']} |",
            f"| scrub µs/event, bench/ingest's 70-character event, one a request | "
            f"{sm['single_scan']} | {sm['single_no_scan']} | "
            f"{round(sm['single_scan'] - sm['single_no_scan'], 1)} |",
            f"| same, in batches of {BATCH} | {sm['batched_scan']} | {sm['batched_no_scan']} | "
            f"{round(sm['batched_scan'] - sm['batched_no_scan'], 1)} |",
            "",
            f"detect-secrets' own `scan_line`: {ds['scan_line_us']} µs a line against "
            f"{ds['compiled_us']} µs for the same plugins' regexes compiled by "
            f"`shared/secrets.py` ({ds['lines']} lines of this repository).",
            "",
            f"False positives: {fp['flagged']} of {fp['strings']} strings flagged "
            f"({fp['rate']:.4%}); {fp['us_per_string']} µs a string scanned one by one.",
            "",
            "| corpus | strings | flagged |",
            "|---|---|---|",
            *origins,
            "",
            *(["| where | kind | match |", "|---|---|---|", *hits] if hits else ["No hits."]),
            "",
        ]
    )

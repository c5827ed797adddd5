"""The LLM extractor's daily token budget, shared by every process through one file.

``$WAKEMARK_HOME/llm_usage.json`` maps a UTC date to ``{tokens, calls, failures}``; every
read-modify-write holds an exclusive ``flock`` on a sibling lock file and replaces the
JSON atomically, so worker processes sharing a home never lose an update and a crash
never leaves a torn file.
"""

from __future__ import annotations

import fcntl
import json
import os
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from wakemark.shared.config import Settings

KEEP_DAYS = 31


def _today() -> str:
    return datetime.now(UTC).date().isoformat()


def _path(settings: Settings) -> Path:
    return settings.home / "llm_usage.json"


@contextmanager
def _locked(settings: Settings) -> Iterator[dict[str, Any]]:
    """The usage map under an exclusive lock; changes to it are written back on exit."""
    settings.home.mkdir(mode=0o700, parents=True, exist_ok=True)
    path = _path(settings)
    with open(path.with_suffix(".lock"), "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            data = _read(path)
            before = json.dumps(data, sort_keys=True)
            yield data
            if json.dumps(data, sort_keys=True) != before:
                for day in sorted(data)[:-KEEP_DAYS]:
                    del data[day]
                tmp = path.with_suffix(f".{os.getpid()}.tmp")
                tmp.write_text(json.dumps(data, sort_keys=True))
                os.replace(tmp, path)
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _read(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}  # missing or unreadable: start the count again rather than fail
    return data if isinstance(data, dict) else {}


def _day(data: dict[str, Any]) -> dict[str, int]:
    if not isinstance(data.get(_today()), dict):
        data[_today()] = {}
    day: dict[str, int] = data[_today()]
    for key in ("tokens", "calls", "failures", "skipped"):
        if not isinstance(day.get(key), int):
            day[key] = 0
    return day


def reserve(settings: Settings, estimate: int) -> bool:
    """Take ``estimate`` tokens from today's budget before a call; False (nothing
    taken) when that would pass the budget."""
    with _locked(settings) as data:
        day = _day(data)
        if day["tokens"] + estimate > settings.llm_daily_tokens:
            day["skipped"] += 1
            return False
        day["tokens"] += estimate
        day["calls"] += 1
        return True


def settle(settings: Settings, estimate: int, used: int, failed: bool) -> None:
    """Replace a reservation by the tokens really used (0 when the call never reached
    the model) and count a failure."""
    with _locked(settings) as data:
        day = _day(data)
        day["tokens"] = max(0, day["tokens"] - estimate + used)
        day["failures"] += int(failed)


def usage(settings: Settings) -> dict[str, Any]:
    day = _read(_path(settings)).get(_today())
    day = day if isinstance(day, dict) else {}
    tokens = int(day.get("tokens", 0))
    enabled = bool(settings.llm_base_url and settings.llm_model)
    spent = tokens >= settings.llm_daily_tokens or int(day.get("skipped", 0)) > 0
    return {
        "enabled": enabled,
        # off: the deterministic extractor only; exhausted: today's calls past the budget
        # were refused and those turns were extracted deterministically.
        "state": "off" if not enabled else "exhausted" if spent else "ok",
        "date": _today(),
        "tokens_used": tokens,
        "budget": settings.llm_daily_tokens,
        "remaining": max(0, settings.llm_daily_tokens - tokens),
        "calls": int(day.get("calls", 0)),
        "failures": int(day.get("failures", 0)),
        "skipped": int(day.get("skipped", 0)),
    }

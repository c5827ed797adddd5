"""Replay captured Claude Code sessions through ``/v1/hooks/claude-code``, like an agent."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

SESSIONS = Path(__file__).resolve().parents[1] / "fixtures" / "sessions"
PROJECTS = ("shop", "weather")


class Client:
    """What an agent's HTTP hook does: POST the payload with the configured headers."""

    def __init__(self, stack: Any, actor: str = "dev") -> None:
        self.stack = stack
        self.actor = actor

    def hook(self, payload: dict[str, Any], project_dir: Path) -> tuple[int, Any]:
        # Claude Code fills X-Wakemark-Project from $CLAUDE_PROJECT_DIR (see install).
        headers = {"X-Wakemark-Project": str(project_dir), "X-Wakemark-Actor": self.actor}
        status, body = self.stack.request("POST", "/v1/hooks/claude-code", payload, headers)
        if status not in (200, 204):
            raise AssertionError(f"hook {payload.get('hook_event_name')} -> {status}: {body}")
        return status, body

    def get(self, path: str) -> Any:
        status, body = self.stack.request("GET", path)
        if status != 200:
            raise AssertionError(f"GET {path} -> {status}: {body}")
        return body


def make_projects(root: Path) -> dict[str, Path]:
    """One directory per project, each a repository root (a ``.git`` marker)."""
    out = {}
    for name in PROJECTS:
        path = root / "projects" / name
        (path / ".git").mkdir(parents=True, exist_ok=True)
        out[name] = path
    return out


def load_session(name: str, project_dir: Path) -> list[dict[str, Any]]:
    text = (SESSIONS / f"{name}.jsonl").read_text().replace("${PROJECT}", str(project_dir))
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def closed_turns(payloads: list[dict[str, Any]]) -> int:
    """Turns a replay closes: each ``Stop`` that carries the final answer."""
    return sum(
        1 for p in payloads if p["hook_event_name"] == "Stop" and p.get("last_assistant_message")
    )


def interleaved(sessions: dict[str, list[dict[str, Any]]]) -> list[tuple[str, dict[str, Any]]]:
    """Both sessions' hooks alternating, as two agents working at once would send them."""
    queues = {name: list(rows) for name, rows in sessions.items()}
    out: list[tuple[str, dict[str, Any]]] = []
    while any(queues.values()):
        for name, rows in queues.items():
            if rows:
                out.append((name, rows.pop(0)))
    return out


def replay_all(
    client: Client,
    projects: dict[str, Path],
    between: Callable[[int], None] | None = None,
) -> int:
    """Replay every session; ``between(i)`` runs before hook ``i``. Returns closed turns."""
    sessions = {name: load_session(name, projects[name]) for name in PROJECTS}
    for i, (name, payload) in enumerate(interleaved(sessions)):
        if between:
            between(i)
        client.hook(payload, projects[name])
    return sum(closed_turns(rows) for rows in sessions.values())


def wait_caught_up(
    client: Client, timeout: float = 90.0, check: Callable[[], None] | None = None
) -> dict[str, Any]:
    """Poll ``/v1/stats`` (bounded) until nothing is pending; returns the stats."""
    deadline = time.monotonic() + timeout
    stats: Any = None
    while time.monotonic() < deadline:
        if check:
            check()
        stats = client.get("/v1/stats")
        if stats["pending_extraction"] == 0 and stats["pending_embedding"] == 0:
            return dict(stats)
        time.sleep(0.3)
    raise AssertionError(f"pipeline did not catch up within {timeout:.0f}s: {stats}")


def records(client: Client, actor: str = "dev") -> list[dict[str, Any]]:
    """Every record of the actor, across projects (a namespace prefix)."""
    body = client.get(f"/v1/memories?namespace=/actor/{actor}/&limit=100")
    return list(body["items"])

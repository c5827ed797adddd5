"""End to end through HTTP only, like a real agent: replay two Claude Code sessions in two
projects, wait for the pipeline, and check what a later paraphrasing prompt gets back."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest

from .replay import SESSIONS, Client, make_projects, records, replay_all, wait_caught_up
from .stack import Stack

pytestmark = [pytest.mark.slow, pytest.mark.postgres, pytest.mark.redis]

PROBES = json.loads((SESSIONS / "probes.json").read_text())


def _warm(client: Client, namespace: str, query: str, timeout: float = 30.0) -> None:
    """Search until the vector leg answers: the API loads its embedder on first use."""
    deadline = time.monotonic() + timeout
    body: Any = None
    while time.monotonic() < deadline:
        body = client.get(f"/v1/search?namespace={quote(namespace)}&q={quote(query)}")
        if not body["degraded"]:
            return
        time.sleep(0.2)
    raise AssertionError(f"search still degraded after {timeout:.0f}s: {body}")


def run_scenario(stack: Stack, workdir: Path) -> tuple[list[dict[str, Any]], dict[str, str]]:
    """Replay, wait until caught up, then probe each project; (records, context by project)."""
    client = Client(stack)
    projects = make_projects(workdir)
    turns = replay_all(client, projects)
    wait_caught_up(client, check=stack.check_alive)
    recs = records(client)
    assert len(recs) == turns, [r["title"] for r in recs]
    contexts = {}
    for probe in PROBES:
        target = next(r for r in recs if probe["expect_title_contains"] in r["title"])
        _warm(client, target["namespace"], probe["prompt"])
        payload = {
            "session_id": probe["session_id"],
            "transcript_path": "/dev/null",
            "cwd": str(projects[probe["project"]]),
            "permission_mode": "default",
            "hook_event_name": "UserPromptSubmit",
            "prompt_id": probe["prompt_id"],
            "prompt": probe["prompt"],
        }
        status, body = client.hook(payload, projects[probe["project"]])
        assert status == 200, "a paraphrase of earlier work must bring context back"
        output = body["hookSpecificOutput"]
        assert output["hookEventName"] == "UserPromptSubmit"
        contexts[probe["project"]] = output["additionalContext"]
    return recs, contexts


def _check_recall(recs: list[dict[str, Any]], contexts: dict[str, str]) -> None:
    for probe in PROBES:
        context = contexts[probe["project"]]
        target = next(r for r in recs if probe["expect_title_contains"] in r["title"])
        assert context.startswith("## Prior observations")
        assert f"### {target['title']}" in context
        for other in recs:
            if other["namespace"] != target["namespace"]:
                assert other["title"] not in context, "context leaked from another project"


def _shape(recs: list[dict[str, Any]]) -> set[tuple[str, str, frozenset[str]]]:
    return {(r["title"], r["observation_type"], frozenset(r["files_touched"])) for r in recs}


def test_replayed_sessions_are_recalled_on_the_deployment_stack(
    deployment: Stack, tmp_path: Path
) -> None:
    recs, contexts = run_scenario(deployment, tmp_path)
    assert len({r["namespace"] for r in recs}) == 2  # one namespace per project
    assert all(r["quality"] == "full" for r in recs)
    _check_recall(recs, contexts)
    health = deployment.request("GET", "/health")[1]
    assert health["backend"] == "postgres"
    assert health["jobs"]["mode"] == "celery"


def test_embedded_default_gives_the_same_records(
    deployment: Stack, start_stack: Any, tmp_path: Path
) -> None:
    deployed, _ = run_scenario(deployment, tmp_path / "deployment")
    embedded = start_stack("embedded")  # `wakemark serve`: SQLite in a temp home, no Redis
    assert embedded.request("GET", "/health")[1]["backend"] == "sqlite"
    local, contexts = run_scenario(embedded, tmp_path / "embedded")
    assert _shape(local) == _shape(deployed)
    _check_recall(local, contexts)

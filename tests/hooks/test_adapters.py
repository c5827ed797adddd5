"""Every agent's fixture payloads end to end through the real app and a real backend."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from wakemark.services.api.hooks import CAPTURE_MISSES
from wakemark.shared import project
from wakemark.shared.models import MAX_BATCH

from .conftest import ACTOR, FIXTURES, HOST, Hooks, load, remember

FINAL = json.loads((FIXTURES / "claude-code" / "Stop.json").read_text())["last_assistant_message"]


def _events(hooks: Hooks, namespace: str) -> list[Any]:
    return list(reversed(hooks.runtime.storage.list_events(namespace=namespace, limit=100)))


def _post(hooks: Hooks, agent: str, name: str, project_dir: Path, **kw: Any):  # type: ignore[no-untyped-def]
    return hooks.post(agent, load(agent, name, project_dir), **kw)


def test_claude_code_session(hooks: Hooks, project_dir: Path, namespace: str) -> None:
    record = remember(hooks.runtime, namespace)
    start = _post(hooks, "claude-code", "SessionStart", project_dir)
    assert start.status_code == 200
    out = start.get_json()["hookSpecificOutput"]
    assert out["hookEventName"] == "SessionStart"
    assert record.title in out["additionalContext"]

    prompt = _post(hooks, "claude-code", "UserPromptSubmit", project_dir)
    assert prompt.status_code == 200
    out = prompt.get_json()["hookSpecificOutput"]
    assert out["hookEventName"] == "UserPromptSubmit"
    assert record.title in out["additionalContext"]
    assert len(out["additionalContext"]) <= 10_000

    for name in ("PostToolUseFailure", "PostToolUse.edit", "PostToolUse", "Stop", "SessionEnd"):
        res = _post(hooks, "claude-code", name, project_dir)
        assert (res.status_code, res.data) == (204, b""), name

    events = _events(hooks, namespace)
    assert [e.kind for e in events] == [
        "prompt", "tool_use", "tool_use", "tool_use", "session_summary"
    ]  # fmt: skip
    assert {e.session_id for e in events} == {"4f2b9c1e-7a3d-4e5f-9b8a-2c6d1e0f3a57"}
    assert {e.source.surface for e in events} == {"claude-code"}
    assert {e.source.project_path for e in events} == {str(project_dir.resolve())}
    assert events[0].body.content.startswith("tests/test_cart.py::test_apply_discount")
    failed = events[1].body.data
    assert (failed["tool_name"], failed["exit_code"], failed["is_error"]) == ("Bash", 1, True)
    assert failed["tool_response"]["error"].startswith("Exit code 1")
    assert events[2].body.data["tool_input"]["file_path"].endswith("shop/cart.py")
    assert events[3].body.data["exit_code"] == 0
    assert events[4].body.content == FINAL


def test_kiro_cli_session(hooks: Hooks, project_dir: Path, namespace: str) -> None:
    record = remember(hooks.runtime, namespace)
    spawn = _post(hooks, "kiro-cli", "agentSpawn", project_dir)
    assert record.title in spawn.get_json()["context"]
    prompt = _post(hooks, "kiro-cli", "userPromptSubmit", project_dir)
    assert set(prompt.get_json()) == {"context"}
    assert record.title in prompt.get_json()["context"]
    for name in ("preToolUse", "postToolUse", "postToolUse.fs_write", "stop"):
        assert _post(hooks, "kiro-cli", name, project_dir).status_code == 204, name
    events = _events(hooks, namespace)
    assert [e.kind for e in events] == ["prompt", "tool_use", "tool_use", "session_summary"]
    assert events[1].body.data["tool_name"] == "execute_bash"
    assert events[1].body.data["exit_code"] == 1
    assert events[2].body.data["tool_input"]["path"].endswith("shop/cart.py")
    assert events[3].body.content == ""  # Kiro's stop carries no answer; it closes the turn


def test_gemini_cli_session(hooks: Hooks, project_dir: Path, namespace: str) -> None:
    record = remember(hooks.runtime, namespace)
    start = _post(hooks, "gemini-cli", "SessionStart", project_dir).get_json()
    assert record.title in start["hookSpecificOutput"]["additionalContext"]
    prompt = _post(hooks, "gemini-cli", "BeforeAgent", project_dir).get_json()
    assert prompt["hookSpecificOutput"]["hookEventName"] == "BeforeAgent"
    assert record.title in prompt["hookSpecificOutput"]["additionalContext"]
    for name in ("AfterTool", "AfterTool.replace", "AfterAgent", "SessionEnd"):
        res = _post(hooks, "gemini-cli", name, project_dir)
        assert (res.status_code, res.get_json()) == (200, {}), name  # Gemini needs JSON
    events = _events(hooks, namespace)
    assert [e.kind for e in events] == ["prompt", "tool_use", "tool_use", "session_summary"]
    assert events[1].body.data["exit_code"] == 1
    assert "exit_code" not in events[2].body.data
    assert events[3].body.content == FINAL
    assert events[0].valid_time.isoformat().startswith("2025-11-03T10:15:02.101")


def test_codex_session_and_notify_store_the_turn_once(
    hooks: Hooks, project_dir: Path, namespace: str
) -> None:
    record = remember(hooks.runtime, namespace)
    prompt = _post(hooks, "codex", "UserPromptSubmit", project_dir).get_json()
    assert record.title in prompt["hookSpecificOutput"]["additionalContext"]
    for name in ("PostToolUse", "PostToolUse.apply_patch", "Stop", "SessionEnd"):
        res = _post(hooks, "codex", name, project_dir)
        assert (res.status_code, res.data) == (204, b""), name  # Stop must print nothing
    assert _post(hooks, "codex", "notify.agent-turn-complete", project_dir).status_code == 204
    events = _events(hooks, namespace)
    assert [e.kind for e in events] == ["prompt", "tool_use", "tool_use", "session_summary"]
    assert events[1].body.data["exit_code"] == 1
    assert events[3].body.content == FINAL


def test_cursor_session(hooks: Hooks, project_dir: Path, namespace: str) -> None:
    prompt = _post(hooks, "cursor", "beforeSubmitPrompt", project_dir)
    assert prompt.get_json() == {"continue": True}
    for name in ("afterShellExecution", "afterFileEdit", "afterAgentResponse", "stop"):
        res = _post(hooks, "cursor", name, project_dir)
        assert (res.status_code, res.data) == (204, b""), name  # never a followup_message
    events = _events(hooks, namespace)  # namespace from workspace_roots: Cursor has no cwd
    assert [e.kind for e in events] == ["prompt", "tool_use", "tool_use", "session_summary"]
    assert {e.session_id for e in events} == {"5e8a2d17-c4b9-4f3e-8a61-0d2c7b9e4f58"}
    assert events[1].body.data["tool_input"] == {"command": "pytest -q"}
    assert events[3].body.content == FINAL


def test_cursor_session_start_gets_the_memory_index(
    sqlite_hooks: Hooks, project_dir: Path, namespace: str
) -> None:
    # Newer Cursor builds have sessionStart (no fixture: its shape is unconfirmed); the
    # common fields are those of every Cursor hook.
    record = remember(sqlite_hooks.runtime, namespace)
    payload = load("cursor", "beforeSubmitPrompt", project_dir)
    del payload["prompt"], payload["attachments"]
    payload["hook_event_name"] = "sessionStart"
    res = sqlite_hooks.post("cursor", payload)
    assert record.title in res.get_json()["additional_context"]
    assert _events(sqlite_hooks, namespace) == []


@pytest.mark.parametrize(
    ("agent", "name"),
    [
        ("claude-code", "PostToolUse"),
        ("claude-code", "UserPromptSubmit"),
        ("gemini-cli", "BeforeAgent"),
        ("codex", "PostToolUse"),
        ("cursor", "afterShellExecution"),
    ],
)
def test_a_redelivered_hook_is_stored_once(
    sqlite_hooks: Hooks, project_dir: Path, namespace: str, agent: str, name: str
) -> None:
    payload = load(agent, name, project_dir)
    if agent == "claude-code":
        payload["prompt_id"] = "p-1"  # newer Claude Code: prompts carry a stable id
    for _ in range(2):
        assert sqlite_hooks.post(agent, payload).status_code in (200, 204)
    assert len(_events(sqlite_hooks, namespace)) == 1


def test_repeated_kiro_tool_uses_stay_separate(
    sqlite_hooks: Hooks, project_dir: Path, namespace: str
) -> None:
    # No id and no timestamp in Kiro payloads: a second identical run is a real event.
    for _ in range(2):
        _post(sqlite_hooks, "kiro-cli", "postToolUse", project_dir)
    assert len(_events(sqlite_hooks, namespace)) == 2


def test_header_project_wins_over_cwd(
    sqlite_hooks: Hooks, project_dir: Path, namespace: str, tmp_path: Path
) -> None:
    payload = load("claude-code", "UserPromptSubmit", tmp_path / "elsewhere")
    sub = project_dir / "src"
    res = sqlite_hooks.post("claude-code", payload, **{"X-Wakemark-Project": str(sub)})
    assert res.status_code == 204
    assert len(_events(sqlite_hooks, namespace)) == 1


def test_a_project_path_the_server_cannot_see_is_the_root_as_given(
    sqlite_hooks: Hooks, tmp_path: Path
) -> None:
    # The API in a container does not see the host's folders: the header still decides.
    from wakemark.shared import project

    host_root = "/home/dev/projects/shop"
    payload = load("claude-code", "UserPromptSubmit", tmp_path / "elsewhere")
    res = sqlite_hooks.post("claude-code", payload, **{"X-Wakemark-Project": host_root})
    assert res.status_code == 204
    expected = project.namespace_for("alice", project.project_id(host_root))
    assert len(_events(sqlite_hooks, expected)) == 1


def test_no_project_marker_means_the_global_project(sqlite_hooks: Hooks, tmp_path: Path) -> None:
    bare = tmp_path / "bare"
    bare.mkdir()
    _post(sqlite_hooks, "claude-code", "UserPromptSubmit", bare)
    assert len(_events(sqlite_hooks, "/actor/alice/project/global/")) == 1


def test_private_text_is_redacted(sqlite_hooks: Hooks, project_dir: Path, namespace: str) -> None:
    payload = load("claude-code", "UserPromptSubmit", project_dir)
    payload["prompt"] = "deploy with <private>hunter2</private> please"
    sqlite_hooks.post("claude-code", payload)
    [event] = _events(sqlite_hooks, namespace)
    assert event.body.content == "deploy with [REDACTED] please"


def test_huge_tool_output_is_clipped_under_the_body_limit(
    sqlite_hooks: Hooks, project_dir: Path, namespace: str
) -> None:
    payload = load("claude-code", "PostToolUse", project_dir)
    payload["tool_response"]["stdout"] = "line\n" * 300_000  # 1.5 MB
    assert sqlite_hooks.post("claude-code", payload).status_code == 204
    [event] = _events(sqlite_hooks, namespace)
    stdout = event.body.data["tool_response"]["stdout"]
    assert "characters truncated" in stdout
    assert len(event.body_json().encode()) < 1024 * 1024


def test_unknown_agent_is_404(sqlite_hooks: Hooks) -> None:
    res = sqlite_hooks.post("vim", {"hook_event_name": "x"})
    assert (res.status_code, res.get_json()["error"]) == (404, "unknown_agent")


def _misses() -> dict[str, float]:
    """wakemark_hook_capture_misses_total's series, as the /metrics scrape shows them."""
    series = {}
    for line in CAPTURE_MISSES.lines():
        if not line.startswith("#"):
            name, _, value = line.rpartition(" ")
            series[name] = float(value)
    return series


@pytest.mark.parametrize(
    ("agent", "payload", "status", "miss"),
    [
        ("claude-code", {"hook_event_name": "Notification", "session_id": "s"}, 204, None),
        ("claude-code", {"hook_event_name": "UserPromptSubmit", "prompt": "hi"}, 204,
         "payload has no session id (looked for session_id)"),
        ("claude-code", {"hook_event_name": "UserPromptSubmit", "session_id": "s"}, 204,
         "payload field 'prompt' must be a non-empty string"),
        ("claude-code", {"hook_event_name": "PostToolUse", "session_id": "s"}, 204,
         "payload field 'tool_name' must be a non-empty string"),
        ("gemini-cli", {"hook_event_name": "BeforeModel", "session_id": "s"}, 200, None),
        ("codex", {"hook_event_name": "Stop", "session_id": 7}, 204,
         "payload has no session id (looked for session_id)"),
        ("cursor", {"hook_event_name": "afterFileEdit", "conversation_id": "c"}, 204,
         "payload field 'file_path' must be a non-empty string"),
        ("kiro-cli", ["not", "an", "object"], 422, None),
        ("claude-code", b"{not json", 400, None),
        ("claude-code", {}, 204, None),
    ],
)  # fmt: skip
def test_odd_payloads_are_answered_in_the_agents_format_never_a_500(
    sqlite_hooks: Hooks, agent: str, payload: Any, status: int, miss: str | None
) -> None:
    """A payload an agent could send is answered 2xx (unmappable: a capture miss with its
    reason); only a body that is no JSON object at all gets a 4xx."""
    before = _misses()
    res = sqlite_hooks.post(agent, payload)
    assert res.status_code == status, res.data
    if status >= 400:
        assert res.get_json()["message"]
    assert sqlite_hooks.runtime.storage.list_events(limit=5) == []
    grown = {k: v - before.get(k, 0) for k, v in _misses().items() if v != before.get(k, 0)}
    key = f'wakemark_hook_capture_misses_total{{agent="{agent}",reason="{miss}"}}'
    assert grown == ({key: 1} if miss else {})


def test_a_deferred_delivery_past_the_batch_limit_stores_the_first_ones(
    hooks: Hooks, project_dir: Path, namespace: str
) -> None:
    # Each delivery costs a project lookup and an event: a body of a few hundred thousand
    # empty ones held a worker for a minute. The limit is POST /v1/events' own.
    before = _misses()
    uses = [
        {"cwd": str(project_dir), "tool_name": "execute_bash", "tool_input": {"command": f"ls {i}"}}
        for i in range(MAX_BATCH + 3)
    ]
    payload = {"hook_event_name": "postToolUse", "session_id": "s", "hook_events": uses}
    res = hooks.post("kiro-cli", payload)
    assert (res.status_code, res.data) == (204, b"")
    stored = hooks.runtime.storage.list_events(namespace=namespace, limit=MAX_BATCH + 3)
    commands = {e.body.data["tool_input"]["command"] for e in stored}
    assert commands == {f"ls {i}" for i in range(MAX_BATCH)}
    grown = {k: v - before.get(k, 0) for k, v in _misses().items() if v != before.get(k, 0)}
    reason = f"more than {MAX_BATCH} deliveries in one payload"
    assert grown == {f'wakemark_hook_capture_misses_total{{agent="kiro-cli",reason="{reason}"}}': 3}


def test_capture_misses_are_on_the_metrics_scrape(sqlite_hooks: Hooks) -> None:
    sqlite_hooks.post("codex", {"hook_event_name": "Stop", "session_id": 7})
    scrape = sqlite_hooks.client.get(
        "/metrics", headers={"Authorization": f"Bearer {sqlite_hooks.token}", "Host": HOST}
    )
    assert scrape.status_code == 200
    assert 'wakemark_hook_capture_misses_total{agent="codex",reason="payload has no session id' in (
        scrape.get_data(as_text=True)
    )


# Every stored fixture, as its agent delivers it (the event on the forwarder's command line
# for the shapes that do not name it): mapped without a miss, answered 2xx.
REPLAYS = sorted((p.parent.name, p.stem) for p in FIXTURES.glob("*/*.json"))


@pytest.mark.parametrize(("agent", "name"), REPLAYS, ids=[f"{a}/{n}" for a, n in REPLAYS])
def test_every_fixture_is_accepted(
    sqlite_hooks: Hooks, project_dir: Path, agent: str, name: str
) -> None:
    before = _misses()
    res = sqlite_hooks.post(
        agent, load(agent, name, project_dir), event=name.split(".")[0],
        **{"X-Wakemark-Project": str(project_dir)},
    )  # fmt: skip
    assert res.status_code in (200, 204), res.data
    assert _misses() == before


def test_kiro_deferred_delivery_stores_each_tool_use_in_its_own_project(
    hooks: Hooks, tmp_path: Path, project_dir: Path, namespace: str
) -> None:
    other = tmp_path / "web"
    (other / ".git").mkdir(parents=True)
    payload = load("kiro-cli", "postToolUse.deferred")
    payload["hook_events"][0]["cwd"] = str(project_dir / "src")
    payload["hook_events"][1]["cwd"] = str(other)
    payload["hook_events"][2]["cwd"] = str(project_dir)
    res = hooks.post("kiro-cli", payload)
    assert (res.status_code, res.data) == (204, b"")
    mine = _events(hooks, namespace)
    assert sorted(e.body.data["exit_code"] for e in mine) == [0, 1]
    assert {e.source.project_path for e in mine} == {str(project_dir)}
    [edit] = _events(hooks, project.namespace_for(ACTOR, project.project_id(str(other))))
    assert edit.body.data["tool_name"] == "fs_write"
    assert edit.source.project_path == str(other)
    assert {e.session_id for e in [*mine, edit]} == {payload["session_id"]}


def test_codex_notify_without_thread_or_cwd_records_the_turn_once(
    hooks: Hooks, project_dir: Path, namespace: str
) -> None:
    payload = load("codex", "notify.agent-turn-complete.legacy")
    header = {"X-Wakemark-Project": str(project_dir)}
    for _ in range(2):  # a redelivery of the same turn adds nothing
        assert hooks.post("codex", payload, event="notify", **header).status_code == 204
    events = {e.kind: e for e in _events(hooks, namespace)}
    assert len(_events(hooks, namespace)) == 2
    assert events["session_summary"].body.content == FINAL
    assert "test_apply_discount" in events["prompt"].body.content
    pid = namespace.rstrip("/").rsplit("/", 1)[-1]
    assert {e.session_id for e in events.values()} == {f"codex:{pid}"}
    # The next turn of that Codex lands in the same session.
    later = {**payload, "turn-id": "4", "input-messages": ["and the docs?"]}
    assert hooks.post("codex", later, event="notify", **header).status_code == 204
    assert {e.session_id for e in _events(hooks, namespace)} == {f"codex:{pid}"}


def test_cursor_documented_shell_payload_uses_the_forwarders_context(
    hooks: Hooks, project_dir: Path, namespace: str
) -> None:
    payload = load("cursor", "afterShellExecution.documented")
    assert set(payload) == {"command", "output", "duration", "sandbox"}
    res = hooks.post("cursor", payload, event="afterShellExecution",
                     **{"X-Wakemark-Project": str(project_dir)})  # fmt: skip
    assert (res.status_code, res.data) == (204, b"")
    [event] = _events(hooks, namespace)
    assert event.kind == "tool_use"
    assert event.body.data["tool_input"] == {"command": "pytest -q"}
    assert "1 failed" in event.body.data["tool_response"]["output"]
    pid = namespace.rstrip("/").rsplit("/", 1)[-1]
    assert event.session_id == f"cursor:{pid}"


def test_hooks_need_the_token(sqlite_hooks: Hooks, project_dir: Path) -> None:
    payload = load("claude-code", "UserPromptSubmit", project_dir)
    res = sqlite_hooks.post("claude-code", payload, Authorization="Bearer ")
    assert res.status_code == 401

"""Credentials in events and records posted to the API never reach storage (both backends)."""

from __future__ import annotations

from typing import Any

from tests.api.conftest import NS, Api, make_event
from tests.test_secrets import CREDENTIALS


def test_credentials_in_prompts_tool_outputs_and_answers_are_never_stored(
    api: Api, runtime: Any
) -> None:
    lines = [line for _, _, line in CREDENTIALS]
    events = [
        make_event("prompt", session_id="s-sec", body={"type": "text", "content": lines[0]}),
        make_event(
            "tool_use",
            session_id="s-sec",
            body={
                "type": "json",
                "data": {
                    "tool": "Bash",
                    "input": {"command": lines[1]},
                    "output": "\n".join(lines[2:9]),
                },
            },
        ),
        make_event(
            "session_summary",
            session_id="s-sec",
            body={
                "type": "message",
                "turns": [
                    {"role": "user", "content": lines[9]},
                    {"role": "assistant", "content": "\n".join(lines[10:])},
                ],
            },
        ),
    ]
    res = api.post("/v1/events", json={"events": events})
    assert res.status_code == 201, res.get_data(as_text=True)
    memory = {"namespace": NS, "title": "deploy keys", "summary": lines[3], "facts": [lines[4]]}
    res = api.post("/v1/memories", json=memory)
    assert res.status_code == 201, res.get_data(as_text=True)
    stored = [runtime.storage.get_event(e["event_id"]) for e in events]
    text = "".join(e.body_json() for e in stored)
    record = runtime.storage.get_memory_record(res.get_json()["record_id"])
    text += record.model_dump_json()
    for _, secret, _ in CREDENTIALS:
        probe = secret if "PRIVATE KEY" not in secret else secret.splitlines()[1][:40]
        assert probe not in text
    assert text.count("[REDACTED:") >= len(CREDENTIALS)
    assert "[REDACTED:private-key]" in text and "[REDACTED:slack-token]" in text


# --- secrets as JSON values: MCP tool inputs through the hook route --------------------


def _tool_use(tool: str, tool_input: dict[str, Any], n: int) -> dict[str, Any]:
    """Claude Code's PostToolUse for an MCP tool (tests/fixtures/hooks/claude-code)."""
    return {
        "session_id": "s-mcp",
        "cwd": "/home/dev/projects/shop",
        "hook_event_name": "PostToolUse",
        "tool_name": tool,
        "tool_input": tool_input,
        "tool_response": [{"type": "text", "text": "ok"}],
        "tool_use_id": f"toolu_0{n}",
    }


def test_secret_json_values_of_mcp_tool_inputs_reach_no_event_index_or_export(
    api: Api, runtime: Any
) -> None:
    from tests.test_secrets import rnd
    from wakemark.shared.jobs.tasks import extract_turns

    password, api_key, bearer, db_pw = rnd(9) + "!q", rnd(24), rnd(32), "hunter2"
    calls = [
        # Playwright MCP's browser_fill_form: the form's fields as name/value pairs.
        ("mcp__playwright__browser_fill_form", {"fields": [
            {"name": "Email", "type": "textbox", "ref": "e12", "value": "dev@shop.test"},
            {"name": "Password", "type": "textbox", "ref": "e14", "value": password},
        ]}),
        # A fetch server's request headers.
        ("mcp__fetch__fetch_json", {"url": "https://api.shop.test/v2/orders",
                                    "headers": {"X-Api-Key": api_key,
                                                "Authorization": f"Bearer {bearer}"}}),
        # A database server's connection arguments, and the placeholders that stay.
        ("mcp__mysql__connect", {"host": "db.shop.test", "user": "shop",
                                 "password": db_pw, "apiKey": "${SHOP_API_KEY}",
                                 "max_tokens": "4096"}),
    ]  # fmt: skip
    headers = {"X-Wakemark-Project": "/home/dev/projects/shop"}
    prompt = {"session_id": "s-mcp", "cwd": "/home/dev/projects/shop",
              "hook_event_name": "UserPromptSubmit", "prompt": "log in to staging"}  # fmt: skip
    assert api.post("/v1/hooks/claude-code", json=prompt, headers=headers).status_code < 300
    for n, (tool, tool_input) in enumerate(calls):
        res = api.post(
            "/v1/hooks/claude-code", json=_tool_use(tool, tool_input, n), headers=headers
        )
        assert res.status_code < 300, res.get_data(as_text=True)
    stop = {"session_id": "s-mcp", "cwd": "/home/dev/projects/shop", "hook_event_name": "Stop",
            "last_assistant_message": "Logged in to staging and fetched the orders."}  # fmt: skip
    assert api.post("/v1/hooks/claude-code", json=stop, headers=headers).status_code < 300
    extract_turns(runtime, runtime.storage.pending_turns())

    events = runtime.storage.list_events(session_id="s-mcp", limit=100)
    stored = "".join(e.body_json() for e in events)
    assert len(events) == 5 and stored.count("[REDACTED:secret-assignment]") == 4
    assert "${SHOP_API_KEY}" in stored and '"4096"' in stored and "dev@shop.test" in stored
    exported = api.get("/v1/export?events=true").get_data(as_text=True)
    assert "[REDACTED:secret-assignment]" in exported
    for secret in (password, api_key, bearer, db_pw):
        assert secret not in stored and secret not in exported
        hits = api.get(f"/v1/search?q={secret}&namespace={events[0].namespace}").json
        assert not hits.get("items") and not hits.get("results"), hits

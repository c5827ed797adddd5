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

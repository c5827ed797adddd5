"""Kiro CLI (v2 agent hooks, and v3's PascalCase trigger names): `wakemark hook kiro-cli`."""

from __future__ import annotations

from typing import Any

from wakemark.services.api.adapters.base import (
    IGNORE,
    OBSERVE,
    PROMPT,
    SESSION_START,
    HookContext,
    Mapped,
    json_body,
    make_event,
    text_body,
    text_field,
    tool_data,
)

NAME = "kiro-cli"
# Newer Kiro docs show tool aliases; store the canonical built-in names.
_TOOL_ALIASES = {"read": "fs_read", "write": "fs_write", "shell": "execute_bash", "aws": "use_aws"}
_V3_NAMES = {
    "SessionStart": "agentSpawn",
    "UserPromptSubmit": "userPromptSubmit",
    "PostToolUse": "postToolUse",
    "Stop": "stop",
}


def map_payload(payload: dict[str, Any], ctx: HookContext) -> Mapped:
    hook = str(payload.get("hook_event_name") or ctx.hook_hint or "")
    name = _V3_NAMES.get(hook, hook)
    if name == "agentSpawn":
        return Mapped(hook, SESSION_START)
    if name not in ("userPromptSubmit", "postToolUse", "stop"):
        return Mapped(hook, IGNORE)
    session = _session(payload, ctx)
    if name == "userPromptSubmit":
        body = text_body(text_field(payload, "prompt") or "")
        return Mapped(hook, PROMPT, [make_event(ctx, session_id=session, kind="prompt", body=body)])
    if name == "stop":
        # Kiro's stop carries no assistant text; an empty summary still closes the turn so
        # extraction starts now rather than after the idle timeout.
        event = make_event(ctx, session_id=session, kind="session_summary", body=text_body(""))
        return Mapped(hook, OBSERVE, [event])
    tool = text_field(payload, "tool_name") or ""
    response = payload.get("tool_response")
    data = tool_data(
        _TOOL_ALIASES.get(tool, tool),
        payload.get("tool_input"),
        response,
        exit_code=_exit_status(response),
    )
    event = make_event(ctx, session_id=session, kind="tool_use", body=json_body(data))
    return Mapped(hook, OBSERVE, [event])


def _session(payload: dict[str, Any], ctx: HookContext) -> str:
    # Older Kiro builds send no session_id: fall back to one session per project.
    value = payload.get("session_id")
    if isinstance(value, str) and value.strip():
        return value.strip()[:200]
    return "kiro-cli:" + ctx.namespace.rstrip("/").rsplit("/", 1)[-1]


def _exit_status(response: Any) -> int | None:
    # execute_bash reports {"result": [{"exit_status": "1", ...}]}, the status a string.
    if not isinstance(response, dict):
        return None
    for item in response.get("result") or []:
        if isinstance(item, dict) and "exit_status" in item:
            try:
                return int(item["exit_status"])
            except (TypeError, ValueError):
                return None
    return None


def reply(mapped: Mapped, context: str) -> dict[str, Any] | None:
    # Kiro reads plain stdout: the forwarder prints ``context`` as text.
    if mapped.intent in (PROMPT, SESSION_START) and context:
        return {"context": context}
    return None

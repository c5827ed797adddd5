"""Codex CLI hooks (`wakemark hook codex`) and its `notify` program's turn report."""

from __future__ import annotations

import re
from typing import Any

from wakemark.services.api.adapters.base import (
    IGNORE,
    OBSERVE,
    PROMPT,
    SESSION_START,
    HookContext,
    Mapped,
    context_reply,
    json_body,
    make_event,
    session_of,
    text_body,
    text_field,
    tool_data,
)

NAME = "codex"
_EXIT_CODE = re.compile(r"^Exit code: (\d+)", re.MULTILINE)


def map_payload(payload: dict[str, Any], ctx: HookContext) -> Mapped:
    if payload.get("type") == "agent-turn-complete":
        return _notify(payload, ctx)
    hook = str(payload.get("hook_event_name") or ctx.hook_hint or "")
    if hook == "SessionStart":
        return Mapped(hook, SESSION_START)
    if hook not in ("UserPromptSubmit", "PostToolUse", "Stop"):
        return Mapped(hook, IGNORE)
    session = session_of(payload, "session_id")
    turn = payload.get("turn_id")
    model = payload.get("model")
    if hook == "UserPromptSubmit":
        body = text_body(text_field(payload, "prompt") or "")
        event = make_event(
            ctx, session_id=session, kind="prompt", body=body, stable_ids=(turn,), version=model
        )
        return Mapped(hook, PROMPT, [event])
    if hook == "Stop":
        answer = payload.get("last_assistant_message")
        return Mapped(hook, OBSERVE, _summary(ctx, session, turn, answer))
    response = payload.get("tool_response")
    match = _EXIT_CODE.search(response) if isinstance(response, str) else None
    data = tool_data(
        text_field(payload, "tool_name"),
        payload.get("tool_input"),
        response,
        exit_code=int(match.group(1)) if match else None,
    )
    event = make_event(
        ctx,
        session_id=session,
        kind="tool_use",
        body=json_body(data),
        stable_ids=(payload.get("tool_use_id"),),
        version=model,
    )
    return Mapped(hook, OBSERVE, [event])


def _summary(ctx: HookContext, session: str, turn: Any, answer: Any) -> list[Any]:
    # Keyed on the turn id alone plus the text, so the Stop hook and `notify` reporting
    # the same turn store one event.
    if not isinstance(answer, str) or not answer.strip():
        return []
    body = text_body(answer)
    return [
        make_event(ctx, session_id=session, kind="session_summary", body=body, stable_ids=(turn,))
    ]


def _notify(payload: dict[str, Any], ctx: HookContext) -> Mapped:
    session = session_of(payload, "thread-id")
    turn = payload.get("turn-id")
    events = []
    messages = [m for m in payload.get("input-messages") or [] if isinstance(m, str) and m]
    if messages:
        # Same id as the UserPromptSubmit hook's event for a one-message turn.
        body = text_body("\n\n".join(messages))
        events.append(
            make_event(ctx, session_id=session, kind="prompt", body=body, stable_ids=(turn,))
        )
    events += _summary(ctx, session, turn, payload.get("last-assistant-message"))
    return Mapped("agent-turn-complete", OBSERVE, events)


def reply(mapped: Mapped, context: str) -> dict[str, Any] | None:
    if mapped.intent in (PROMPT, SESSION_START) and context:
        return context_reply(mapped.hook, context)
    return None  # Codex's Stop treats any plain stdout as invalid: print nothing

"""Claude Code hooks: HTTP hooks post here directly; SessionStart comes via `wakemark hook`."""

from __future__ import annotations

import json
import os
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
from wakemark.shared.privacy import scrub_text

NAME = "claude-code"
TRANSCRIPT_TAIL_BYTES = 512 * 1024
_EXIT_CODE = re.compile(r"^Exit code (\d+)")


def map_payload(payload: dict[str, Any], ctx: HookContext) -> Mapped:
    hook = str(payload.get("hook_event_name") or ctx.hook_hint or "")
    if hook == "SessionStart":
        return Mapped(hook, SESSION_START)
    if hook not in ("UserPromptSubmit", "PostToolUse", "PostToolUseFailure", "Stop"):
        return Mapped(hook, IGNORE)
    session = session_of(payload, "session_id")
    prompt_id = payload.get("prompt_id")
    if hook == "UserPromptSubmit":
        body = text_body(text_field(payload, "prompt") or "")
        event = make_event(
            ctx, session_id=session, kind="prompt", body=body, stable_ids=(prompt_id,)
        )
        return Mapped(hook, PROMPT, [event])
    if hook == "Stop":
        answer = text_field(payload, "last_assistant_message", required=False)
        if answer is None:
            # Read server-side after the payload scrub, so scrub this text too.
            answer = scrub_text(last_assistant_text(payload.get("transcript_path")) or "")
        if not answer:
            return Mapped(hook, OBSERVE)  # nothing to summarise (e.g. tool-only turn)
        body = text_body(answer)
        event = make_event(
            ctx, session_id=session, kind="session_summary", body=body, stable_ids=(prompt_id,)
        )
        return Mapped(hook, OBSERVE, [event])
    return Mapped(hook, OBSERVE, [_tool_event(hook, payload, ctx, session)])


def _tool_event(hook: str, payload: dict[str, Any], ctx: HookContext, session: str) -> Any:
    tool_name = text_field(payload, "tool_name")
    if hook == "PostToolUseFailure":
        error = payload.get("error")
        error_text = error if isinstance(error, str) else json.dumps(error)
        match = _EXIT_CODE.match(error_text or "")
        data = tool_data(
            tool_name,
            payload.get("tool_input"),
            {"error": error_text},
            exit_code=int(match.group(1)) if match else None,
            is_error=True,
            is_interrupt=payload.get("is_interrupt") or None,
        )
    else:
        # PostToolUse fires only on success, so a Bash command here exited 0.
        data = tool_data(
            tool_name,
            payload.get("tool_input"),
            payload.get("tool_response"),
            exit_code=0 if tool_name == "Bash" else None,
        )
    return make_event(
        ctx,
        session_id=session,
        kind="tool_use",
        body=json_body(data),
        stable_ids=(payload.get("tool_use_id"),),
    )


def last_assistant_text(path: Any) -> str | None:
    """The last main-thread assistant text in a transcript, reading only its tail.

    Used only when Stop lacks ``last_assistant_message`` (older Claude Code). A response
    is split over several lines sharing ``message.id``; the text blocks of the last such
    message are joined.
    """
    if not isinstance(path, str) or not path.endswith(".jsonl"):
        return None
    try:
        with open(path, "rb") as fh:
            size = os.fstat(fh.fileno()).st_size
            fh.seek(max(0, size - TRANSCRIPT_TAIL_BYTES))
            tail = fh.read(TRANSCRIPT_TAIL_BYTES)
    except OSError:
        return None
    last_id: str | None = None
    texts: list[str] = []
    for line in tail.decode("utf-8", "replace").splitlines():
        message = _assistant_message(line)
        if message is None:
            continue
        chunks = [
            block["text"]
            for block in message.get("content") or []
            if isinstance(block, dict) and block.get("type") == "text" and block.get("text")
        ]
        if not chunks:
            continue
        if message.get("id") != last_id:
            last_id, texts = message.get("id"), []
        texts.extend(chunks)
    return "\n".join(texts) or None


def _assistant_message(line: str) -> dict[str, Any] | None:
    if '"assistant"' not in line:
        return None
    try:
        row = json.loads(line)
    except ValueError:
        return None  # the first line of a tail read is usually cut mid-way
    if not isinstance(row, dict) or row.get("type") != "assistant" or row.get("isSidechain"):
        return None
    message = row.get("message")
    return message if isinstance(message, dict) else None


def reply(mapped: Mapped, context: str) -> dict[str, Any] | None:
    if mapped.intent in (PROMPT, SESSION_START) and context:
        return context_reply(mapped.hook, context)
    return None  # 2xx with an empty body: "success, nothing to add"

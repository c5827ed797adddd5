"""Claude Code: HTTP hooks post to the API directly; SessionStart comes via `wakemark hook`."""

from __future__ import annotations

import json
import os
import re
from typing import Any, BinaryIO

from wakemark.services.agents import base, configs, legacy
from wakemark.shared.privacy import scrub_text

TRANSCRIPT_TAIL_BYTES = 512 * 1024
_EXIT_CODE = re.compile(r"^Exit code (\d+)")


class ClaudeCode(base.Agent):
    name = "claude-code"
    install_note = "Restart Claude Code; `/hooks` lists the wakemark hooks."

    def map_payload(self, payload: dict[str, Any], ctx: base.HookContext) -> base.Mapped:
        hook = str(payload.get("hook_event_name") or ctx.hook_hint or "")
        if hook == "SessionStart":
            return base.Mapped(hook, base.SESSION_START)
        if hook not in ("UserPromptSubmit", "PostToolUse", "PostToolUseFailure", "Stop"):
            return base.Mapped(hook, base.IGNORE)
        session = base.session_of(payload, "session_id")
        prompt_id = payload.get("prompt_id")
        if hook == "UserPromptSubmit":
            body = base.text_body(base.text_field(payload, "prompt") or "")
            event = base.make_event(
                ctx, session_id=session, kind="prompt", body=body, stable_ids=(prompt_id,)
            )
            return base.Mapped(hook, base.PROMPT, [event])
        if hook == "Stop":
            answer = base.text_field(payload, "last_assistant_message", required=False)
            if answer is None:
                # Read server-side after the payload scrub, so scrub this text too.
                answer = scrub_text(_transcript_answer(payload.get("transcript_path"), ctx) or "")
            # No answer (a tool-only turn, a transcript the server may not read): the Stop
            # still closes the turn, so extraction starts now, not after the idle timeout.
            body = base.text_body(answer)
            event = base.make_event(
                ctx, session_id=session, kind="session_summary", body=body, stable_ids=(prompt_id,)
            )
            return base.Mapped(hook, base.OBSERVE, [event])
        return base.Mapped(hook, base.OBSERVE, [_tool_event(hook, payload, ctx, session)])

    def reply(self, mapped: base.Mapped, context: str) -> dict[str, Any] | None:
        if context:
            return base.context_reply(mapped.hook, context)
        return None  # 2xx with an empty body: "success, nothing to add"

    def install_targets(self, w: configs.Where) -> list[tuple[str, configs.Edit]]:
        base = os.path.join(w.project or w.home, ".claude")
        # Per project: settings.local.json, which Claude Code git-ignores (it holds the token).
        settings_path = os.path.join(base, "settings.local.json" if w.project else "settings.json")
        http = {
            "type": "http",
            "url": f"http://127.0.0.1:{w.port}/v1/hooks/{self.name}",
            "headers": {
                "Authorization": "Bearer $WAKEMARK_TOKEN",
                "X-Wakemark-Project": "$CLAUDE_PROJECT_DIR",
            },
            "allowedEnvVars": ["WAKEMARK_TOKEN", "CLAUDE_PROJECT_DIR"],
            "timeout": 5,
        }
        # SessionStart runs only command hooks; the forwarder prints the JSON reply.
        start = {"type": "command", "command": configs.hook_command(w, self.name, "SessionStart")}
        groups: dict[str, dict[str, Any]] = {
            "SessionStart": {"hooks": [{**start, "timeout": 10}]},
            "UserPromptSubmit": {"hooks": [http]},
            "PostToolUse": {"matcher": "*", "hooks": [http]},
            "PostToolUseFailure": {"matcher": "*", "hooks": [http]},
            "Stop": {"hooks": [http]},
        }

        def settings(s: dict[str, Any], install: bool) -> None:
            configs.grouped_hooks(s, groups if install else {})
            env = s.setdefault("env", {})
            # Claude Code exports `env` to the session, which is what makes $WAKEMARK_TOKEN
            # interpolate into the HTTP hooks' header; only our own value is ever removed.
            if env.get("WAKEMARK_TOKEN") == w.token or install:
                env.pop("WAKEMARK_TOKEN", None)
            if install and w.token:
                env["WAKEMARK_TOKEN"] = w.token
            # The old token only ever fed the old hooks' header: dead once none refers to it.
            if legacy.TOKEN_ENV not in json.dumps(s.get("hooks")):
                env.pop(legacy.TOKEN_ENV, None)
            if not env:
                del s["env"]

        mcp_path = (
            os.path.join(w.project, ".mcp.json")
            if w.project
            else os.path.join(w.home, ".claude.json")
        )
        server = {"type": "stdio", **configs.mcp_server(w)}

        def mcp(s: dict[str, Any], install: bool) -> None:
            configs.mcp_servers(s, server if install else None)

        return [(settings_path, configs.json_edit(settings)), (mcp_path, configs.json_edit(mcp))]


def _tool_event(hook: str, payload: dict[str, Any], ctx: base.HookContext, session: str) -> Any:
    tool_name = base.text_field(payload, "tool_name")
    if hook == "PostToolUseFailure":
        error = payload.get("error")
        error_text = error if isinstance(error, str) else json.dumps(error)
        match = _EXIT_CODE.match(error_text or "")
        data = base.tool_data(
            tool_name,
            payload.get("tool_input"),
            {"error": error_text},
            exit_code=int(match.group(1)) if match else None,
            is_error=True,
            is_interrupt=payload.get("is_interrupt") or None,
        )
    else:
        # PostToolUse fires only on success, so a Bash command here exited 0.
        data = base.tool_data(
            tool_name,
            payload.get("tool_input"),
            payload.get("tool_response"),
            exit_code=0 if tool_name == "Bash" else None,
        )
    return base.make_event(
        ctx,
        session_id=session,
        kind="tool_use",
        body=base.json_body(data),
        stable_ids=(payload.get("tool_use_id"),),
    )


def _transcript_answer(path: Any, ctx: base.HookContext) -> str | None:
    """The last assistant text of the transcript at ``path``, if the server may read it.

    Used only when Stop lacks ``last_assistant_message`` (older Claude Code).
    """
    if not isinstance(path, str) or not path.endswith(".jsonl"):
        return None
    fh = ctx.open_client_file(path)
    if fh is None:
        return None
    with fh:
        return last_assistant_text(fh)


def last_assistant_text(fh: BinaryIO) -> str | None:
    """The last main-thread assistant text in a transcript, reading only its tail.

    A response is split over several lines sharing ``message.id``; the text blocks of the
    last such message are joined.
    """
    try:
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

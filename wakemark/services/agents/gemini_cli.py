"""Gemini CLI hooks (`wakemark hook gemini-cli`); stdout must always be one JSON object."""

from __future__ import annotations

import os
import re
from typing import Any

from wakemark.services.agents import base, configs

_EXIT_CODE = re.compile(r"Exit Code: (\d+)")


class GeminiCli(base.Agent):
    name = "gemini-cli"
    failsafe = "{}"  # Gemini CLI parses stdout as JSON
    install_note = "Restart Gemini CLI; `/hooks` lists the wakemark hooks."

    def map_payload(self, payload: dict[str, Any], ctx: base.HookContext) -> base.Mapped:
        hook = str(payload.get("hook_event_name") or ctx.hook_hint or "")
        if hook == "SessionStart":
            return base.Mapped(hook, base.SESSION_START)
        if hook not in ("BeforeAgent", "AfterTool", "AfterAgent"):
            return base.Mapped(hook, base.IGNORE)
        session = base.session_of(payload, "session_id")
        when = base.payload_time(payload)
        if hook == "BeforeAgent":
            body = base.text_body(base.text_field(payload, "prompt") or "")
            event = base.make_event(ctx, session_id=session, kind="prompt", body=body, when=when)
            return base.Mapped(hook, base.PROMPT, [event])
        if hook == "AfterAgent":
            answer = base.text_field(payload, "prompt_response", required=False)
            if answer is None:
                return base.Mapped(hook, base.OBSERVE)
            body = base.text_body(answer)
            event = base.make_event(
                ctx, session_id=session, kind="session_summary", body=body, when=when
            )
            return base.Mapped(hook, base.OBSERVE, [event])
        tool = base.text_field(payload, "tool_name")
        response = payload.get("tool_response")
        exit_code = _exit_code(tool, response)
        data = base.tool_data(tool, payload.get("tool_input"), response, exit_code=exit_code)
        event = base.make_event(
            ctx, session_id=session, kind="tool_use", body=base.json_body(data), when=when
        )
        return base.Mapped(hook, base.OBSERVE, [event])

    def reply(self, mapped: base.Mapped, context: str) -> dict[str, Any] | None:
        if context:  # only hooks that `wants_context` get any
            return base.context_reply(mapped.hook, context)
        return {}  # Gemini parses stdout as JSON: "nothing to add" is an empty object

    def install_targets(self, w: configs.Where) -> list[tuple[str, configs.Edit]]:
        cmd = configs.hook_command(w, self.name)

        def handler(name: str, timeout: int = 5000) -> dict[str, Any]:
            return {
                "name": f"wakemark-{name}",
                "type": "command",
                "command": cmd,
                "timeout": timeout,
            }

        groups: dict[str, dict[str, Any]] = {
            "SessionStart": {
                "matcher": "startup|resume|clear",
                "hooks": [handler("session-start")],
            },
            "BeforeAgent": {"hooks": [handler("before-agent")]},
            "AfterTool": {"matcher": "*", "hooks": [handler("after-tool")]},
            "AfterAgent": {"hooks": [handler("after-agent")]},
        }
        server = configs.mcp_server(w)

        def apply(s: dict[str, Any], install: bool) -> None:
            configs.grouped_hooks(s, groups if install else {})
            configs.mcp_servers(s, server if install else None)

        path = os.path.join(w.project or w.home, ".gemini", "settings.json")
        return [(path, configs.json_edit(apply))]


def _exit_code(tool: str | None, response: Any) -> int | None:
    # The shell tool's llmContent layout changed across versions; "Exit Code: N" shows up
    # only for a non-zero exit in newer ones, so its absence means 0.
    if tool != "run_shell_command" or not isinstance(response, dict):
        return None
    content = response.get("llmContent")
    match = _EXIT_CODE.search(content) if isinstance(content, str) else None
    return int(match.group(1)) if match else 0

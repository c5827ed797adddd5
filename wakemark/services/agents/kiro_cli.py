"""Kiro CLI (v2 agent hooks, and v3's PascalCase trigger names): `wakemark hook kiro-cli`."""

from __future__ import annotations

import os
from typing import Any

from wakemark.services.agents import base, configs, legacy

# Newer Kiro docs show tool aliases; store the canonical built-in names.
_TOOL_ALIASES = {"read": "fs_read", "write": "fs_write", "shell": "execute_bash", "aws": "use_aws"}
_V3_NAMES = {
    "SessionStart": "agentSpawn",
    "UserPromptSubmit": "userPromptSubmit",
    "PostToolUse": "postToolUse",
    "Stop": "stop",
}


class KiroCli(base.Agent):
    name = "kiro-cli"
    install_note = (
        "Start it with `kiro-cli chat --agent wakemark` (or make `wakemark` the default)."
    )

    def deliveries(self, payload: dict[str, Any]) -> list[dict[str, Any]]:
        # Deferred delivery (``only_when_turn_complete``): one postToolUse whose
        # ``hook_events`` holds the turn's tool uses, each with its own cwd.
        batch = payload.get("hook_events")
        if not isinstance(batch, list) or "tool_name" in payload:
            return [payload]
        shared = {k: v for k, v in payload.items() if k != "hook_events"}
        return [{**shared, **item} for item in batch if isinstance(item, dict)]

    def map_payload(self, payload: dict[str, Any], ctx: base.HookContext) -> base.Mapped:
        hook = str(payload.get("hook_event_name") or ctx.hook_hint or "")
        name = _V3_NAMES.get(hook, hook)
        if name == "agentSpawn":
            return base.Mapped(hook, base.SESSION_START)
        if name not in ("userPromptSubmit", "postToolUse", "stop"):
            return base.Mapped(hook, base.IGNORE)
        session = _session(payload, ctx)
        if name == "userPromptSubmit":
            body = base.text_body(base.text_field(payload, "prompt") or "")
            return base.Mapped(
                hook,
                base.PROMPT,
                [base.make_event(ctx, session_id=session, kind="prompt", body=body)],
            )
        if name == "stop":
            # Kiro's stop carries no assistant text; an empty summary still closes the turn so
            # extraction starts now rather than after the idle timeout.
            event = base.make_event(
                ctx, session_id=session, kind="session_summary", body=base.text_body("")
            )
            return base.Mapped(hook, base.OBSERVE, [event])
        tool = base.text_field(payload, "tool_name") or ""
        response = payload.get("tool_response")
        data = base.tool_data(
            _TOOL_ALIASES.get(tool, tool),
            payload.get("tool_input"),
            response,
            exit_code=_exit_status(response),
        )
        event = base.make_event(ctx, session_id=session, kind="tool_use", body=base.json_body(data))
        return base.Mapped(hook, base.OBSERVE, [event])

    def reply(self, mapped: base.Mapped, context: str) -> dict[str, Any] | None:
        # Kiro reads plain stdout: the forwarder prints ``context`` as text.
        if context:  # only hooks that `wants_context` get any
            return {"context": context}
        return None

    def install_targets(self, w: configs.Where) -> list[tuple[str, configs.Edit]]:
        agents = os.path.join(w.project or w.home, ".kiro", "agents")
        cmd = configs.hook_command(w, self.name)
        handlers = {
            "agentSpawn": {"command": cmd, "timeout_ms": 5000},
            "userPromptSubmit": {"command": cmd, "timeout_ms": 5000},
            "postToolUse": {"matcher": "*", "command": cmd, "timeout_ms": 5000},
            "stop": {"command": cmd, "timeout_ms": 5000},
        }
        server = configs.mcp_server(w)

        def apply(s: dict[str, Any], install: bool) -> None:
            if install:
                s.setdefault("name", "wakemark")
                s.setdefault("description", "Default tools plus wakemark's persistent memory")
                s.setdefault("tools", ["*"])  # a missing list would mean "no tools at all"
            configs.flat_hooks(s, handlers if install else {})
            configs.mcp_servers(s, server if install else None)

        def edit(old: Any, install: bool) -> Any:
            return _agent_file(configs.json_edit(apply)(old, install), "wakemark", install)

        def old_agent(old: Any, install: bool) -> Any:
            # The pre-rename agent file: emptied of our entries, installing or not.
            if not old:
                return None
            return _agent_file(configs.json_edit(apply)(old, False), legacy.NAME, False)

        return [
            (os.path.join(agents, "wakemark.json"), edit),
            (os.path.join(agents, legacy.KIRO_AGENT_FILE), old_agent),
        ]


def _session(payload: dict[str, Any], ctx: base.HookContext) -> str:
    # Older Kiro builds send no session_id: fall back to one session per project.
    value = payload.get("session_id")
    if isinstance(value, str) and value.strip():
        return value.strip()[:200]
    return base.project_session(ctx)


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


def _agent_file(agent: dict[str, Any], name: str, install: bool) -> dict[str, Any] | None:
    # An agent file named after us is ours: once only our skeleton is left, remove it.
    skeleton = set(agent) <= {"name", "description", "tools"} and agent.get("name") == name
    return None if skeleton and not install else agent

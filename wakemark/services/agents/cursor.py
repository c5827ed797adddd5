"""Cursor hooks (`wakemark hook cursor`): observe the session; never gate or follow up."""

from __future__ import annotations

import os
from typing import Any

from wakemark.services.agents import base, configs
from wakemark.shared.models import Event

_SESSION_KEYS = ("conversation_id", "session_id")
_TOOL_HOOKS = ("afterShellExecution", "afterFileEdit", "afterMCPExecution")
# What `wakemark install cursor` registers; sessionStart is where the memory index goes.
HOOKS = (
    "sessionStart",
    "beforeSubmitPrompt",
    "afterShellExecution",
    "afterFileEdit",
    "afterAgentResponse",
)


class Cursor(base.Agent):
    name = "cursor"
    failsafe = '{"continue": true}'  # beforeSubmitPrompt gates the prompt on "continue"
    install_note = "Restart Cursor; hooks in a project apply to trusted workspaces only."

    def wants_context(self, mapped: base.Mapped) -> bool:
        return mapped.intent == base.SESSION_START  # beforeSubmitPrompt cannot take context

    def map_payload(self, payload: dict[str, Any], ctx: base.HookContext) -> base.Mapped:
        hook = str(payload.get("hook_event_name") or ctx.hook_hint or "")
        if hook == "sessionStart":
            return base.Mapped(hook, base.SESSION_START)
        if hook == "beforeSubmitPrompt":
            # Stored and answered with {"continue": true}: this hook gates the prompt.
            return base.Mapped(hook, base.PROMPT, [_text_event(payload, ctx, "prompt", "prompt")])
        if hook == "afterAgentResponse":
            return base.Mapped(
                hook, base.OBSERVE, [_text_event(payload, ctx, "session_summary", "text")]
            )
        if hook not in _TOOL_HOOKS:
            return base.Mapped(hook, base.IGNORE)
        session = _session(payload, ctx)
        event = base.make_event(
            ctx,
            session_id=session,
            kind="tool_use",
            body=base.json_body(_tool(hook, payload)),
            stable_ids=(payload.get("generation_id"),),
            version=payload.get("cursor_version"),
        )
        return base.Mapped(hook, base.OBSERVE, [event])

    def reply(self, mapped: base.Mapped, context: str) -> dict[str, Any] | None:
        if mapped.hook == "beforeSubmitPrompt":
            return {"continue": True}  # this Cursor version cannot inject prompt context
        if mapped.intent == base.SESSION_START and context:
            return {"additional_context": context}
        return None  # never `followup_message`: Cursor would submit it as a new prompt

    def install_targets(self, w: configs.Where) -> list[tuple[str, configs.Edit]]:
        base = os.path.join(w.project or w.home, ".cursor")
        # The event name on the command line: Cursor's documented payloads of some hooks
        # carry only their own fields, no hook_event_name.
        handlers = {
            event: {"command": configs.hook_command(w, self.name, event)} for event in HOOKS
        }
        server = configs.mcp_server(w)

        def hooks(s: dict[str, Any], install: bool) -> None:
            s.setdefault("version", 1)
            configs.flat_hooks(s, handlers if install else {})

        def mcp(s: dict[str, Any], install: bool) -> None:
            configs.mcp_servers(s, server if install else None)

        return [
            (os.path.join(base, "hooks.json"), configs.json_edit(hooks)),
            (os.path.join(base, "mcp.json"), configs.json_edit(mcp)),
        ]


def _tool(hook: str, payload: dict[str, Any]) -> dict[str, Any]:
    if hook == "afterShellExecution":
        # Cursor reports no exit code for shell commands.
        command = base.text_field(payload, "command")
        return base.tool_data("shell", {"command": command}, {"output": payload.get("output")})
    if hook == "afterFileEdit":
        path = base.text_field(payload, "file_path")
        return base.tool_data("edit", {"file_path": path, "edits": payload.get("edits")}, None)
    return base.tool_data(
        base.text_field(payload, "tool_name"), payload.get("tool_input"), payload.get("result_json")
    )


def _text_event(payload: dict[str, Any], ctx: base.HookContext, kind: str, field: str) -> Event:
    return base.make_event(
        ctx,
        session_id=_session(payload, ctx),
        kind=kind,
        body=base.text_body(base.text_field(payload, field) or ""),
        stable_ids=(payload.get("generation_id"),),
        version=payload.get("cursor_version"),
    )


def _session(payload: dict[str, Any], ctx: base.HookContext) -> str:
    # The documented afterShellExecution carries no conversation id: one session per
    # project, the project from the forwarder's header.
    if any(isinstance(payload.get(k), str) and payload[k].strip() for k in _SESSION_KEYS):
        return base.session_of(payload, *_SESSION_KEYS)
    return base.project_session(ctx)

"""Codex CLI hooks (`wakemark hook codex`) and its `notify` program's turn report."""

from __future__ import annotations

import contextlib
import json
import os
import re
import shlex
import tomllib
from typing import Any

from wakemark.services.agents import base, configs, legacy

# ``Exit code: N`` (the shell tool), ``Process exited with code N`` (unified exec).
_EXIT_CODE = re.compile(r"^(?:Exit code:|Process exited with code) (-?\d+)", re.MULTILINE)


def exit_code(response: Any) -> int | None:
    """The exit code in a tool's output: a line of its text, or the ``metadata`` of the
    JSON that apply_patch and the older shell tool return (``{"output", "metadata"}``)."""
    if isinstance(response, str) and response.startswith("{"):
        with contextlib.suppress(ValueError):
            response = json.loads(response)
    if isinstance(response, dict):
        meta = response.get("metadata")
        code = meta.get("exit_code") if isinstance(meta, dict) else None
        return code if isinstance(code, int) and not isinstance(code, bool) else None
    match = _EXIT_CODE.search(response) if isinstance(response, str) else None
    return int(match.group(1)) if match else None


BEGIN = "# >>> wakemark (managed by `wakemark install codex`) >>>"
END = "# <<< wakemark <<<"


class Codex(base.Agent):
    name = "codex"
    install_note = (
        "Open `/hooks` in Codex once and trust the wakemark hooks (Codex asks for review)."
    )

    def map_payload(self, payload: dict[str, Any], ctx: base.HookContext) -> base.Mapped:
        if payload.get("type") == "agent-turn-complete":
            return _notify(payload, ctx)
        hook = str(payload.get("hook_event_name") or ctx.hook_hint or "")
        if hook == "SessionStart":
            return base.Mapped(hook, base.SESSION_START)
        if hook not in ("UserPromptSubmit", "PostToolUse", "Stop"):
            return base.Mapped(hook, base.IGNORE)
        session = base.session_of(payload, "session_id")
        turn = payload.get("turn_id")
        model = payload.get("model")
        if hook == "UserPromptSubmit":
            body = base.text_body(base.text_field(payload, "prompt") or "")
            event = base.make_event(
                ctx, session_id=session, kind="prompt", body=body, stable_ids=(turn,), version=model
            )
            return base.Mapped(hook, base.PROMPT, [event])
        if hook == "Stop":
            answer = payload.get("last_assistant_message")
            return base.Mapped(hook, base.OBSERVE, _summary(ctx, session, turn, answer))
        response = payload.get("tool_response")
        data = base.tool_data(
            base.text_field(payload, "tool_name"),
            payload.get("tool_input"),
            response,
            exit_code=exit_code(response),
        )
        event = base.make_event(
            ctx,
            session_id=session,
            kind="tool_use",
            body=base.json_body(data),
            stable_ids=(payload.get("tool_use_id"),),
            version=model,
        )
        return base.Mapped(hook, base.OBSERVE, [event])

    def reply(self, mapped: base.Mapped, context: str) -> dict[str, Any] | None:
        if context:
            return base.context_reply(mapped.hook, context)
        return None  # Codex's Stop treats any plain stdout as invalid: print nothing

    def install_targets(self, w: configs.Where) -> list[tuple[str, configs.Edit]]:
        base = os.path.join(w.project or w.home, ".codex")
        cmd = configs.hook_command(w, self.name)
        handler = {"type": "command", "command": cmd, "timeout": 10}
        groups: dict[str, dict[str, Any]] = {
            "SessionStart": {"matcher": "startup|resume|clear|compact", "hooks": [handler]},
            "UserPromptSubmit": {"hooks": [handler]},
            "PostToolUse": {"matcher": "*", "hooks": [handler]},
            "Stop": {"hooks": [handler]},
        }

        def hooks(s: dict[str, Any], install: bool) -> None:
            configs.grouped_hooks(s, groups if install else {})

        def config(old: Any, install: bool) -> str:
            text = configs.strip_blocks(old or "", BEGIN, END)
            text = configs.strip_blocks(text, legacy.CODEX_BEGIN, legacy.CODEX_END)
            if not install:
                return text
            current = tomllib.loads(text)  # raises on a broken file: we never write over one
            if "wakemark" not in current.get("mcp_servers", {}):
                text = text.rstrip("\n") + ("\n\n" if text.strip() else "")
                text += _mcp_block(configs.mcp_server(w))
            if "notify" not in current:
                # Top-level key: must precede every table, so it goes first. Codex appends
                # the turn report as one JSON argument; the Stop hook reports the same turn
                # and the mapping stores it once (same turn id).
                argv = json.dumps(shlex.split(configs.hook_command(w, self.name, "notify")))
                text = f"{BEGIN}\nnotify = {argv}\n{END}\n" + text
            return text

        return [
            (os.path.join(base, "hooks.json"), configs.json_edit(hooks)),
            (os.path.join(base, "config.toml"), config),
        ]


def _mcp_block(server: dict[str, Any]) -> str:
    text = f"{BEGIN}\n[mcp_servers.wakemark]\ncommand = {json.dumps(server['command'])}\n"
    text += f"args = {json.dumps(server['args'])}\n"
    # JSON strings are valid TOML basic strings.
    for key, value in server.get("env", {}).items():
        text += f"env.{key} = {json.dumps(value)}\n"
    return text + f"{END}\n"


def _summary(ctx: base.HookContext, session: str, turn: Any, answer: Any) -> list[Any]:
    # Keyed on the turn id alone plus the text, so the Stop hook and `notify` reporting
    # the same turn store one event.
    if not isinstance(answer, str) or not answer.strip():
        return []
    body = base.text_body(answer)
    return [
        base.make_event(
            ctx, session_id=session, kind="session_summary", body=body, stable_ids=(turn,)
        )
    ]


def _notify(payload: dict[str, Any], ctx: base.HookContext) -> base.Mapped:
    # Older Codex sends neither thread-id nor cwd: the turn goes to one session per
    # project (the forwarder's project header), its id still keyed on the turn.
    thread = payload.get("thread-id")
    session = base.session_of(payload, "thread-id") if thread else base.project_session(ctx)
    turn = payload.get("turn-id")
    events = []
    messages = [m for m in payload.get("input-messages") or [] if isinstance(m, str) and m]
    if messages:
        # Same id as the UserPromptSubmit hook's event for a one-message turn.
        body = base.text_body("\n\n".join(messages))
        events.append(
            base.make_event(ctx, session_id=session, kind="prompt", body=body, stable_ids=(turn,))
        )
    events += _summary(ctx, session, turn, payload.get("last-assistant-message"))
    return base.Mapped("agent-turn-complete", base.OBSERVE, events)

"""Codex CLI session logs (``~/.codex/sessions/YYYY/MM/DD/rollout-*.jsonl``) replayed as
the events its hooks would have posted, the way the Claude Code importer replays a
transcript: each ``user_message`` a ``prompt``, each tool call with its output a
``tool_use``, the last assistant text before the next prompt a ``session_summary``.

A rollout line is ``{"timestamp", "type", "payload"}``: ``session_meta`` (the session id,
its ``cwd``, the CLI version), ``event_msg`` (``user_message`` is what the user typed;
``task_started`` names the turn), ``response_item`` (model messages and tool calls:
``function_call``/``custom_tool_call``/``local_shell_call`` and their ``*_output`` by
``call_id``). The ``user``/``developer`` messages among the response items carry the
injected instructions and environment context as well as the prompt, so prompts come
from ``user_message`` only. Ids are derived from the turn and call ids, as the hooks
derive theirs, so importing a log twice stores nothing new.

Unified exec (``exec_command``, Codex 0.5x on) answers a command still running after its
yield time with ``Process running with session ID N``; the model then polls it with
``write_stdin`` calls until one says ``Process exited with code N``, and an
``exec_command_end`` event carries the command's whole output and exit code. The hooks
report one ``Bash`` use a command, so the importer folds the polls into the command's
one ``tool_use``, written when the command ends.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Iterator
from typing import Any

from wakemark.services.agents.base import HookContext, json_body, make_event, text_body, tool_data
from wakemark.services.agents.codex import exit_code
from wakemark.services.importers.claude_code import context_for, json_objects, line_time
from wakemark.shared.models import Event
from wakemark.shared.privacy import scrub

AGENT = "codex"
_CALLS = ("function_call", "custom_tool_call", "local_shell_call")
_OUTPUTS = ("function_call_output", "custom_tool_call_output")
_RUNNING = re.compile(r"^Process running with session ID (\d+)", re.MULTILINE)


def _name(item: dict[str, Any]) -> str:
    # Codex 0.12x names an MCP tool by server namespace and tool: "mcp__node_repl__" + "js".
    name = str(item.get("name") or "shell")
    namespace = item.get("namespace")
    return namespace + name if isinstance(namespace, str) else name


def _arguments(item: dict[str, Any]) -> Any:
    if item.get("type") == "local_shell_call":
        return item.get("action")
    raw = item.get("arguments", item.get("input"))
    if isinstance(raw, str):
        try:
            return json.loads(raw)
        except ValueError:
            return raw  # apply_patch's input and other free-form tools: text
    return raw


def _texts(content: Any) -> str:
    if not isinstance(content, list):
        return ""
    return "\n".join(
        b["text"]
        for b in content
        if isinstance(b, dict) and b.get("type") == "output_text" and isinstance(b.get("text"), str)
    )


def session_events(lines: Iterable[str | bytes], actor: str) -> Iterator[Event]:
    """The events of one rollout, in order; lines that are not JSON are skipped."""
    ctx: HookContext | None = None
    session = version = turn = None
    calls: dict[str, tuple[str, Any]] = {}  # call_id -> (tool name, arguments)
    # A unified-exec process by its session id: the command's call id, name, arguments,
    # its outputs so far and the line of the latest; None once its tool_use is written.
    processes: dict[str, tuple[str, str, Any, list[str], dict[str, Any]] | None] = {}
    answer: tuple[str, dict[str, Any], Any] | None = None  # last assistant text, line, turn

    def event(line: dict[str, Any], kind: str, body: dict[str, Any], stable: Any) -> Event:
        assert ctx is not None and session is not None
        return make_event(
            ctx, session_id=session, kind=kind, body=scrub(body), stable_ids=(stable,),
            when=line_time(line), version=version,
        )  # fmt: skip

    def summary() -> Iterator[Event]:
        nonlocal answer
        if answer is not None:
            text, line, of_turn = answer
            yield event(line, "session_summary", text_body(text), of_turn)
        answer = None

    def tool_use(line: dict[str, Any], call_id: str, name: str, arguments: Any,
                 output: Any, code: int | None) -> Event:  # fmt: skip
        data = tool_data(name, arguments, output, exit_code=code)
        return event(line, "tool_use", json_body(data), call_id)

    def ended(line: dict[str, Any], process: str, output: str, code: int | None) -> Event:
        started = processes[process]
        assert started is not None
        processes[process] = None
        call_id, name, arguments, _, _ = started
        return tool_use(line, call_id, name, arguments, output, code)

    for line in json_objects(lines):
        payload = line.get("payload")
        if not isinstance(payload, dict):
            continue
        if line.get("type") == "session_meta":
            if ctx is None and isinstance(payload.get("id"), str):
                ctx = context_for(payload.get("cwd"), actor, AGENT)
                session = payload["id"][:200]
                cli = payload.get("cli_version")
                version = cli if isinstance(cli, str) else None
            continue
        if ctx is None:
            continue  # nothing before the session's own header can be placed
        kind = payload.get("type")
        if line.get("type") == "event_msg":
            if kind == "task_started" and payload.get("turn_id"):
                turn = payload["turn_id"]
            elif kind == "user_message" and str(payload.get("message") or "").strip():
                yield from summary()
                prompt = text_body(str(payload["message"]).strip())
                yield event(line, "prompt", prompt, turn or line.get("timestamp"))
            elif kind == "exec_command_end":
                process = next(
                    (p for p, s in processes.items() if s and s[0] == payload.get("call_id")),
                    None,
                )
                if process is not None:
                    code = payload.get("exit_code")
                    whole = str(payload.get("aggregated_output") or "")
                    yield ended(line, process, whole, code if isinstance(code, int) else None)
            continue
        if line.get("type") != "response_item":
            continue
        if kind in _CALLS:
            calls[str(payload.get("call_id"))] = (_name(payload), _arguments(payload))
        elif kind in _OUTPUTS:
            call_id = str(payload.get("call_id"))
            name, arguments = calls.pop(call_id, ("unknown", None))
            output = payload.get("output")
            text = output if isinstance(output, str) else ""
            polled = str(arguments.get("session_id")) if isinstance(arguments, dict) else ""
            if name == "write_stdin" and polled in processes:
                started = processes[polled]
                if started is not None:  # else the command's end event already wrote it
                    outputs = [*started[3], text]
                    processes[polled] = (*started[:3], outputs, line)
                    if (code := exit_code(text)) is not None:
                        yield ended(line, polled, "\n".join(outputs), code)
                continue
            if running := _RUNNING.search(text):
                processes[running.group(1)] = (call_id, name, arguments, [text], line)
                continue
            yield tool_use(line, call_id, name, arguments, output, exit_code(output))
        elif kind == "message" and payload.get("role") == "assistant":
            text = _texts(payload.get("content")).strip()
            if text:
                answer = (text, line, turn or line.get("timestamp"))
    for process, started in list(processes.items()):
        if started is not None:  # the log ends before the command does: what it had
            yield ended(started[4], process, "\n".join(started[3]), None)
    yield from summary()

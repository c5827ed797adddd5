"""Read one tool-use event body, whichever agent (services/agents) built it, into a ``ToolUse``.

Adapters differ (Claude Code, Codex, Gemini CLI, Kiro, Cursor), so this is liberal: it
accepts several spellings of each key and never raises on an odd shape.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

from wakemark.shared.extraction.text import as_text, collapse
from wakemark.shared.models import JsonBody, MessageBody, TextBody

_NAME_KEYS = ("tool_name", "tool", "name", "toolName")
_INPUT_KEYS = ("tool_input", "input", "args", "arguments", "parameters", "params", "toolInput")
_RESPONSE_KEYS = ("tool_response", "output", "result", "response", "toolResponse")
_EXIT_KEYS = ("exit_code", "exitCode", "returncode", "return_code", "exit_status", "exitStatus")
_OUTPUT_KEYS = ("stdout", "stderr", "error", "output", "llmContent", "content", "message")
_FILE_KEYS = (
    "file_path",
    "filePath",
    "path",
    "notebook_path",
    "target_file",
    "targetFile",
    "absolute_path",
    "file",
    "filename",
)
_FILE_LIST_KEYS = ("paths", "file_paths", "files")
_WRITE_HINTS = ("edit", "write", "replace", "patch", "create", "insert", "append", "delete")
_READ_HINTS = ("read", "view", "grep", "glob", "search", "find", "list", "open")
_SEARCH_HINTS = ("grep", "glob", "search", "find", "list")
_SHELL_HINTS = ("bash", "shell", "exec", "terminal", "command", "run", "cmd")
_SHELLS = {"bash", "sh", "zsh", "/bin/bash", "/bin/sh", "/bin/zsh"}
_EXIT_IN_TEXT = re.compile(r"(?i)\bexit(?:ed with)?[ _]?(?:code|status)\b:?\s*(-?\d+)")
_PATCH_FILE = re.compile(r"(?m)^\*\*\* (Update|Add|Delete) File: (.+?)\s*$|^\+\+\+ b/(.+?)\s*$")
_MAX_OUTPUT = 20_000


@dataclass
class ToolUse:
    name: str = ""
    kind: str = "other"  # shell | write | read | other
    command: str | None = None
    files: list[tuple[str, str]] = field(default_factory=list)  # (verb, raw path)
    exit_code: int | None = None
    failed: bool | None = None  # True/False when the agent's hook said so, else None
    output: str = ""
    cwd: str | None = None


def parse_tool_use(body: TextBody | MessageBody | JsonBody) -> ToolUse:
    if isinstance(body, TextBody):
        return ToolUse(output=body.content[:_MAX_OUTPUT])
    if isinstance(body, MessageBody):
        return ToolUse(output="\n".join(t.content for t in body.turns)[:_MAX_OUTPUT])
    return _from_json(body.data)


def _first(data: dict[str, Any], keys: tuple[str, ...]) -> Any:
    for key in keys:
        if data.get(key) is not None:
            return data[key]
    return None


def _from_json(data: dict[str, Any]) -> ToolUse:
    tool = data.get("tool")
    if isinstance(tool, dict):  # {"tool": {"name": ..., "input": ...}}
        data = {**data, **tool, "tool": tool.get("name")}
    name = next((v for k in _NAME_KEYS if isinstance(v := data.get(k), str)), "")
    raw_input = _first(data, _INPUT_KEYS)
    if isinstance(raw_input, str):
        try:
            raw_input = json.loads(raw_input)
        except ValueError:
            raw_input = {"command": raw_input}
    tool_input: dict[str, Any] = raw_input if isinstance(raw_input, dict) else data
    response = _first(data, _RESPONSE_KEYS)
    use = ToolUse(name=name, cwd=data.get("cwd") if isinstance(data.get("cwd"), str) else None)
    use.output = _output_text(data, response)
    use.exit_code = _exit_code(data, response, use.output)
    use.failed = _failed(data, response)
    use.kind = _kind(name.lower(), tool_input)
    if use.kind == "shell":
        use.command = _command(tool_input.get("command") or tool_input.get("cmd"))
    if use.kind in ("write", "read"):
        use.files = _files(use.kind, name.lower(), tool_input)
    return use


def _kind(name: str, tool_input: dict[str, Any]) -> str:
    sub = tool_input.get("command")
    if any(h in name for h in _WRITE_HINTS):
        if isinstance(sub, str) and sub.strip() in ("view", "read"):
            return "read"
        return "write"
    if any(h in name for h in _READ_HINTS) and not any(h in name for h in _SHELL_HINTS):
        return "read"
    command = sub if sub is not None else tool_input.get("cmd")  # Codex's exec_command: cmd
    if any(h in name for h in _SHELL_HINTS) or isinstance(command, str | list):
        return "shell" if command else "other"
    has_file = any(isinstance(tool_input.get(k), str) for k in _FILE_KEYS)
    if has_file:
        edits = ("edits", "new_string", "new_str", "content", "old_string", "old_str")
        return "write" if any(k in tool_input for k in edits) else "read"
    return "other"


def _command(value: Any) -> str | None:
    if isinstance(value, list):
        parts = [str(p) for p in value]
        if len(parts) >= 3 and parts[0] in _SHELLS and parts[1].startswith("-"):
            parts = parts[2:]  # ["bash", "-lc", "pytest -q"]
        value = " ".join(parts)
    if not isinstance(value, str):
        return None
    return collapse(value) or None


def _files(kind: str, name: str, tool_input: dict[str, Any]) -> list[tuple[str, str]]:
    verb = "read"
    if kind == "write":
        sub = tool_input.get("command")
        if "delete" in name:
            verb = "deleted"
        elif ("write" in name and "fs_write" not in name) or sub == "create":
            verb = "wrote"
        else:
            verb = "edited"
    found: list[tuple[str, str]] = []
    if kind == "read" and any(h in name for h in _SEARCH_HINTS):
        return []  # a search's path is its scope (often a folder), not a file it touched
    for key in _FILE_KEYS:
        value = tool_input.get(key)
        if isinstance(value, str) and value.strip() and "\n" not in value:
            found.append((verb, value.strip()))
            break
    for key in _FILE_LIST_KEYS:
        value = tool_input.get(key)
        if isinstance(value, list):
            found += [(verb, v.strip()) for v in value if isinstance(v, str) and v.strip()]
    if kind == "write":
        patch = tool_input.get("patch") or tool_input.get("input") or tool_input.get("command")
        if isinstance(patch, str) and ("*** " in patch or "+++ " in patch):
            for m in _PATCH_FILE.finditer(patch):
                action, path = m.group(1), m.group(2) or m.group(3)
                found.append(({"Add": "wrote", "Delete": "deleted"}.get(action, "edited"), path))
    return found


def _output_text(data: dict[str, Any], response: Any) -> str:
    parts: list[str] = []
    if isinstance(response, dict):
        parts += [as_text(response.get(k)) for k in _OUTPUT_KEYS if response.get(k)]
        items = response.get("result")
        if isinstance(items, list):  # Kiro: {"result": [{"stdout": ..., "stderr": ...}]}
            for item in items:
                if isinstance(item, dict):
                    parts += [as_text(item.get(k)) for k in _OUTPUT_KEYS if item.get(k)]
                elif isinstance(item, str):
                    parts.append(item)
    elif response is not None:
        parts.append(as_text(response))
    parts += [as_text(data.get(k)) for k in ("error", "stdout", "stderr") if data.get(k)]
    return "\n".join(p for p in parts if p)[:_MAX_OUTPUT]


def _as_int(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str) and re.fullmatch(r"\s*-?\d{1,6}\s*", value):
        return int(value)
    return None


def _exit_code(data: dict[str, Any], response: Any, output: str) -> int | None:
    places: list[Any] = [data, response]
    if isinstance(response, dict) and isinstance(response.get("result"), list):
        places += response["result"]
    for place in places:
        if isinstance(place, dict):
            for key in _EXIT_KEYS:
                code = _as_int(place.get(key))
                if code is not None:
                    return code
    match = _EXIT_IN_TEXT.search(output[:2000]) or _EXIT_IN_TEXT.search(output[-2000:])
    return int(match.group(1)) if match else None


def _failed(data: dict[str, Any], response: Any) -> bool | None:
    for place in (data, response):
        if not isinstance(place, dict):
            continue
        if place.get("error") or place.get("is_error") is True or place.get("isError") is True:
            return True
        if place.get("success") is False or place.get("interrupted") is True:
            return True
    if isinstance(response, dict) and response.get("success") is True:
        return False
    return None

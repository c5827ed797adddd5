"""What `wakemark install <agent>` writes into each agent's config files.

Each target returns ``[(path, edit)]``: ``edit(old, install)`` turns the file's current
content (parsed JSON, or TOML text) into the new one (``None``: delete the file). Edits
first remove every wakemark entry and then, when installing, add ours once: installing
twice leaves one entry, other tools' entries are never touched, and uninstalling removes
only ours.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import tomllib
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from typing import Any

Edit = Callable[[Any, bool], Any]


@dataclass(frozen=True)
class Where:
    home: str  # the user's home (tests pass a temp dir)
    project: str | None  # project root for a per-project install, else None
    port: int
    token: str | None
    wakemark_home: str | None = None  # a non-default $WAKEMARK_HOME, else None


DEFAULT_PORT = 37800


def _wakemark_env(w: Where) -> dict[str, str]:
    """The non-default settings a hook or MCP process must be told: agents start them
    with their own environment, not the one ``wakemark install`` ran in."""
    env = {"WAKEMARK_PORT": str(w.port)} if w.port != DEFAULT_PORT else {}
    if w.wakemark_home:
        env["WAKEMARK_HOME"] = w.wakemark_home
    return env


def mcp_server(w: Where) -> dict[str, Any]:
    """``wakemark mcp`` by absolute path. A non-default port or home goes in ``env``: some
    agents (Codex) start MCP servers with a scrubbed environment."""
    server: dict[str, Any] = {"command": wakemark_bin(), "args": ["mcp"]}
    env = _wakemark_env(w)
    if env:
        server["env"] = env
    return server


# The forwarder is stdlib-only, so any Python 3.9+ runs it. The system interpreter is
# usually a static, PGO-optimized build that starts several ms faster than a venv's
# (often a shared-library build, as pyenv makes them); that start is paid on every hook.
SYSTEM_PYTHON = "/usr/bin/python3"
_MIN_FORWARDER_PYTHON = (3, 9)


def hook_command(w: Where, agent: str, event: str = "") -> str:
    """The forwarder as a file run with ``-S -E -s``: no site, no ``.pth`` files, no
    console-script shim — the fastest start the stdlib allows. Non-default settings go
    first through ``env`` (works both as a shell command and as an argv)."""
    script = os.path.join(os.path.dirname(os.path.abspath(__file__)), "hook.py")
    env = [f"{k}={v}" for k, v in _wakemark_env(w).items()]
    parts = (["/usr/bin/env", *env] if env else []) + [forwarder_python(), "-S", "-E", "-s"]
    parts += [script, agent] + ([event] if event else [])
    return " ".join(shlex.quote(p) for p in parts)


@cache
def forwarder_python(candidate: str = SYSTEM_PYTHON) -> str:
    """``candidate`` if it runs and is Python 3.9 or newer, else this interpreter."""
    check = f"import sys; sys.exit(sys.version_info[:2] < {_MIN_FORWARDER_PYTHON!r})"
    try:
        done = subprocess.run(
            [candidate, "-S", "-E", "-s", "-c", check], capture_output=True, timeout=10
        )
    except (OSError, subprocess.SubprocessError):
        return sys.executable
    return candidate if done.returncode == 0 else sys.executable


def wakemark_bin() -> str:
    candidate = os.path.join(os.path.dirname(sys.executable), "wakemark")
    return candidate if os.access(candidate, os.X_OK) else "wakemark"


def _is_ours(handler: Any) -> bool:
    if not isinstance(handler, dict):
        return False
    command = str(handler.get("command", ""))
    return (
        "wakemark hook" in command
        or "cli/hook.py" in command
        or "/v1/hooks/" in str(handler.get("url", ""))
        or str(handler.get("name", "")).startswith("wakemark-")
    )


def _grouped_hooks(settings: dict[str, Any], groups: dict[str, dict[str, Any]]) -> None:
    """Claude Code / Codex / Gemini shape: event -> [{matcher?, hooks: [handler]}]."""
    hooks = settings.setdefault("hooks", {})
    for event in list(hooks):
        kept = []
        for group in hooks[event] if isinstance(hooks[event], list) else []:
            if isinstance(group, dict) and isinstance(group.get("hooks"), list):
                group = {**group, "hooks": [h for h in group["hooks"] if not _is_ours(h)]}
                if not group["hooks"]:
                    continue
            kept.append(group)
        if kept:
            hooks[event] = kept
        else:
            del hooks[event]
    for event, group in groups.items():
        hooks.setdefault(event, []).append(group)
    if not hooks:
        del settings["hooks"]


def _flat_hooks(settings: dict[str, Any], handlers: dict[str, dict[str, Any]]) -> None:
    """Kiro / Cursor shape: event -> [handler]."""
    hooks = settings.setdefault("hooks", {})
    for event in list(hooks):
        kept = [h for h in hooks[event] or [] if not _is_ours(h)]
        if kept:
            hooks[event] = kept
        else:
            del hooks[event]
    for event, handler in handlers.items():
        hooks.setdefault(event, []).append(handler)
    if not hooks:
        del settings["hooks"]


def _mcp(settings: dict[str, Any], server: dict[str, Any] | None) -> None:
    servers = settings.setdefault("mcpServers", {})
    servers.pop("wakemark", None)
    if server is not None:
        servers["wakemark"] = server
    if not servers:
        del settings["mcpServers"]


def _json_edit(apply: Callable[[dict[str, Any], bool], None]) -> Edit:
    def edit(old: Any, install: bool) -> Any:
        settings = json.loads(json.dumps(old or {}))  # a deep copy
        apply(settings, install)
        return settings

    return edit


def claude_code(w: Where) -> list[tuple[str, Edit]]:
    base = os.path.join(w.project, ".claude") if w.project else os.path.join(w.home, ".claude")
    # Per project: settings.local.json, which Claude Code git-ignores (it holds the token).
    settings_path = os.path.join(base, "settings.local.json" if w.project else "settings.json")
    http = {
        "type": "http",
        "url": f"http://127.0.0.1:{w.port}/v1/hooks/claude-code",
        "headers": {
            "Authorization": "Bearer $WAKEMARK_TOKEN",
            "X-Wakemark-Project": "$CLAUDE_PROJECT_DIR",
        },
        "allowedEnvVars": ["WAKEMARK_TOKEN", "CLAUDE_PROJECT_DIR"],
        "timeout": 5,
    }
    # SessionStart runs only command hooks; the forwarder prints the JSON reply.
    start = {"type": "command", "command": hook_command(w, "claude-code", "SessionStart")}
    groups: dict[str, dict[str, Any]] = {
        "SessionStart": {"hooks": [{**start, "timeout": 10}]},
        "UserPromptSubmit": {"hooks": [http]},
        "PostToolUse": {"matcher": "*", "hooks": [http]},
        "PostToolUseFailure": {"matcher": "*", "hooks": [http]},
        "Stop": {"hooks": [http]},
    }

    def settings(s: dict[str, Any], install: bool) -> None:
        _grouped_hooks(s, groups if install else {})
        env = s.setdefault("env", {})
        # Claude Code exports `env` to the session, which is what makes $WAKEMARK_TOKEN
        # interpolate into the HTTP hooks' header; only our own value is ever removed.
        if env.get("WAKEMARK_TOKEN") == w.token or install:
            env.pop("WAKEMARK_TOKEN", None)
        if install and w.token:
            env["WAKEMARK_TOKEN"] = w.token
        if not env:
            del s["env"]

    mcp_path = (
        os.path.join(w.project, ".mcp.json") if w.project else os.path.join(w.home, ".claude.json")
    )
    server = {"type": "stdio", **mcp_server(w)}
    mcp = _json_edit(lambda s, install: _mcp(s, server if install else None))
    return [(settings_path, _json_edit(settings)), (mcp_path, mcp)]


def gemini_cli(w: Where) -> list[tuple[str, Edit]]:
    path = os.path.join(w.project or w.home, ".gemini", "settings.json")
    cmd = hook_command(w, "gemini-cli")

    def handler(name: str, timeout: int = 5000) -> dict[str, Any]:
        return {"name": f"wakemark-{name}", "type": "command", "command": cmd, "timeout": timeout}

    groups: dict[str, dict[str, Any]] = {
        "SessionStart": {"matcher": "startup|resume|clear", "hooks": [handler("session-start")]},
        "BeforeAgent": {"hooks": [handler("before-agent")]},
        "AfterTool": {"matcher": "*", "hooks": [handler("after-tool")]},
        "AfterAgent": {"hooks": [handler("after-agent")]},
    }
    server = mcp_server(w)

    def apply(s: dict[str, Any], install: bool) -> None:
        _grouped_hooks(s, groups if install else {})
        _mcp(s, server if install else None)

    return [(path, _json_edit(apply))]


def kiro_cli(w: Where) -> list[tuple[str, Edit]]:
    path = os.path.join(w.project or w.home, ".kiro", "agents", "wakemark.json")
    cmd = hook_command(w, "kiro-cli")
    handlers = {
        "agentSpawn": {"command": cmd, "timeout_ms": 5000},
        "userPromptSubmit": {"command": cmd, "timeout_ms": 5000},
        "postToolUse": {"matcher": "*", "command": cmd, "timeout_ms": 5000},
        "stop": {"command": cmd, "timeout_ms": 5000},
    }
    server = mcp_server(w)

    def apply(s: dict[str, Any], install: bool) -> None:
        if install:
            s.setdefault("name", "wakemark")
            s.setdefault("description", "Default tools plus wakemark's persistent memory")
            s.setdefault("tools", ["*"])  # a missing list would mean "no tools at all"
        _flat_hooks(s, handlers if install else {})
        _mcp(s, server if install else None)

    def edit(old: Any, install: bool) -> Any:
        agent = _json_edit(apply)(old, install)
        # The wakemark agent file is ours: once only our skeleton is left, remove the file.
        skeleton = (
            set(agent) <= {"name", "description", "tools"} and agent.get("name") == "wakemark"
        )
        return None if skeleton and not install else agent

    return [(path, edit)]


def cursor(w: Where) -> list[tuple[str, Edit]]:
    base = os.path.join(w.project or w.home, ".cursor")
    cmd = hook_command(w, "cursor")
    events = ("beforeSubmitPrompt", "afterShellExecution", "afterFileEdit", "afterAgentResponse")
    handlers = {event: {"command": cmd} for event in events}

    def hooks(s: dict[str, Any], install: bool) -> None:
        s.setdefault("version", 1)
        _flat_hooks(s, handlers if install else {})

    server = mcp_server(w)
    mcp = _json_edit(lambda s, install: _mcp(s, server if install else None))
    return [
        (os.path.join(base, "hooks.json"), _json_edit(hooks)),
        (os.path.join(base, "mcp.json"), mcp),
    ]


BEGIN = "# >>> wakemark (managed by `wakemark install codex`) >>>"
END = "# <<< wakemark <<<"


def _strip_blocks(text: str) -> str:
    out, skipping = [], False
    for line in text.splitlines(keepends=True):
        if line.strip() == BEGIN:
            skipping = True
        elif skipping and line.strip() == END:
            skipping = False
        elif not skipping:
            out.append(line)
    return "".join(out)


def codex(w: Where) -> list[tuple[str, Edit]]:
    base = os.path.join(w.project or w.home, ".codex")
    cmd = hook_command(w, "codex")
    handler = {"type": "command", "command": cmd, "timeout": 10}
    groups: dict[str, dict[str, Any]] = {
        "SessionStart": {"matcher": "startup|resume|clear|compact", "hooks": [handler]},
        "UserPromptSubmit": {"hooks": [handler]},
        "PostToolUse": {"matcher": "*", "hooks": [handler]},
        "Stop": {"hooks": [handler]},
    }
    hooks = _json_edit(lambda s, install: _grouped_hooks(s, groups if install else {}))

    def config(old: Any, install: bool) -> str:
        text = _strip_blocks(old or "")
        if not install:
            return text
        current = tomllib.loads(text)  # raises on a broken file: we never write over one
        if "wakemark" not in current.get("mcp_servers", {}):
            server = mcp_server(w)
            text = text.rstrip("\n") + ("\n\n" if text.strip() else "")
            text += f"{BEGIN}\n[mcp_servers.wakemark]\ncommand = {json.dumps(server['command'])}\n"
            text += f"args = {json.dumps(server['args'])}\n"
            # JSON strings are valid TOML basic strings.
            for key, value in server.get("env", {}).items():
                text += f"env.{key} = {json.dumps(value)}\n"
            text += f"{END}\n"
        if "notify" not in current:
            # Top-level key: must precede every table, so it goes first. Codex appends
            # the turn report as one JSON argument; the Stop hook reports the same turn
            # and the adapter stores it once (same turn id).
            argv = json.dumps(shlex.split(hook_command(w, "codex", "notify")))
            text = f"{BEGIN}\nnotify = {argv}\n{END}\n" + text
        return text

    return [(os.path.join(base, "hooks.json"), hooks), (os.path.join(base, "config.toml"), config)]


TARGETS: dict[str, Callable[[Where], list[tuple[str, Edit]]]] = {
    "claude-code": claude_code,
    "kiro-cli": kiro_cli,
    "gemini-cli": gemini_cli,
    "codex": codex,
    "cursor": cursor,
}

"""Editing agents' config files: the pieces every agent's ``install_targets`` is built from.

A target is ``(path, edit)``: ``edit(old, install)`` turns the file's current content
(parsed JSON, or TOML text) into the new one (``None``: delete the file). Edits first
remove every wakemark entry (and every entry the pre-rename installer wrote, see
``legacy``) and then, when installing, add ours once: installing twice leaves one entry,
other tools' entries are never touched, and uninstalling removes only ours.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from wakemark.services.agents import legacy
from wakemark.services.forwarder import forward, hook

Edit = Callable[[Any, bool], Any]


@dataclass(frozen=True)
class Where:
    home: str  # the user's home (tests pass a temp dir)
    project: str | None  # project root for a per-project install, else None
    port: int
    token: str | None
    wakemark_home: str | None = None  # a non-default $WAKEMARK_HOME, else None


def wakemark_env(w: Where) -> dict[str, str]:
    """The non-default settings a hook or MCP process must be told: agents start them
    with their own environment, not the one ``wakemark install`` ran in."""
    env = {"WAKEMARK_PORT": str(w.port)} if w.port != forward.DEFAULT_PORT else {}
    if w.wakemark_home:
        env["WAKEMARK_HOME"] = w.wakemark_home
    return env


def mcp_server(w: Where) -> dict[str, Any]:
    """``wakemark mcp`` by absolute path. A non-default port or home goes in ``env``: some
    agents (Codex) start MCP servers with a scrubbed environment."""
    server: dict[str, Any] = {"command": wakemark_bin(), "args": ["mcp"]}
    env = wakemark_env(w)
    if env:
        server["env"] = env
    return server


# The forwarder is stdlib-only, so any Python 3.9+ runs it. The system interpreter is
# usually a static, PGO-optimized build that starts several ms faster than a venv's
# (often a shared-library build, as pyenv makes them); that start is paid on every hook.
SYSTEM_PYTHON = "/usr/bin/python3"
_MIN_FORWARDER_PYTHON = (3, 9)


def hook_command(w: Where, agent: str, event: str = "") -> str:
    """The forwarder, run as the file this package installed, with ``-S -E -s``: no site,
    no ``.pth`` files, no console-script shim — the fastest start the stdlib allows. That
    works from a checkout and from a wheel alike. Non-default settings go first through
    ``env`` (works both as a shell command and as an argv)."""
    script = str(Path(hook.__file__).absolute())
    env = [f"{k}={v}" for k, v in wakemark_env(w).items()]
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


def is_ours(handler: Any) -> bool:
    """A hook handler wakemark wrote, now or under its old name."""
    if not isinstance(handler, dict):
        return False
    command = str(handler.get("command", ""))
    return (
        "wakemark hook" in command
        or "forwarder/hook.py" in command
        or "cli/hook.py" in command  # the forwarder's former path
        or "/v1/hooks/" in str(handler.get("url", ""))
        or str(handler.get("name", "")).startswith("wakemark-")
        or legacy.is_hook(handler)
    )


def grouped_hooks(settings: dict[str, Any], groups: dict[str, dict[str, Any]]) -> None:
    """Claude Code / Codex / Gemini shape: event -> [{matcher?, hooks: [handler]}]."""

    def others(entries: Any) -> list[Any]:
        kept = []
        for group in entries if isinstance(entries, list) else []:
            if isinstance(group, dict) and isinstance(group.get("hooks"), list):
                group = {**group, "hooks": [h for h in group["hooks"] if not is_ours(h)]}
                if not group["hooks"]:
                    continue
            kept.append(group)
        return kept

    _replace_hooks(settings, groups, others)


def flat_hooks(settings: dict[str, Any], handlers: dict[str, dict[str, Any]]) -> None:
    """Kiro / Cursor shape: event -> [handler]."""
    _replace_hooks(settings, handlers, lambda entries: [h for h in entries or [] if not is_ours(h)])


def _replace_hooks(
    settings: dict[str, Any], ours: dict[str, Any], others: Callable[[Any], list[Any]]
) -> None:
    """Each event keeps ``others(entries)`` (an event left with none goes), then gets its
    entry of ``ours``; no ``hooks`` key stays behind empty."""
    hooks = settings.setdefault("hooks", {})
    for event in list(hooks):
        kept = others(hooks[event])
        if kept:
            hooks[event] = kept
        else:
            del hooks[event]
    for event, entry in ours.items():
        hooks.setdefault(event, []).append(entry)
    if not hooks:
        del settings["hooks"]


def mcp_servers(settings: dict[str, Any], server: dict[str, Any] | None) -> None:
    """``mcpServers``: ours replaced by ``server`` (``None``: removed)."""
    servers = settings.setdefault("mcpServers", {})
    servers.pop("wakemark", None)
    if legacy.is_mcp_server(legacy.NAME, servers.get(legacy.NAME)):
        del servers[legacy.NAME]
    if server is not None:
        servers["wakemark"] = server
    if not servers:
        del settings["mcpServers"]


def json_edit(apply: Callable[[dict[str, Any], bool], None]) -> Edit:
    def edit(old: Any, install: bool) -> Any:
        settings = json.loads(json.dumps(old or {}))  # a deep copy
        apply(settings, install)
        return settings

    return edit


def strip_blocks(text: str, begin: str, end: str) -> str:
    """``text`` without the lines from each ``begin`` marker line to its ``end`` line."""
    out, skipping = [], False
    for line in text.splitlines(keepends=True):
        if line.strip() == begin:
            skipping = True
        elif skipping and line.strip() == end:
            skipping = False
        elif not skipping:
            out.append(line)
    return "".join(out)

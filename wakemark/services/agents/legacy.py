"""What `engram install`, this product's installer before it was renamed wakemark, wrote.

Agent configs written before the rename still hold those entries; `wakemark install` and
`wakemark uninstall` recognize them and remove them, so an old hook pointing at a gone
checkout or an ``engram`` binary never stays behind. Nothing writes these names; the old
name itself comes from ``wakemark.shared.legacy``, which also adopts the old data directory.
"""

from __future__ import annotations

import os
from typing import Any

from wakemark.shared.legacy import NAME

HOOK_COMMAND = f"{NAME} hook"  # the console-script form of the forwarder
HANDLER_PREFIX = f"{NAME}-"  # Gemini CLI handler names
HEADER_PREFIX = f"X-{NAME.title()}-"  # Claude Code HTTP hooks' headers
TOKEN_ENV = f"{NAME.upper()}_TOKEN"  # Claude Code settings' `env`, interpolated into those headers
KIRO_AGENT_FILE = f"{NAME}.json"  # ~/.kiro/agents/engram.json, a whole agent of its own
CODEX_BEGIN = f"# >>> {NAME} (managed by `{NAME} install codex`) >>>"
CODEX_END = f"# <<< {NAME} <<<"


def is_mcp_server(name: str, server: Any) -> bool:
    """The MCP server entry the old installer wrote: named ``engram``, running ``engram mcp``
    (another tool that happens to use that name is left alone)."""
    return (
        name == NAME
        and isinstance(server, dict)
        and os.path.basename(str(server.get("command", ""))) == NAME
        and server.get("args") == ["mcp"]
    )


def is_hook(handler: dict[str, Any]) -> bool:
    headers = handler.get("headers")
    return (
        HOOK_COMMAND in str(handler.get("command", ""))
        or str(handler.get("name", "")).startswith(HANDLER_PREFIX)
        or (isinstance(headers, dict) and any(str(k).startswith(HEADER_PREFIX) for k in headers))
    )

"""Agent hook adapters: each maps one agent's own hook payload to events and replies in
that agent's own output format. ``get(agent)`` returns the module or ``None``."""

from __future__ import annotations

import importlib
from types import ModuleType

# URL name -> module. Each module defines ``NAME``, ``map_payload(payload, ctx) -> Mapped``
# and ``reply(mapped, context) -> dict | None`` (None: 2xx with an empty body).
ADAPTERS: dict[str, str] = {
    "claude-code": "claude_code",
    "kiro-cli": "kiro_cli",
    "gemini-cli": "gemini_cli",
    "codex": "codex",
    "cursor": "cursor",
}


def get(agent: str) -> ModuleType | None:
    module = ADAPTERS.get(agent)
    if module is None:
        return None
    return importlib.import_module(f"wakemark.services.api.adapters.{module}")

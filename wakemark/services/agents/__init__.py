"""The agents wakemark integrates with, and the one registry of them.

Each agent is one module of this package holding one ``base.Agent`` subclass, its module
named after the agent (``claude_code`` for ``claude-code``): adding an agent is adding
that module (and its tests) and its line in ``AGENTS``. The API (``POST
/v1/hooks/<agent>``), `wakemark install` and the forwarder's fail-safe table (checked
against ``failsafes()`` by the tests) all read this registry. Listing the names imports
nothing.
"""

from __future__ import annotations

from functools import cache
from typing import TYPE_CHECKING

from wakemark.shared.registry import Registry

if TYPE_CHECKING:
    from wakemark.services.agents.base import Agent

AGENTS: Registry[type[Agent]] = Registry(
    "agent",
    {
        "claude-code": "wakemark.services.agents.claude_code:ClaudeCode",
        "codex": "wakemark.services.agents.codex:Codex",
        "cursor": "wakemark.services.agents.cursor:Cursor",
        "gemini-cli": "wakemark.services.agents.gemini_cli:GeminiCli",
        "kiro-cli": "wakemark.services.agents.kiro_cli:KiroCli",
    },
)


def names() -> tuple[str, ...]:
    return tuple(AGENTS)


def get(name: str) -> Agent | None:
    """The agent called ``name``, or None."""
    return _load(name) if name in AGENTS else None


@cache
def _load(name: str) -> Agent:
    agent = AGENTS[name]()
    if agent.name != name:
        raise LookupError(f"{type(agent).__module__} defines agent {agent.name!r}, not {name!r}")
    return agent


def every() -> list[Agent]:
    return [_load(name) for name in names()]


def failsafes() -> dict[str, str]:
    """What the forwarder prints, per agent, when wakemark has nothing or is down."""
    return {agent.name: agent.failsafe for agent in every() if agent.failsafe}

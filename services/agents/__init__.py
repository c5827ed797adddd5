"""The agents wakemark integrates with, and the one registry of them.

Each agent is one module of this package holding one ``base.Agent`` subclass, its module
named after the agent (``claude_code`` for ``claude-code``): adding an agent is adding
that module (and its tests). The API (``POST /v1/hooks/<agent>``), `wakemark install`
and the forwarder's fail-safe table (checked against ``failsafes()`` by the tests) all
read this registry. Names come from the module names, so listing them imports nothing.
"""

from __future__ import annotations

import importlib
import pkgutil
from functools import cache
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from wakemark.services.agents.base import Agent

# The modules of this package that hold no agent.
HELPERS = frozenset({"base", "configs", "legacy"})


@cache
def names() -> tuple[str, ...]:
    return tuple(
        sorted(
            info.name.replace("_", "-")
            for info in pkgutil.iter_modules(__path__)
            if info.name not in HELPERS
        )
    )


def get(name: str) -> Agent | None:
    """The agent called ``name``, or None."""
    return _load(name) if name in names() else None


@cache
def _load(name: str) -> Agent:
    from wakemark.services.agents.base import Agent

    module = importlib.import_module(f"{__name__}.{name.replace('-', '_')}")
    [agent] = [
        obj()
        for obj in vars(module).values()
        if isinstance(obj, type) and issubclass(obj, Agent) and obj.__module__ == module.__name__
    ]
    if agent.name != name:
        raise LookupError(f"{module.__name__} defines agent {agent.name!r}, not {name!r}")
    return agent


def every() -> list[Agent]:
    return [_load(name) for name in names()]


def failsafes() -> dict[str, str]:
    """What the forwarder prints, per agent, when wakemark has nothing or is down."""
    return {agent.name: agent.failsafe for agent in every() if agent.failsafe}

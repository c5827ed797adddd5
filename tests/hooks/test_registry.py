"""One registry of agents (``services/agents``), and the API, the installer and the
forwarder all read it: an agent is one module, nothing else lists agents."""

from __future__ import annotations

import ast
import importlib
import inspect
import pkgutil
from pathlib import Path

import pytest

from wakemark.services import agents
from wakemark.services.agents.base import Agent
from wakemark.services.agents.configs import Where
from wakemark.services.forwarder import forward

from .conftest import Hooks

ROOT = Path(__file__).resolve().parents[2]
NAMES = agents.names()


def test_the_registry_holds_the_five_agents() -> None:
    assert NAMES == ("claude-code", "codex", "cursor", "gemini-cli", "kiro-cli")


@pytest.mark.parametrize("name", NAMES)
def test_each_agent_is_one_module_with_one_complete_class(name: str, tmp_path: Path) -> None:
    agent = agents.get(name)
    assert isinstance(agent, Agent) and agent.name == name
    assert agent.install_note
    assert forward.FAILSAFE.get(name, "") == agent.failsafe
    where = Where(home=str(tmp_path), project=None, port=37800, token="t")
    targets = agent.install_targets(where)
    assert targets and all(path.startswith(str(tmp_path)) for path, _ in targets)


def test_each_module_defining_an_agent_is_listed_and_unknown_names_are_none() -> None:
    listed = {f"wakemark.services.agents.{name.replace('-', '_')}" for name in NAMES}
    for info in pkgutil.iter_modules(agents.__path__):
        module = importlib.import_module(f"wakemark.services.agents.{info.name}")
        found = [
            o
            for o in vars(module).values()
            if inspect.isclass(o)
            and issubclass(o, Agent)
            and not inspect.isabstract(o)
            and o.__module__ == module.__name__
        ]
        assert len(found) == (module.__name__ in listed), module.__name__
    assert agents.get("vim") is None and agents.get("base") is None


def test_the_api_serves_every_agent_and_only_those(sqlite_hooks: Hooks) -> None:
    for name in NAMES:
        res = sqlite_hooks.post(name, {"hook_event_name": "NoSuchHook", "session_id": "s"})
        assert res.status_code in (200, 204), (name, res.data)
    unknown = sqlite_hooks.post("vim", {})
    assert unknown.status_code == 404
    assert ", ".join(NAMES) in unknown.get_json()["message"]


def test_the_installer_offers_every_agent() -> None:
    import argparse

    from wakemark.services.cli import install

    parser = argparse.ArgumentParser()
    install.add_arguments(parser)
    [action] = [a for a in parser._actions if a.dest == "agent"]
    assert tuple(action.choices or ()) == NAMES


def test_the_forwarder_table_is_the_registrys() -> None:
    assert agents.failsafes() == forward.FAILSAFE
    assert set(forward.FAILSAFE) <= set(NAMES)


def _agent_name_literals(path: Path) -> list[int]:
    """Lines of dict, set, list or tuple literals naming two or more agents."""
    lines = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Dict):
            items = [k for k in node.keys if k is not None]
        elif isinstance(node, (ast.Set, ast.List, ast.Tuple)):
            items = list(node.elts)
        else:
            continue
        named = {i.value for i in items if isinstance(i, ast.Constant) and i.value in NAMES}
        if len(named) >= 2:
            lines.append(node.lineno)
    return lines


def test_no_other_module_lists_the_agents() -> None:
    found = {
        str(path.relative_to(ROOT)): lines
        for top in ("shared", "services", "bench")
        for path in sorted((ROOT / top).rglob("*.py"))
        if (lines := _agent_name_literals(path))
    }
    # The registry itself, the forwarder's copy of the fail-safe table, which it cannot
    # import (checked above), and the importers of two agents' session logs, which are
    # named after them.
    assert found == {
        "services/agents/__init__.py": [line_of("services/agents/__init__.py", "    {")],
        "services/cli/importer.py": [line_of("services/cli/importer.py", "    {")],
        "services/forwarder/forward.py": [line_of("services/forwarder/forward.py", "FAILSAFE = {")],
    }


def line_of(path: str, start: str) -> int:
    source = (ROOT / path).read_text().splitlines()
    return next(i for i, line in enumerate(source, 1) if line.startswith(start))


def test_the_scan_finds_a_list_of_agents(tmp_path: Path) -> None:
    module = tmp_path / "m.py"
    module.write_text('NOTES = {\n    "codex": "a",\n    "cursor": "b",\n}\nX = ("codex",)\n')
    assert _agent_name_literals(module) == [1]

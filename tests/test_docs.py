"""Docs that cannot drift: settings, commands, routes and variables are all in the README."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from wakemark.services import agents
from wakemark.services.cli.main import COMMANDS
from wakemark.shared.config import Settings, documented_settings

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()
# Placeholders in docstrings, not variables anyone can set.
NOT_VARIABLES = frozenset({"WAKEMARK_FOO"})
_VARIABLE = re.compile(r"\bWAKEMARK_[A-Z0-9_]*[A-Z0-9]\b")
_CONVERTER = re.compile(r"<(?:[^<>:]+:)?([^<>]+)>")  # <path:filename> -> <filename>


def section(readme: str, title: str) -> str:
    """The text of one ``## title`` section (empty if there is none)."""
    match = re.search(rf"^## {re.escape(title)}\n(.*?)(?=^## |\Z)", readme, re.M | re.S)
    return match.group(1) if match else ""


def cli_commands() -> list[str]:
    # `hook` is dispatched before the parser is built (its fast path), so it is not in
    # COMMANDS, but it is the command every agent config runs.
    return [*COMMANDS, "hook"]


def missing_commands(readme: str) -> list[str]:
    table = section(readme, "Commands")
    return [n for n in cli_commands() if not re.search(rf"^\| `wakemark {n}[ `]", table, re.M)]


def app_routes(tmp_path: Path) -> list[str]:
    from wakemark.services.api import create_app

    app = create_app(Settings(home=tmp_path / "home", embedder="off"))
    routes = []
    for rule in app.url_map.iter_rules():
        if rule.endpoint == "static":
            continue
        path = _CONVERTER.sub(r"<\1>", rule.rule)
        routes += [
            f"{m} {path}" for m in sorted(rule.methods or ()) if m not in ("HEAD", "OPTIONS")
        ]
    return sorted(routes)


def missing_routes(readme: str, routes: list[str]) -> list[str]:
    api = section(readme, "HTTP API")
    # `GET /v1/events` must not be satisfied by `GET /v1/events/<event_id>`.
    return [r for r in routes if not re.search(rf"`{re.escape(r)}(?![\w/<])", api)]


def source_variables() -> set[str]:
    found: set[str] = set()
    for top in ("shared", "services"):
        for path in (ROOT / top).rglob("*.py"):
            found.update(_VARIABLE.findall(path.read_text()))
    return found - NOT_VARIABLES


def missing_variables(readme: str) -> list[str]:
    return sorted(v for v in source_variables() if f"`{v}`" not in readme)


def test_every_setting_is_in_the_readme() -> None:
    missing = [name for name, _ in documented_settings() if f"`{name}`" not in README]
    assert missing == []


def test_readme_opens_with_the_two_commands() -> None:
    head = README.split("\n## ", 1)[0]
    assert "make run" in head and "make test" in head


def test_every_command_is_in_the_commands_table() -> None:
    assert missing_commands(README) == []


def test_every_route_is_in_the_http_api_section(tmp_path: Path) -> None:
    routes = app_routes(tmp_path)
    assert "GET /v1/memories/<record_id>" in routes  # the converter form is rendered
    assert missing_routes(README, routes) == []


def test_every_wakemark_variable_in_the_source_is_in_the_readme() -> None:
    assert {"WAKEMARK_ACTOR", "WAKEMARK_HOME"} <= source_variables()
    assert missing_variables(README) == []


@pytest.mark.parametrize("agent", agents.names())
def test_every_agent_has_its_install_command(agent: str) -> None:
    assert f"wakemark install {agent}" in section(README, "Connect your agent")


# The checks above must be able to fail: each one, run on a README with one item taken
# out, reports exactly that item.


def test_a_command_missing_from_the_table_is_reported() -> None:
    table = section(README, "Commands")
    row = next(line for line in table.splitlines() if line.startswith("| `wakemark doctor"))
    assert missing_commands(README.replace(row + "\n", "")) == ["doctor"]


def test_a_route_missing_from_the_api_section_is_reported(tmp_path: Path) -> None:
    routes = app_routes(tmp_path)
    readme = README.replace("`GET /v1/events?", "`GET /v1/evts?").replace(
        "`GET /v1/events`", "`GET /v1/evts`"
    )
    assert missing_routes(readme, routes) == ["GET /v1/events"]


def test_an_undocumented_variable_is_reported() -> None:
    assert missing_variables(README.replace("`WAKEMARK_ACTOR`", "`ACTOR`")) == ["WAKEMARK_ACTOR"]

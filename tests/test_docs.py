"""Docs that cannot drift: every command, setting, route and variable is documented on
its docs page, the generated reference is what `make docs` writes, every link resolves."""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from wakemark.services import agents
from wakemark.services.cli.main import COMMANDS
from wakemark.shared.config import documented_settings

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
README = (ROOT / "README.md").read_text()
CLI = (DOCS / "cli.md").read_text()
SETTINGS = (DOCS / "settings.md").read_text()
API = (DOCS / "api.md").read_text()
# Placeholders in docstrings, not variables anyone can set.
NOT_VARIABLES = frozenset({"WAKEMARK_FOO"})
_VARIABLE = re.compile(r"\bWAKEMARK_[A-Z0-9_]*[A-Z0-9]\b")
_CONVERTER = re.compile(r"<(?:[^<>:]+:)?([^<>]+)>")  # <path:filename> -> <filename>
_LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")

_spec = importlib.util.spec_from_file_location("gen_docs", ROOT / "scripts" / "gen_docs.py")
assert _spec is not None and _spec.loader is not None
gen_docs = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(gen_docs)


def section(text: str, title: str) -> str:
    """The text of one ``## title`` section (empty if there is none)."""
    match = re.search(rf"^## {re.escape(title)}\n(.*?)(?=^## |\Z)", text, re.M | re.S)
    return match.group(1) if match else ""


def cli_commands() -> list[str]:
    # `hook` is dispatched before the parser is built (its fast path), so it is not in
    # COMMANDS, but it is the command every agent config runs.
    return [*COMMANDS, "hook"]


def missing_commands(cli_page: str) -> list[str]:
    return [n for n in cli_commands() if not re.search(rf"^#+ `wakemark {n}`", cli_page, re.M)]


def app_routes(tmp_path: Path) -> list[str]:
    from wakemark.services.api import create_app
    from wakemark.shared.config import Settings

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


def missing_routes(api_page: str, routes: list[str]) -> list[str]:
    api = section(api_page, "HTTP API")
    # `GET /v1/events` must not be satisfied by `GET /v1/events/<event_id>`.
    return [r for r in routes if not re.search(rf"`{re.escape(r)}(?![\w/<])", api)]


def source_variables() -> set[str]:
    found: set[str] = set()
    for top in ("shared", "services"):
        for path in (ROOT / top).rglob("*.py"):
            found.update(_VARIABLE.findall(path.read_text()))
    return found - NOT_VARIABLES


def missing_variables(settings_page: str) -> list[str]:
    return sorted(v for v in source_variables() if f"`{v}`" not in settings_page)


# Named in the docs as gone, on purpose ("It replaces `WAKEMARK_MERGE`, which is gone").
GONE_VARIABLES = frozenset({"WAKEMARK_MERGE"})


def read_variables() -> set[str]:
    """Every WAKEMARK_* variable something reads: a setting, or a name written in the
    package, the tests, bench, the scripts or the deployment files."""
    found = source_variables() | {name for name, _ in documented_settings()}
    files = [ROOT / "compose.yaml", ROOT / "Dockerfile", ROOT / "Makefile"]
    for top in ("tests", "bench", "scripts", "docker"):
        files += [p for p in (ROOT / top).rglob("*") if p.suffix in (".py", ".sh", "")]
    for path in files:
        if path.is_file() and path != Path(__file__).resolve():  # its examples are not read
            found.update(_VARIABLE.findall(path.read_text(errors="replace")))
    return found


def unknown_variables(pages: list[str]) -> list[str]:
    named = {v for text in pages for v in _VARIABLE.findall(text)}
    return sorted(named - read_variables() - GONE_VARIABLES)


def doc_files() -> list[Path]:
    # docs/_incoming/ holds drafts from other branches, not yet folded into the pages.
    return [ROOT / "README.md", *sorted(DOCS.glob("*.md")), ROOT / "bench/results/README.md"]


def broken_links(path: Path, text: str) -> list[str]:
    """Relative links of one markdown file whose file, or heading anchor, does not exist."""
    prose = re.sub(r"^```.*?^```", "", text, flags=re.M | re.S)
    broken = []
    for target in _LINK.findall(prose):
        if re.match(r"[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto:
            continue
        file, _, anchor = target.partition("#")
        dest = (path.parent / file).resolve() if file else path
        if not dest.exists():
            broken.append(target)
        elif anchor and dest.suffix == ".md":
            text_of = text if dest == path else dest.read_text()
            if anchor not in gen_docs.anchors(text_of):
                broken.append(target)
    return broken


def stale_docs(docs: Path) -> list[str]:
    return sorted(p.name for p, (now, new) in gen_docs.generated(docs).items() if now != new)


def test_readme_opens_with_the_two_commands() -> None:
    head = README.split("\n## ", 1)[0]
    assert "make run" in head and "make test" in head


def test_readme_is_short() -> None:
    assert len(README.splitlines()) <= 400


@pytest.mark.parametrize("agent", agents.names())
def test_every_agent_has_its_install_command(agent: str) -> None:
    assert f"wakemark install {agent}" in section(README, "Connect your agent")


def test_every_setting_is_on_the_settings_page() -> None:
    missing = [name for name, _ in documented_settings() if f"`{name}`" not in SETTINGS]
    assert missing == []


def test_every_command_is_in_the_cli_reference() -> None:
    assert missing_commands(CLI) == []


def test_every_route_is_in_the_http_api_section(tmp_path: Path) -> None:
    routes = app_routes(tmp_path)
    assert "GET /v1/memories/<record_id>" in routes  # the converter form is rendered
    assert missing_routes(API, routes) == []


def test_every_wakemark_variable_in_the_source_is_on_the_settings_page() -> None:
    assert {"WAKEMARK_ACTOR", "WAKEMARK_HOME"} <= source_variables()
    assert missing_variables(SETTINGS) == []


def test_every_variable_the_docs_name_is_read_somewhere() -> None:
    # The other direction of the test above: no page tells a user to set a variable
    # that nothing reads (renamed, removed, or a typo).
    assert unknown_variables([p.read_text() for p in doc_files()]) == []


def test_the_generated_reference_is_up_to_date() -> None:
    # A process of its own, as `make docs` runs it: no WAKEMARK_* variable of this one
    # and no module state of the tests may change what it renders.
    env = {k: v for k, v in os.environ.items() if not k.startswith("WAKEMARK_")}
    script = str(ROOT / "scripts" / "gen_docs.py")
    done = subprocess.run(
        [sys.executable, script, "--check"], env=env, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr  # the message says: run `make docs`


@pytest.mark.parametrize("path", doc_files(), ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_resolves(path: Path) -> None:
    assert broken_links(path, path.read_text()) == []


# The checks above must be able to fail: each one, run on a page with one item taken
# out, reports exactly that item.


def test_a_command_missing_from_the_reference_is_reported() -> None:
    assert missing_commands(CLI.replace("### `wakemark doctor`", "### doctor")) == ["doctor"]


def test_a_route_missing_from_the_api_section_is_reported(tmp_path: Path) -> None:
    routes = app_routes(tmp_path)
    api = API.replace("`GET /v1/events?", "`GET /v1/evts?").replace(
        "`GET /v1/events`", "`GET /v1/evts`"
    )
    assert missing_routes(api, routes) == ["GET /v1/events"]


def test_an_undocumented_variable_is_reported() -> None:
    settings = SETTINGS.replace("`WAKEMARK_ACTOR`", "`ACTOR`")
    assert missing_variables(settings) == ["WAKEMARK_ACTOR"]


def test_a_variable_nothing_reads_is_reported() -> None:
    page = "Set `WAKEMARK_PORT`, `WAKEMARK_PORTS` or `WAKEMARK_MERGE` (gone)."
    assert unknown_variables([page]) == ["WAKEMARK_PORTS"]


def test_an_edited_generated_block_is_reported(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in [n for n in os.environ if n.startswith("WAKEMARK_")]:
        monkeypatch.delenv(name)
    docs = tmp_path / "docs"
    shutil.copytree(DOCS, docs)
    assert stale_docs(docs) == []
    cli = docs / "cli.md"
    cli.write_text(cli.read_text().replace("| `--yes` |", "| `--yes-please` |", 1))
    assert stale_docs(docs) == ["cli.md"]
    (docs / "settings.md").write_text(SETTINGS.replace(gen_docs.end("settings"), ""))
    with pytest.raises(SystemExit, match="settings markers are missing"):
        stale_docs(docs)


def test_a_broken_link_is_reported() -> None:
    page = DOCS / "cli.md"
    text = "[a](settings.md) [b](settings.md#notes) [c](nowhere.md) [d](settings.md#nowhere)"
    assert broken_links(page, text) == ["nowhere.md", "settings.md#nowhere"]
    own = "## Reference\n\n[e](#reference) [f](#nowhere) [g](https://example.com)"
    assert broken_links(page, own) == ["#nowhere"]

"""Write the generated reference blocks of docs/: `make docs`.

The CLI reference (docs/cli.md) comes from the argparse parsers in services/cli, the
settings table (docs/settings.md) from ``Settings``, the route table (docs/api.md) from
the OpenAPI declarations. Each block sits between a BEGIN and an END marker comment;
everything outside the markers is hand-written and left alone. ``--check`` writes
nothing and exits 1 naming every stale file (tests/test_docs.py runs it).

The parsers are rendered from their actions, not from ``format_help()``, whose layout
depends on the terminal width and differs between Python versions.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import re
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]


def begin(name: str) -> str:
    return f"<!-- BEGIN GENERATED {name}: do not edit, run `make docs` -->"


def end(name: str) -> str:
    return f"<!-- END GENERATED {name} -->"


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def _help(action: argparse.Action) -> str:
    text = action.help or ""
    if "%" in text:
        params = {k: v for k, v in vars(action).items() if v is not argparse.SUPPRESS}
        text = text % params
    if action.choices:
        one_of = "one of " + ", ".join(f"`{c}`" for c in action.choices)
        text = f"{text}; {one_of}" if text else one_of
    if action.required and action.option_strings:
        text = f"{text} (required)"
    return text


def _argument(action: argparse.Action) -> str:
    if not action.option_strings:
        name = str(action.metavar or action.dest)
        return f"{name} ..." if action.nargs in ("*", "+") else name
    names = ", ".join(action.option_strings)
    if action.nargs == 0:
        return names
    metavar = action.metavar or action.dest.upper()
    if action.nargs == "?":
        return f"{names} [{metavar}]"
    if action.nargs in ("*", "+"):
        return f"{names} {metavar} ..."
    return f"{names} {metavar}"


def _subparsers(parser: argparse.ArgumentParser) -> argparse._SubParsersAction | None:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return action
    return None


def _command(prog: str, parser: argparse.ArgumentParser, summary: str) -> list[str]:
    lines = [f"### `{prog}`", ""]
    text = parser.description or summary
    if text:
        lines += [_cell(text), ""]
    rows = []
    for action in parser._actions:
        if isinstance(action, (argparse._HelpAction, argparse._SubParsersAction)):
            continue
        if action.help == argparse.SUPPRESS:
            continue
        rows.append(f"| `{_argument(action)}` | {_cell(_help(action))} |")
    if rows:
        lines += ["| argument | meaning |", "|---|---|", *rows, ""]
    sub = _subparsers(parser)
    if sub is not None:
        helps = {a.dest: a.help or "" for a in sub._choices_actions}
        for name, child in sub.choices.items():
            lines += _command(f"{prog} {name}", child, helps.get(name, ""))
    return lines


def cli_reference() -> str:
    from wakemark.services.cli.main import build_parser

    # Some help texts name the value in effect (`serve --help`); the reference shows the
    # defaults, whatever this shell sets.
    saved = {k: os.environ.pop(k) for k in list(os.environ) if k.startswith("WAKEMARK_")}
    try:
        parser = build_parser()
    finally:
        os.environ.update(saved)
    sub = _subparsers(parser)
    assert sub is not None
    helps = {a.dest: a.help or "" for a in sub._choices_actions}
    lines: list[str] = []
    for name, child in sub.choices.items():
        lines += _command(f"wakemark {name}", child, helps.get(name, ""))
    return "\n".join(lines)


def _default(value: Any) -> str:
    if value is None or value == ():
        return "unset"
    text = str(value)
    home = str(Path.home())
    if text == home or text.startswith(home + os.sep):
        text = "~" + text[len(home) :]
    return f"`{text}`"


def settings_table() -> str:
    from wakemark.shared.config import Settings, env_name

    rows = ["| variable | default | meaning |", "|---|---|---|"]
    for f in dataclasses.fields(Settings):
        rows.append(
            f"| `{env_name(f.name)}` | {_default(f.default)} | {_cell(f.metadata['doc'])} |"
        )
    return "\n".join(rows)


def route_table() -> str:
    from wakemark.services.api.openapi import build_spec, route_table

    return route_table(build_spec()).rstrip("\n")


def slug(heading: str) -> str:
    """The anchor GitHub gives a heading."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def anchors(markdown: str) -> set[str]:
    """The anchors of a page's headings (code blocks left out)."""
    prose = re.sub(r"^```.*?^```", "", markdown, flags=re.M | re.S)
    return {slug(h) for h in re.findall(r"^#{1,6} (.+)$", prose, re.M)}


def relink(body: str, here: Path) -> str:
    """Point ``](#anchor)`` at the docs page that has the anchor, when ``here`` has not:
    the route purposes in the OpenAPI declarations link by anchor alone."""
    pages = {p: anchors(p.read_text()) for p in sorted(here.parent.glob("*.md"))}

    def target(match: re.Match[str]) -> str:
        anchor = match.group(1)
        if anchor in pages.get(here, set()):
            return match.group(0)
        page = next((p for p, found in pages.items() if anchor in found), None)
        return f"]({page.name}#{anchor})" if page else match.group(0)

    return re.sub(r"\]\(#([\w-]+)\)", target, body)


# file under docs/ -> {block name: generator}
BLOCKS = {
    "cli.md": {"cli": cli_reference},
    "settings.md": {"settings": settings_table},
    "api.md": {"routes": route_table},
}


def fill(text: str, name: str, body: str) -> str:
    """``text`` with the block ``name`` replaced by ``body``; a missing marker is an error."""
    pattern = re.compile(rf"{re.escape(begin(name))}\n.*?{re.escape(end(name))}", re.S)
    if not pattern.search(text):
        raise SystemExit(f"gen_docs: the {name} markers are missing: {begin(name)} ... {end(name)}")
    block = f"{begin(name)}\n{body}\n{end(name)}"
    return pattern.sub(lambda _: block, text, count=1)


def generated(docs: Path = ROOT / "docs") -> dict[Path, tuple[str, str]]:
    """path -> (current text, text with every block regenerated)."""
    out = {}
    for file, blocks in BLOCKS.items():
        path = docs / file
        current = path.read_text()
        new = current
        for name, make in blocks.items():
            new = fill(new, name, relink(make(), path))
        out[path] = (current, new)
    return out


def main(argv: list[str]) -> int:
    # The defaults shown must not be this machine's: no WAKEMARK_* variable applies.
    for name in [n for n in os.environ if n.startswith("WAKEMARK_")]:
        del os.environ[name]
    check = "--check" in argv
    stale = []
    for path, (current, new) in generated().items():
        if current == new:
            continue
        stale.append(str(path.relative_to(ROOT)))
        if not check:
            path.write_text(new)
    if check and stale:
        print(f"stale generated docs: {', '.join(stale)}; run `make docs`", file=sys.stderr)
        return 1
    for name in stale:
        print(f"updated {name}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

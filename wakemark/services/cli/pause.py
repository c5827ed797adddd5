"""``wakemark pause`` / ``wakemark resume``: stop or restart storing this project.

Creates or removes ``.wakemarkignore`` at the root of the project holding the cwd; the
API drops every event of a project whose root holds it (``shared/optout.py``).
"""

from __future__ import annotations

import argparse
import os
import sys

from wakemark.services.cli.args import existing_dir

NOTE = (
    "# wakemark stores nothing from this project while this file exists.\n"
    "# `wakemark resume` removes it. Safe to commit: it opts the project out for everyone.\n"
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--project", type=existing_dir, metavar="DIR", help="a project other than the cwd's"
    )


def _root(args: argparse.Namespace) -> str | None:
    from wakemark.shared import project

    start = args.project or project.agent_start_dir()
    root = project.find_root(start)
    if root is None:
        hint = "" if args.project else "; pass --project DIR"
        print(
            f"wakemark: {os.path.abspath(start)} is in no project (no .git, pyproject.toml, "
            f"package.json ... at or above it){hint}",
            file=sys.stderr,
        )
    return root


def run(args: argparse.Namespace) -> int:
    from wakemark.shared import optout
    from wakemark.shared.config import Settings

    root = _root(args)
    if root is None:
        return 1
    path = optout.ignore_file(root)
    if args.command == "pause":
        if not os.path.exists(path):
            with open(path, "w") as fh:
                fh.write(NOTE)
        print(f"paused: nothing from {root} is stored until `wakemark resume` ({path})")
        return 0
    if os.path.exists(path):
        os.remove(path)
    still = optout.ignored(root, Settings.from_env().ignore_projects)
    if still:
        print(f"wakemark: {root} stays ignored: {still}", file=sys.stderr)
        return 1
    print(f"resumed: {root} is stored again")
    return 0

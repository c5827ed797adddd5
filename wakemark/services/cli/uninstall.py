"""`wakemark uninstall <agent>`: remove wakemark's hooks and MCP server from an agent's config."""

from __future__ import annotations

import argparse

from wakemark.services.cli import install


def add_arguments(parser: argparse.ArgumentParser) -> None:
    install.add_arguments(parser, verb="remove from")


def run(args: argparse.Namespace) -> int:
    return install.apply(args, install=False)

"""`wakemark mcp`: serve wakemark's memory tools to an agent over MCP (stdio)."""

from __future__ import annotations

import argparse

from wakemark.services.cli.args import existing_dir


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--project",
        type=existing_dir,
        metavar="DIR",
        help="project whose memories the tools use (default: the agent's project dir or cwd)",
    )


def run(args: argparse.Namespace) -> int:
    # Imported here: the MCP SDK is heavy and only this command needs it.
    from wakemark.services.mcp.client import client_for
    from wakemark.services.mcp.server import Wakemark, scope_for, serve, setup_logging
    from wakemark.shared.config import Settings

    settings = Settings.from_env()
    setup_logging(str(settings.log_dir), settings.log_level)
    serve(Wakemark.build(client_for(settings), scope_for(args.project)))
    return 0

"""`engram mcp`: serve engram's memory tools to an agent over MCP (stdio)."""

from __future__ import annotations

import argparse


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--project",
        metavar="DIR",
        help="project whose memories the tools use (default: the agent's project dir or cwd)",
    )


def run(args: argparse.Namespace) -> int:
    # Imported here: the MCP SDK is heavy and only this command needs it.
    from services.mcp.client import client_for
    from services.mcp.server import Engram, scope_for, serve, setup_logging
    from shared.config import Settings

    settings = Settings.from_env()
    setup_logging(str(settings.log_dir), settings.log_level)
    serve(Engram.build(client_for(settings), scope_for(args.project)))
    return 0

"""``wakemark`` entry point: a thin dispatcher over one module per command.

Stays on the standard library and imports a command's module only when that command
runs, so ``wakemark hook`` starts as fast as a bare interpreter allows.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys

# command -> (module under wakemark.services.cli, one-line help). Each module defines
# ``add_arguments(parser)`` and ``run(args) -> int``.
COMMANDS: dict[str, tuple[str, str]] = {
    "serve": ("serve", "run the HTTP API (gunicorn) in the foreground"),
    "service": ("service", "run the server in the background, at login (systemd, launchd)"),
    "migrate": ("migrate", "apply database migrations"),
    "model": ("model", "export the embedding model to ONNX"),
    "worker": ("worker", "run a Celery worker (needs WAKEMARK_REDIS_URL)"),
    "beat": ("beat", "run the Celery beat scheduler (sweep, backfill)"),
    "scrub": ("scrub", "re-scan stored events and records for secrets and redact them"),
    "backfill": ("backfill", "embed records missing a vector, in the foreground"),
    "status": ("status", "is the server up, backend, pending work"),
    "search": ("search", "search this project's memories (or --all-projects)"),
    "forget": ("forget", "delete memories by id, filter or search (a dry run unless --yes)"),
    "pause": ("pause", "store nothing from this project (creates .wakemarkignore)"),
    "resume": ("pause", "store this project again (removes .wakemarkignore)"),
    "doctor": ("doctor", "check data dir, token, port, database, Redis and model"),
    "install": ("install", "add wakemark's hooks and MCP server to an agent's config"),
    "uninstall": ("uninstall", "remove wakemark's hooks and MCP server from an agent's config"),
    "mcp": ("mcp", "run the MCP server over stdio"),
    "export": ("export", "write memories (and events, vectors) as JSON Lines to stdout"),
    "import": ("importer", "restore a wakemark export (idempotent, in batches)"),
    "gc": ("gc", "trim expired event bodies now and compact the database"),
    "stats": ("stats", "counts; --disk: size by table and by project"),
    "token": ("token", "create, list or revoke scoped API tokens (team server)"),
    "audit": ("audit", "show the audit log of destructive actions"),
    "ui": ("ui", "open the viewer in a browser (prints the address if it cannot)"),
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="wakemark", description="Local-first persistent memory for AI coding agents."
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name, (module, help_text) in COMMANDS.items():
        cmd = sub.add_parser(name, help=help_text, description=help_text)
        # The command's own parser, so an unknown option is reported with its usage.
        cmd.set_defaults(_module=module, _parser=cmd)
        _load(module).add_arguments(cmd)
    return parser


def _load(module: str):
    return importlib.import_module(f"wakemark.services.cli.{module}")


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "hook":
        # Fast path: the hook forwarder must not pay for building every parser.
        from wakemark.services.cli import hook

        return hook.main(argv[1:])
    args, unknown = build_parser().parse_known_args(argv)
    if unknown:
        args._parser.error(f"unrecognized arguments: {' '.join(unknown)}")
    try:
        return int(_load(args._module).run(args) or 0)
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        # The reader went away (`wakemark install --dry-run ... | head`): not worth a
        # traceback; point stdout at /dev/null so the interpreter's final flush is quiet.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except Exception as exc:  # a one-line error, never a traceback, for known failures
        known = _one_line(exc)
        if known is None:
            raise
        message, code = known
        print(f"wakemark: {message}", file=sys.stderr)
        return code


def _one_line(exc: Exception) -> tuple[str, int] | None:
    """The message and exit code of a failure the user can fix, or None for a bug."""
    import sqlite3

    from wakemark.shared.config import ConfigError
    from wakemark.shared.storage import MigrationDriftError, StorageError

    if isinstance(exc, ConfigError):
        return str(exc), 2
    if isinstance(exc, MigrationDriftError):
        return f"database error: {exc}", 2
    if isinstance(exc, StorageError):
        return f"database error: {exc}", 1
    if isinstance(exc, sqlite3.Error):
        return f"database error: {_sqlite_path()}: {exc}", 2
    if isinstance(exc, OSError):
        return (f"{exc.filename}: {exc.strerror}" if exc.filename else str(exc)), 2
    return None


def _sqlite_path() -> str:
    from wakemark.shared.config import Settings

    return str(Settings.from_env().sqlite_path)


if __name__ == "__main__":
    sys.exit(main())

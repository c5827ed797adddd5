"""``wakemark`` entry point: a thin dispatcher over one module per command.

Stays on the standard library and imports a command's module only when that command
runs, so ``wakemark hook`` starts as fast as a bare interpreter allows.
"""

from __future__ import annotations

import argparse
import os
import sys
import types

from wakemark.shared.registry import Part, Registry

# Each command is a module under wakemark.services.cli defining ``add_arguments(parser)``
# and ``run(args) -> int``; its one-line help is listed here, so `wakemark --help` and the
# docs need no import of it.
COMMANDS: Registry[types.ModuleType] = Registry(
    "command",
    {
        "serve": Part(
            "wakemark.services.cli.serve", "run the HTTP API (gunicorn) in the foreground"
        ),
        "service": Part(
            "wakemark.services.cli.service",
            "run the server in the background, at login (systemd, launchd)",
        ),
        "migrate": Part("wakemark.services.cli.migrate", "apply database migrations"),
        "model": Part("wakemark.services.cli.model", "export the embedding model to ONNX"),
        "worker": Part(
            "wakemark.services.cli.worker", "run a Celery worker (needs WAKEMARK_REDIS_URL)"
        ),
        "beat": Part(
            "wakemark.services.cli.beat", "run the Celery beat scheduler (sweep, backfill)"
        ),
        "scrub": Part(
            "wakemark.services.cli.scrub",
            "re-scan stored events and records for secrets and redact them",
        ),
        "backfill": Part(
            "wakemark.services.cli.backfill", "embed records missing a vector, in the foreground"
        ),
        "status": Part("wakemark.services.cli.status", "is the server up, backend, pending work"),
        "search": Part(
            "wakemark.services.cli.search", "search this project's memories (or --all-projects)"
        ),
        "forget": Part(
            "wakemark.services.cli.forget",
            "delete memories by id, filter or search (a dry run unless --yes)",
        ),
        "verify": Part(
            "wakemark.services.cli.verify",
            "check this project's memories against its files (--retire the gone ones)",
        ),
        "move": Part(
            "wakemark.services.cli.move",
            "after moving or renaming a project's directory: bring its memories along",
        ),
        "pause": Part(
            "wakemark.services.cli.pause",
            "store nothing from this project (creates .wakemarkignore)",
        ),
        "resume": Part(
            "wakemark.services.cli.pause", "store this project again (removes .wakemarkignore)"
        ),
        "doctor": Part(
            "wakemark.services.cli.doctor", "check data dir, token, port, database, Redis and model"
        ),
        "install": Part(
            "wakemark.services.cli.install",
            "add wakemark's hooks and MCP server to an agent's config",
        ),
        "uninstall": Part(
            "wakemark.services.cli.uninstall",
            "remove wakemark's hooks and MCP server from an agent's config",
        ),
        "mcp": Part("wakemark.services.cli.mcp", "run the MCP server over stdio"),
        "export": Part(
            "wakemark.services.cli.export",
            "write memories (and events, vectors) as JSON Lines to stdout",
        ),
        "import": Part(
            "wakemark.services.cli.importer", "restore a wakemark export (idempotent, in batches)"
        ),
        "gc": Part(
            "wakemark.services.cli.gc", "trim expired event bodies now and compact the database"
        ),
        "stats": Part(
            "wakemark.services.cli.stats", "counts; --disk: size by table and by project"
        ),
        "token": Part(
            "wakemark.services.cli.token", "create, list or revoke scoped API tokens (team server)"
        ),
        "audit": Part("wakemark.services.cli.audit", "show the audit log of destructive actions"),
        "ui": Part(
            "wakemark.services.cli.ui",
            "open the viewer in a browser (prints the address if it cannot)",
        ),
    },
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="wakemark",
        description="Local-first persistent memory for AI coding agents.",
        # `hook` is dispatched before this parser exists (main), so it is not listed above.
        epilog="wakemark hook <agent> [<event>]: the hook forwarder the agents' configs run "
        "(`wakemark hook --help`). `wakemark <command> --help` shows a command's flags.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name in COMMANDS:
        about = COMMANDS.about(name)
        cmd = sub.add_parser(name, help=about, description=about)
        # The command's own parser, so an unknown option is reported with its usage.
        cmd.set_defaults(_command=name, _parser=cmd)
        COMMANDS[name].add_arguments(cmd)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "hook":
        # Fast path: the hook forwarder must not pay for building every parser.
        from wakemark.services.forwarder import forward

        return forward.main(argv[1:])
    args, unknown = build_parser().parse_known_args(argv)
    if unknown:
        args._parser.error(f"unrecognized arguments: {' '.join(unknown)}")
    try:
        return int(COMMANDS[args._command].run(args) or 0)
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
        # One line, even where the message has several (psycopg adds a hint line).
        line = "; ".join(part.strip() for part in message.splitlines() if part.strip())
        print(f"wakemark: {line}", file=sys.stderr)
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

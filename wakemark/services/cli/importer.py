"""``wakemark import FILE``: restore a ``wakemark export`` file (idempotent, in batches).

Each batch of ``transfer.IMPORT_BATCH`` lines commits on its own: a bad line stops the
import with its line number, everything before its batch stays, and importing the
fixed file again writes only what is missing.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable
from typing import Any

from wakemark.services.cli.migrate import migrated_runtime
from wakemark.shared.registry import Registry

# ``--from`` name -> its runner (the session-log importers are named by their agent).
IMPORTERS: Registry[Callable[[argparse.Namespace], int]] = Registry(
    "importer",
    {
        "claude-code": "wakemark.services.cli.importer:_run_claude_code",
        "codex": "wakemark.services.cli.importer:_run_codex",
        "markdown": "wakemark.services.cli.importer:_run_markdown",
        "claude-mem": "wakemark.services.cli.importer:_run_claude_mem",
    },
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "path",
        metavar="FILE",
        help="a wakemark export (.jsonl), or - for stdin; with --from, that tool's files",
    )
    parser.add_argument(
        "--from",
        dest="source",
        metavar="SOURCE",
        default=None,
        help="import another tool's data instead: claude-code (a transcript .jsonl, or a"
        " directory such as ~/.claude/projects, replayed as events); codex (a rollout .jsonl, or"
        " a directory such as ~/.codex/sessions, replayed as events); markdown (CLAUDE.md,"
        " auto-memory, Cursor .mdc rules, Cline memory-bank files, or a directory of them:"
        " one manual record per section); claude-mem (its SQLite database: observations and"
        " session summaries)",
    )
    parser.add_argument(
        "--project",
        metavar="DIR",
        default=None,
        help="with --from markdown or claude-mem: the project the records belong to"
        " (default: each file's own project; claude-mem: each project name as a root)",
    )
    parser.add_argument(
        "--namespace-map",
        action="append",
        default=[],
        metavar="OLD=NEW",
        help="move a namespace (or actor prefix) to another; repeatable",
    )
    parser.add_argument(
        "--dry-run", action="store_true", help="read and check everything, write nothing"
    )


def run(args: argparse.Namespace) -> int:
    from wakemark.services.cli.backfill import ProgressBar
    from wakemark.shared.transfer import ImportFormatError, import_lines, parse_namespace_map

    if args.source is not None:
        if args.source not in IMPORTERS:
            known = ", ".join(IMPORTERS)
            print(
                f"wakemark import: unknown --from {args.source!r} (known: {known})", file=sys.stderr
            )
            return 2
        return IMPORTERS[args.source](args)
    try:
        mapping = parse_namespace_map(args.namespace_map)
    except ValueError as exc:
        print(f"wakemark import: {exc}", file=sys.stderr)
        return 2
    try:
        stream: Any = sys.stdin.buffer if args.path == "-" else open(args.path, "rb")  # noqa: SIM115
    except OSError as exc:
        print(f"wakemark import: {args.path}: {exc.strerror or exc}", file=sys.stderr)
        return 2
    runtime = migrated_runtime()
    size = _size(stream)
    bar = ProgressBar(label="importing bytes")
    try:
        report = import_lines(
            runtime.storage,
            stream,
            mapping,
            dry_run=args.dry_run,
            progress=(lambda done: bar(done, max(size, done))) if size else None,
        )
    except ImportFormatError as exc:
        bar.finish()
        print(f"wakemark import: {args.path}: {exc}", file=sys.stderr)
        if exc.report is not None:
            print(_summary(exc.report, "before the error"), file=sys.stderr)
        return 1
    finally:
        stream.close()
        runtime.close()
    bar.finish()
    print(_summary(report, "done"), file=sys.stderr)
    return 0


def _run_claude_code(args: argparse.Namespace) -> int:
    from wakemark.services.importers import claude_code

    return _run_session_logs(claude_code, args)


def _run_codex(args: argparse.Namespace) -> int:
    from wakemark.services.importers import codex

    return _run_session_logs(codex, args)


def _run_session_logs(source: Any, args: argparse.Namespace) -> int:
    """Session logs replayed as events: Claude Code transcripts or Codex rollouts."""
    from wakemark.services.importers import claude_code
    from wakemark.shared import project

    files = claude_code.transcripts(args.path)
    if not files:
        print(f"wakemark import: no session log (.jsonl) at {args.path}", file=sys.stderr)
        return 2
    runtime = migrated_runtime()
    actor = project.actor()
    seen = stored = 0
    namespaces: set[str] = set()
    try:
        for path in files:
            with open(path, "rb") as lines:
                batch: list[Any] = []
                for event in source.session_events(lines, actor):
                    namespaces.add(event.namespace)
                    batch.append(event)
                    if len(batch) == 500:
                        stored += _put(runtime, batch, args.dry_run)
                        seen, batch = seen + len(batch), []
                stored += _put(runtime, batch, args.dry_run)
                seen += len(batch)
    finally:
        runtime.close()
    verb = "read" if args.dry_run else "stored"
    print(
        f"{len(files)} session log(s), {seen} event(s) in {len(namespaces)} project(s);"
        f" {verb} {stored if not args.dry_run else seen}"
        f"{' new' if not args.dry_run else ''}. The server extracts each turn as it closes"
        " (a session's last turn after WAKEMARK_TURN_IDLE_S).",
        file=sys.stderr,
    )
    return 0


def _run_markdown(args: argparse.Namespace) -> int:
    from wakemark.services.importers import markdown
    from wakemark.shared import project

    files = markdown.files(args.path)
    if not files:
        print(f"wakemark import: no markdown file at {args.path}", file=sys.stderr)
        return 2
    runtime = migrated_runtime()
    found = written = 0
    try:
        for path in files:
            start = args.project or os.path.dirname(os.path.abspath(path))
            records = markdown.records(path, project.namespace(start))
            found += len(records)
            written += _write_records(runtime, records, args.dry_run)
    finally:
        runtime.close()
    verb = "would write" if args.dry_run else "wrote"
    print(
        f"{len(files)} file(s), {found} section(s); {verb} {written} new record(s)",
        file=sys.stderr,
    )
    return 0


def _run_claude_mem(args: argparse.Namespace) -> int:
    import itertools
    import sqlite3

    from wakemark.services.importers import claude_mem
    from wakemark.shared import project

    if not os.path.isfile(args.path):
        print(f"wakemark import: no claude-mem database at {args.path}", file=sys.stderr)
        return 2
    fixed = project.namespace(args.project) if args.project else None
    actor = project.actor()

    def namespace_of(name: str) -> str:
        return fixed or project.namespace_for(actor, project.project_id(str(name)))

    runtime = migrated_runtime()
    found = written = 0
    try:
        records = claude_mem.records(args.path, namespace_of)
        while chunk := list(itertools.islice(records, 500)):
            found += len(chunk)
            written += _write_records(runtime, chunk, args.dry_run)
    except sqlite3.Error as exc:
        print(f"wakemark import: {args.path}: not a claude-mem database ({exc})", file=sys.stderr)
        return 1
    finally:
        runtime.close()
    verb = "would write" if args.dry_run else "wrote"
    print(f"{found} claude-mem record(s); {verb} {written} new record(s)", file=sys.stderr)
    return 0


def _write_records(runtime: Any, records: list[Any], dry_run: bool) -> int:
    """Write the records not stored yet, in one transaction; returns how many are new."""
    storage = runtime.storage
    have = {r.record_id for r in storage.get_memory_records([r.record_id for r in records])}
    new = [r for r in records if r.record_id not in have]
    if new and not dry_run:
        with storage.transaction() as tx:
            for record in new:
                tx.put_memory_record(record)
    return len(new)


def _put(runtime: Any, events: list[Any], dry_run: bool) -> int:
    if dry_run or not events:
        return 0
    return sum(r.stored for r in runtime.storage.put_events(events))


def _size(stream: Any) -> int:
    try:
        return os.fstat(stream.fileno()).st_size
    except (OSError, ValueError):
        return 0


def _summary(report: Any, when: str) -> str:
    lines, w = report.lines, report.written
    verb = "would write" if report.dry_run else "wrote"
    history = f" with {report.versions} older version(s)" if report.versions else ""
    text = (
        f"{when}: read {lines['record']} record(s){history}, {lines['turn']} turn(s),"
        f" {lines['event']} event(s); {verb} {w.records} record(s) ({w.vectors} with a"
        f" vector), {w.turns} turn(s), {w.events} event(s); the rest already existed"
    )
    if report.vectors_dropped:
        text += f"; {report.vectors_dropped} vector(s) of another model dropped"
    if not report.dry_run and w.records > w.vectors:
        text += "\nrecords without a vector are embedded by the server's backfill"
        text += " (or run `wakemark backfill`)"
    return text

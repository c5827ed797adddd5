"""``wakemark token create|list|revoke``: scoped API tokens, on the configured database.

Like ``wakemark migrate`` this works on the database directly (no server needed), and
applies pending migrations first. The secret is printed once and stored only hashed.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:  # the CLI imports storage only when a command opens the database
    from wakemark.shared.storage import AuditLog, Tokens, Transactions, Upkeep

    class TokenStorage(Tokens, AuditLog, Upkeep, Transactions, Protocol):
        """Tokens and the audit log to list (``wakemark token``, ``wakemark audit``), the
        projects a token may name, and transactions that write a token with its audit
        entry."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    create = sub.add_parser("create", help="create a token and print its secret once")
    create.add_argument("--actor", required=True, help="the actor the token is limited to")
    create.add_argument(
        "--project", help="limit it to one project: its id (see GET /v1/projects) or root path"
    )
    create.add_argument(
        "--new-project",
        action="store_true",
        help="allow a --project with nothing stored yet (a typo would give a useless token)",
    )
    create.add_argument("--read-only", action="store_true", help="refuse every write")
    create.add_argument("--expires", metavar="DURATION", help="e.g. 90m, 12h, 30d, 2w")
    create.add_argument("--name", default="", help="a label for `token list` and the audit log")
    sub.add_parser("list", help="every token: scope, flags, dates (never the secret)")
    revoke = sub.add_parser("revoke", help="revoke a token (effective within seconds)")
    revoke.add_argument("token_id", metavar="ID", help="the token's id, as `token list` shows it")


@contextmanager
def open_database() -> Iterator[TokenStorage]:
    from wakemark.services.cli.migrate import migrated_runtime

    runtime = migrated_runtime()
    try:
        yield runtime.storage
    finally:
        runtime.close()


def operator() -> str:
    """Who the audit log names for a CLI action."""
    from wakemark.shared import project

    return "cli:" + project.actor()


def run(args: argparse.Namespace) -> int:
    from wakemark.shared import project, tokens

    if args.action == "create":
        try:
            expires = tokens.parse_duration(args.expires) if args.expires else None
        except ValueError as exc:
            print(f"wakemark: --expires: {exc}", file=sys.stderr)
            return 2
        pid = args.project
        if pid and pid.startswith("/"):
            pid = project.project_id(os.path.normpath(pid))
        with open_database() as storage:
            if pid and not args.new_project and not _known(storage, scope(args.actor, pid)):
                print(
                    f"wakemark: no project {args.project!r} for actor {args.actor!r} in this"
                    " database (see GET /v1/projects); --new-project creates the token anyway",
                    file=sys.stderr,
                )
                return 2
            try:
                token, secret = tokens.create(
                    storage, actor=args.actor, project=pid, read_only=args.read_only,
                    expires=expires, name=args.name, who=operator(),
                )  # fmt: skip
            except ValueError as exc:
                print(f"wakemark: {exc}", file=sys.stderr)
                return 2
        print(f"created {token.token_id} for {scope(token.actor, token.project)}", file=sys.stderr)
        print("the secret is shown only this once:", file=sys.stderr)
        print(secret)
        return 0
    if args.action == "list":
        with open_database() as storage:
            rows = storage.list_tokens()
        head = ("id", "name", "scope", "read-only", "created", "expires", "last used", "revoked")
        table = [head] + [
            (
                t.token_id,
                t.name or "-",
                scope(t.actor, t.project),
                "yes" if t.read_only else "no",
                when(t.created_at),
                when(t.expires_at),
                when(t.last_used_at),
                when(t.revoked_at),
            )  # fmt: skip
            for t in rows
        ]
        print_table(table)
        return 0
    with open_database() as storage:
        if not tokens.revoke(storage, args.token_id, operator()):
            print(f"wakemark: no active token {args.token_id}", file=sys.stderr)
            return 1
    print(f"revoked {args.token_id}")
    return 0


def _known(storage: TokenStorage, namespace: str) -> bool:
    return any(p["namespace"] == namespace for p in storage.projects())


def scope(actor: str, project_id: str | None) -> str:
    return f"/actor/{actor}/" + (f"project/{project_id}/" if project_id else "")


def when(value: datetime | None) -> str:
    return value.strftime("%Y-%m-%d %H:%M") if value else "-"


def print_table(rows: Sequence[tuple[str, ...]]) -> None:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for row in rows:
        print("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip())

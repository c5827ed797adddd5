"""``wakemark verify [--project DIR] [--retire [--yes]]``: this project's memories checked
against its files now (``shared/retrieval/staleness.py``).

Prints how many are current, changed, gone and unchecked, then each gone one. With
``--retire`` the gone ones are deleted (with their vectors and index rows, one audit
entry), a dry run unless ``--yes``. Runs as the user, on this machine: it reads the
project's files itself, whatever server stores the memories. Exit codes: 0 done, 2 bad
arguments.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections import Counter
from pathlib import Path

from wakemark.shared.retrieval.staleness import Verdict

PAGE = 500


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--project", metavar="DIR", help="the project (default: the cwd's)")
    parser.add_argument("--retire", action="store_true", help="delete the gone memories")
    parser.add_argument("--yes", action="store_true", help="with --retire: delete (else count)")


def run(args: argparse.Namespace) -> int:
    from wakemark.services.cli.migrate import migrated_runtime
    from wakemark.shared import project
    from wakemark.shared.config import Settings, prepare_home
    from wakemark.shared.models import utcnow
    from wakemark.shared.retrieval.staleness import CodeCheck, in_home
    from wakemark.shared.storage import AuditEntry

    if args.yes and not args.retire:
        print("wakemark: --yes goes with --retire", file=sys.stderr)
        return 2
    start = args.project or project.agent_start_dir()
    if not os.path.isdir(start):  # moved or deleted: a directory above it is no answer
        print(f"wakemark: --project {start}: no such directory", file=sys.stderr)
        return 2
    root = project.find_root(start)
    if root is None:
        print(f"wakemark: no project at or above {start} (no .git or marker)", file=sys.stderr)
        return 2
    settings = Settings.from_env()
    if settings.backend == "sqlite":
        prepare_home(settings)  # the default home adopts the former name's
        if not settings.sqlite_path.exists():
            # An empty database made here would report every project as having no memories.
            print(
                f"wakemark: no memories on this machine ({settings.sqlite_path} does not"
                " exist); a team server's client sets WAKEMARK_DATABASE_URL to the server's"
                " database",
                file=sys.stderr,
            )
            return 2
    actor = project.actor()
    namespace = project.namespace_for(actor, project.project_id(root))
    runtime = migrated_runtime()
    try:
        storage = runtime.storage
        check = CodeCheck(storage)
        counts: Counter[str] = Counter()
        gone: dict[str, Verdict] = {}
        after = None
        while page := storage.list_anchors(namespace, PAGE, after):
            for anchors in page:
                verdict = check.verdict(anchors, root)
                counts[verdict.state] += 1
                if verdict.state == "gone":
                    gone[anchors.record_id] = verdict
            after = page[-1].record_id
        print(", ".join(f"{counts[s]} {s}" for s in ("current", "changed", "gone", "unchecked")))
        if counts["unchecked"] and not in_home(Path(root).resolve()):
            print(
                f"  unchecked: {root} is outside your home directory, and wakemark reads no "
                "file outside it (move the project under it to have its memories checked)"
            )
        for record in storage.get_memory_records(list(gone)):
            print(f"  gone  {record.record_id}  {record.title}  ({gone[record.record_id].why()})")
        if not args.retire or not gone:
            return 0
        if not args.yes:
            print(f"would retire {len(gone)} memory(ies); add --yes to delete them")
            return 0
        with storage.transaction() as tx:
            deleted = tx.delete_memory_records(list(gone))
            entry = AuditEntry(who=f"cli:{actor}", action="retire", namespace=namespace,
                               targets=tuple(deleted), count=len(deleted), at=utcnow())  # fmt: skip
            tx.audit(entry)
        print(f"retired {len(deleted)} memory(ies)")
        return 0
    finally:
        runtime.close()

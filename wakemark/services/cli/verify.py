"""``wakemark verify [--project DIR] [--retire [--yes]]``: this project's memories checked
against its files now (``shared/retrieval/staleness.py``).

Prints how many are current, changed, gone and unchecked, then each gone one. With
``--retire`` the gone ones are deleted (with their vectors and index rows, one audit
entry), a dry run unless ``--yes``. Runs as the user, on this machine: it reads the
project's files itself, whatever server stores the memories. Where the memories are:
the database it is configured with, or, with no database on this machine (a team
server's client), the server its hooks post to (``WAKEMARK_PORT``, ``WAKEMARK_TOKEN``),
which sends the records' anchors (``GET /v1/memories/anchors``) and retires the gone
ones (``POST /v1/memories/retire``); the check is the same either way. Exit codes: 0
done, 2 bad arguments or the server refused.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from wakemark.shared.retrieval.staleness import Verdict

if TYPE_CHECKING:
    from wakemark.services.mcp.client import ApiClient
    from wakemark.shared.config import Settings
    from wakemark.shared.storage import CodeAnchors, Storage

PAGE = 500  # the anchors route's largest page
RETIRE_BATCH = 1000  # the retire route's most ids


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--project", metavar="DIR", help="the project (default: the cwd's)")
    parser.add_argument("--retire", action="store_true", help="delete the gone memories")
    parser.add_argument("--yes", action="store_true", help="with --retire: delete (else count)")


class Memories(Protocol):
    """Where a project's memories are: this machine's database or the team server."""

    def anchors(self) -> Iterator[CodeAnchors]: ...
    def titles(self, record_ids: list[str]) -> dict[str, str]: ...
    def retire(self, record_ids: list[str]) -> list[str]: ...


class Stored:
    def __init__(self, storage: Storage, namespace: str, who: str) -> None:
        self.storage, self.namespace, self.who = storage, namespace, who

    def anchors(self) -> Iterator[CodeAnchors]:
        after = None
        while page := self.storage.list_anchors(self.namespace, PAGE, after):
            yield from page
            after = page[-1].record_id

    def titles(self, record_ids: list[str]) -> dict[str, str]:
        return {r.record_id: r.title for r in self.storage.get_memory_records(record_ids)}

    def retire(self, record_ids: list[str]) -> list[str]:
        from wakemark.shared.models import utcnow
        from wakemark.shared.storage import AuditEntry

        with self.storage.transaction() as tx:
            deleted = tx.delete_memory_records(record_ids)
            entry = AuditEntry(who=self.who, action="retire", namespace=self.namespace,
                               targets=tuple(deleted), count=len(deleted), at=utcnow())  # fmt: skip
            tx.audit(entry)
        return deleted


class Served:
    """The team server's, through its API: it sends the anchors, this machine's files
    are read here, and only ids go back."""

    def __init__(self, client: ApiClient, namespace: str) -> None:
        self.client, self.namespace = client, namespace
        self._titles: dict[str, str] = {}

    def anchors(self) -> Iterator[CodeAnchors]:
        from wakemark.shared.storage import CodeAnchors, FileAnchor

        after = None
        while True:
            page = self.client.get("/v1/memories/anchors", namespace=self.namespace, after=after)
            for item in page["items"]:
                self._titles[item["record_id"]] = item["title"]
                files = tuple(FileAnchor(f["path"], f["sha256"], f["blob"]) for f in item["files"])
                yield CodeAnchors(item["record_id"], self.namespace, None, files,
                                  tuple(item["identifiers"]), True)  # fmt: skip
            if (after := page["next"]) is None:
                return

    def titles(self, record_ids: list[str]) -> dict[str, str]:
        return {rid: self._titles[rid] for rid in record_ids}

    def retire(self, record_ids: list[str]) -> list[str]:
        deleted: list[str] = []
        for at in range(0, len(record_ids), RETIRE_BATCH):
            body = {"namespace": self.namespace, "ids": record_ids[at : at + RETIRE_BATCH]}
            deleted += self.client.request("POST", "/v1/memories/retire", body)["retired"]
        return deleted


@contextmanager
def memories(settings: Settings, namespace: str, actor: str) -> Iterator[Memories]:
    from wakemark.services.mcp.client import client_for

    if settings.backend == "sqlite" and not settings.sqlite_path.exists():
        # No database here: the memories are the server's (an empty database made here
        # would report every project as having none).
        yield Served(client_for(settings), namespace)
        return
    from wakemark.services.cli.migrate import migrated_runtime

    runtime = migrated_runtime()
    try:
        yield Stored(runtime.storage, namespace, f"cli:{actor}")
    finally:
        runtime.close()


def run(args: argparse.Namespace) -> int:
    from wakemark.services.mcp.client import ApiError, ApiUnavailable
    from wakemark.shared import project
    from wakemark.shared.config import Settings, prepare_home

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
    actor = project.actor()
    namespace = project.namespace_for(actor, project.project_id(root))
    try:
        with memories(settings, namespace, actor) as found:
            return _verify(found, root, args)
    except ApiUnavailable as exc:
        print(
            f"wakemark: no database on this machine ({settings.sqlite_path} does not exist), "
            f"and the server its hooks post to could not be asked: {exc}",
            file=sys.stderr,
        )
        return 2
    except ApiError as exc:
        print(f"wakemark: verify failed: {exc.message}", file=sys.stderr)
        return 2


def _verify(found: Memories, root: str, args: argparse.Namespace) -> int:
    from wakemark.shared.retrieval.staleness import CodeCheck, in_home

    check = CodeCheck(None)  # type: ignore[arg-type]  # verdict() reads no stored anchors
    counts: Counter[str] = Counter()
    gone: dict[str, Verdict] = {}
    for anchors in found.anchors():
        verdict = check.verdict(anchors, root)
        counts[verdict.state] += 1
        if verdict.state == "gone":
            gone[anchors.record_id] = verdict
    print(", ".join(f"{counts[s]} {s}" for s in ("current", "changed", "gone", "unchecked")))
    if counts["unchecked"] and not in_home(Path(root).resolve()):
        print(
            f"  unchecked: {root} is outside your home directory, and wakemark reads no "
            "file outside it (move the project under it to have its memories checked)"
        )
    for record_id, title in found.titles(list(gone)).items():
        print(f"  gone  {record_id}  {title}  ({gone[record_id].why()})")
    if not args.retire or not gone:
        return 0
    if not args.yes:
        print(f"would retire {len(gone)} memory(ies); add --yes to delete them")
        return 0
    print(f"retired {len(found.retire(list(gone)))} memory(ies)")
    return 0

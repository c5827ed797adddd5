"""Code anchors: what a record is about in the project's code (the files it touched or
cited, each with its content hash at capture, and the identifiers it names), kept so the
record can be checked against the project's files as they are now."""

from __future__ import annotations

import abc
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True)
class FileAnchor:
    path: str  # relative to the project root
    sha256: str | None  # None: the file did not exist (or could not be read) at capture
    blob: str | None = None  # the git blob id, when the project is a git repository
    # The file's (mtime_ns, size) when it was hashed: a check that finds them unmoved
    # knows the hash without reading the file.
    mtime_ns: int | None = None
    size: int | None = None


@dataclass(frozen=True)
class CodeAnchors:
    record_id: str
    namespace: str
    root: str | None  # the project root at capture
    files: tuple[FileAnchor, ...]
    identifiers: tuple[str, ...]  # each defined in a cited file at capture
    # False: a server that may not read this project's files (a team server) waits for
    # the client's first report of the cited files not in ``edited``.
    hashed: bool
    # The cited files whose hash the client sent with the turn's own edit (a team server):
    # kept as the turn left them, never replaced by a later report.
    edited: tuple[str, ...] = ()


class AnchorsTx(Protocol):
    @abc.abstractmethod
    def put_anchors(self, anchors: CodeAnchors) -> None:
        """Store (or replace) a record's anchors. Raises NotFoundError if the record is
        not stored: anchors live as long as their record."""


class Anchors(Protocol):
    @abc.abstractmethod
    def get_anchors(self, record_ids: Sequence[str]) -> dict[str, CodeAnchors]:
        """The anchors of those records that have any, by record id."""

    @abc.abstractmethod
    def list_anchors(
        self, namespace: str, limit: int = 500, after: str | None = None
    ) -> list[CodeAnchors]:
        """The anchors under the namespace (prefix), by record id; ``after``: the
        previous page's last record id."""

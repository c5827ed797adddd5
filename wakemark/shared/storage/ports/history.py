"""A record's history: the older versions of the current record of a subject.

When a new record is about the same subject as a current one (the extraction decides,
``wakemark.shared.extraction.subject``), the old one leaves the records (no search, list
or injection sees it) and becomes a version of the new one. The versions of a subject
form a chain: each names the record that replaced it (``superseded_by``) and the current
record of the chain (``current_id``). Deleting the current record deletes its versions.
"""

from __future__ import annotations

import abc
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol

import numpy as np

from wakemark.shared.models import MemoryRecord
from wakemark.shared.storage.ports.anchors import CodeAnchors


@dataclass(frozen=True)
class Version:
    record: MemoryRecord  # as it was when it was replaced
    current_id: str
    superseded_by: str
    superseded_at: datetime
    anchors: CodeAnchors | None = None


class HistoryTx(Protocol):
    @abc.abstractmethod
    def lock_subjects(self, namespace: str) -> None:
        """Hold, until the transaction ends, the lock that makes transactions deciding
        the subjects of one namespace's new records take turns: what
        ``subject_neighbours`` reads after it stays current until the commit."""

    @abc.abstractmethod
    def subject_neighbours(
        self, namespace: str, vectors: np.ndarray, limit: int
    ) -> list[list[tuple[MemoryRecord, float]]]:
        """For each row of ``vectors``, the current records of exactly ``namespace`` that
        have an embedding, nearest to it by cosine (exact, best first), as this
        transaction sees them."""

    @abc.abstractmethod
    def session_recent(
        self, turn_id: str, vector: np.ndarray, lookback: int
    ) -> list[tuple[MemoryRecord, float]]:
        """The session's recent records for the turn ``turn_id``: the records of the
        ``lookback`` turns of its session opened before it, nearest turn first and newest
        record first (a turn that wrote none because all were repeats stands for the
        record it repeated, ``mark_turn_extracted``'s ``repeat_of``), each as the current
        record of its chain now (a version gives its current one) and once, with its
        cosine to ``vector``; those without an embedding left out. The first is the
        session's previous record."""

    @abc.abstractmethod
    def session_versions(
        self, turn_id: str, current_id: str, vector: np.ndarray, lookback: int
    ) -> list[tuple[MemoryRecord, float]]:
        """The records that the ``lookback`` turns of ``turn_id``'s session opened before
        it stand for (as ``session_recent`` reads them) that are now versions of the
        current record ``current_id``, each once with its cosine to ``vector``, nearest
        first; those without a vector of the stored model (imported, superseded without
        a vector, or before a rebuild's swap) left out."""

    @abc.abstractmethod
    def supersede(self, old_id: str, new_id: str, at: datetime) -> bool:
        """Make the current record ``old_id`` a version of the current record ``new_id``
        (its versions follow it); it leaves the searched vectors, but the version keeps
        its embedding, and the stored model's identity, for ``session_versions``; its
        anchors go with the version.
        False when ``old_id`` is not a current record."""

    @abc.abstractmethod
    def put_version(self, version: Version) -> None:
        """Store a version (import). Raises NotFoundError if ``current_id`` is not a
        current record; an id already a version is replaced."""

    @abc.abstractmethod
    def take_version(self, record_id: str) -> Version | None:
        """Remove a version and return it (None: no such version)."""

    @abc.abstractmethod
    def move_versions(self, record_ids: Sequence[str], current_id: str) -> None:
        """Attach these versions to another current record of their chain."""


class History(Protocol):
    @abc.abstractmethod
    def get_history(self, record_id: str) -> list[Version]:
        """The versions of the current record ``record_id``, newest first (empty for a
        record without history or an unknown id)."""

    @abc.abstractmethod
    def get_version(self, record_id: str) -> Version | None:
        """The version ``record_id`` (None: it is not one; a current record is not)."""

    @abc.abstractmethod
    def list_versions(
        self, namespace: str, limit: int = 500, after: str | None = None
    ) -> list[Version]:
        """The versions under the namespace (prefix), by record id; ``after``: the
        previous page's last record id."""

"""Memory records: what extraction keeps of the turns, and their curation."""

from __future__ import annotations

import abc
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol

from wakemark.shared.models import MemoryRecord


@dataclass(frozen=True)
class MemoryFilter:
    """Records under ``namespace`` (a full namespace or a prefix); each set field narrows."""

    namespace: str
    observation_type: str | None = None
    before: datetime | None = None  # created_at < before
    after: datetime | None = None  # created_at >= after
    session_id: str | None = None  # a source event of the record is of this session
    pinned: bool | None = None  # only pinned (True) or only unpinned (False) records


@dataclass(frozen=True)
class PageKey:
    """Where a page of records ends, in their order: the next page starts after it, with
    an index seek, however deep it is (an OFFSET walks every row it skips)."""

    created_at: datetime
    record_id: str
    pinned: bool = False

    @classmethod
    def of(cls, record: Any) -> PageKey:
        return cls(record.created_at, record.record_id, record.pinned)


@dataclass(frozen=True)
class Page:
    items: list[Any]
    total: int | None  # None: not counted (``list_memory_records(count=False)``)
    limit: int
    next: PageKey | None  # None: nothing after this page (a full page always has one)

    @classmethod
    def of(cls, items: list[Any], total: int | None, limit: int) -> Page:
        return cls(items, total, limit, PageKey.of(items[-1]) if len(items) == limit else None)


class RecordsTx(Protocol):
    """The record writes of a transaction."""

    @abc.abstractmethod
    def put_memory_record(self, record: MemoryRecord) -> None: ...

    @abc.abstractmethod
    def delete_memory_records(self, record_ids: Sequence[str]) -> list[str]:
        """Cascade delete; returns the ids that existed (each namespace's epoch bumps)."""

    @abc.abstractmethod
    def replace_record_text(self, record: MemoryRecord) -> None:
        """Overwrite the stored record's title, summary, facts, concepts and
        files_touched with ``record``'s, and clear its embedding (the text changed): the
        full-text entry follows, the namespace's epoch bumps, the record awaits
        re-embedding. Raises NotFoundError for an unknown id."""


class Records(Protocol):
    @abc.abstractmethod
    def put_memory_record(self, record: MemoryRecord) -> None:
        """Raises DuplicateRecordError for an id already stored."""

    @abc.abstractmethod
    def delete_memory_records(self, record_ids: Sequence[str]) -> list[str]:
        """See ``RecordsTx.delete_memory_records``."""

    @abc.abstractmethod
    def get_memory_record(self, record_id: str) -> MemoryRecord | None: ...

    @abc.abstractmethod
    def get_memory_records(self, record_ids: Sequence[str]) -> list[MemoryRecord]:
        """Records in the order of ``record_ids``; unknown ids are skipped."""

    @abc.abstractmethod
    def list_memory_records(
        self,
        namespace: str,
        limit: int = 50,
        after: PageKey | None = None,
        pinned_first: bool = False,
        count: bool = True,
    ) -> Page:
        """Newest first (created_at desc, record_id desc); pinned ones first if asked.
        ``after``: the ``next`` of the previous page (same ``pinned_first``); the page
        holds the records past it. ``count=False``: ``total`` is None."""

    def record_pages(
        self, namespace: str, limit: int = 500, pinned_first: bool = False
    ) -> Iterator[list[MemoryRecord]]:
        """Every record under the namespace, one ``list_memory_records`` page at a time."""
        after: PageKey | None = None
        while True:
            page = self.list_memory_records(
                namespace, limit, after, pinned_first=pinned_first, count=False
            )
            if page.items:
                yield page.items
            if (after := page.next) is None:
                return

    @abc.abstractmethod
    def set_pinned(self, record_id: str, pinned: bool) -> MemoryRecord:
        """Raises NotFoundError for an unknown id."""

    @abc.abstractmethod
    def edit_memory_record(
        self,
        record_id: str,
        title: str | None = None,
        summary: str | None = None,
        facts: Sequence[str] | None = None,
    ) -> MemoryRecord:
        """Store a correction of the given fields (None: unchanged), stamp ``edited_at``
        and clear the embedding so the embed job redoes it; the full-text entry follows in
        the same statement. Raises NotFoundError for an unknown id."""

    @abc.abstractmethod
    def find_memory_ids(self, where: MemoryFilter) -> list[str]:
        """Ids of the records ``where`` selects, oldest first (what a bulk delete takes)."""

    @abc.abstractmethod
    def timeline(self, record_id: str, before: int, after: int) -> list[MemoryRecord]:
        """The record and its neighbours in its namespace, in source-turn order
        (created_at, record_id). Raises NotFoundError for an unknown id."""

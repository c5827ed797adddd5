"""Vectors: the records' embeddings, as the embed job writes them and retrieval loads
them."""

from __future__ import annotations

import abc
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from wakemark.shared.models import MemoryRecord


@dataclass(frozen=True)
class EmbeddingMatrix:
    """Embedded records as columns: row ``i`` of every column is one record.

    Built without a Python object per vector, so a large namespace loads as one
    array. ``total`` and ``watermark`` come from the same snapshot as the rows.
    """

    record_ids: list[str]
    created_at: np.ndarray  # (n,) float64 seconds since the Unix epoch
    observation_types: list[str]
    vectors: np.ndarray  # (n, 384) float32, C-contiguous; the caller owns it (writable)
    total: int  # every embedded record under the namespace, even when this is a delta
    watermark: int  # opaque; pass as ``since`` to list only what changed after this

    def __len__(self) -> int:
        return len(self.record_ids)


class VectorsTx(Protocol):
    """The embedding writes of a transaction."""

    @abc.abstractmethod
    def put_embedding(self, record_id: str, vector: np.ndarray) -> None:
        """Raises NotFoundError for an unknown record."""


class Vectors(Protocol):
    # True: the database searches vectors itself (``count_embeddings``, ``vector_cosines``
    # and ``Search.search_vector``), for namespaces too large for the process's cache.
    vector_index: bool

    @abc.abstractmethod
    def put_embedding(self, record_id: str, vector: np.ndarray) -> None:
        """See ``VectorsTx.put_embedding``."""

    @abc.abstractmethod
    def has_embedding(self, record_id: str) -> bool: ...

    @abc.abstractmethod
    def list_embeddings(self, namespace: str, since: int | None = None) -> EmbeddingMatrix:
        """Embedded records under the namespace (prefix), oldest first.

        With ``since`` (the ``watermark`` of an earlier result): at least every record
        embedded (or re-embedded) after that result's snapshot, possibly a few more; a
        record embedded at or before it and unchanged since is left out. Deletions (and
        cleared embeddings) show only in ``total`` and ``embedded_ids``.
        """

    @abc.abstractmethod
    def embedded_ids(self, namespace: str) -> list[str]:
        """Ids of every embedded record under the namespace (no vectors: cheap)."""

    @abc.abstractmethod
    def count_embeddings(self, namespace: str) -> int:
        """Embedded records under the namespace (``vector_index`` backends; the others
        raise NotImplementedError)."""

    @abc.abstractmethod
    def vector_cosines(
        self, namespace: str, vector: np.ndarray, record_ids: Sequence[str]
    ) -> dict[str, float]:
        """The cosine of ``vector`` with each of ``record_ids`` embedded under the
        namespace (``vector_index`` backends; the others raise NotImplementedError)."""

    @abc.abstractmethod
    def records_missing_embedding(
        self, limit: int, namespace: str | None = None
    ) -> list[MemoryRecord]:
        """Oldest first."""

    @abc.abstractmethod
    def clear_embeddings(self, namespace: str | None = None) -> int:
        """Set embeddings to NULL (``wakemark backfill --rebuild``); returns the count."""

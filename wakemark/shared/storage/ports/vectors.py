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
    model: str | None = None  # the identity of the model that made them (``EmbeddingModels``)

    def __len__(self) -> int:
        return len(self.record_ids)


@dataclass(frozen=True)
class EmbeddingModels:
    """Which model made the vectors: identities (``Embedder.identity``), or None."""

    model: str | None  # the records' vectors (None: not known yet, ``claim_model``)
    staged: str | None  # the staged vectors of a rebuild under way (None: none is)
    # Where each was loaded from, absolute (``Embedder.switch``); None: not recorded.
    path: str | None = None
    staged_path: str | None = None


class VectorsTx(Protocol):
    """The embedding writes of a transaction."""

    @abc.abstractmethod
    def put_embedding(self, record_id: str, vector: np.ndarray) -> None:
        """Raises NotFoundError for an unknown record."""

    @abc.abstractmethod
    def put_staged(self, record_id: str, vector: np.ndarray) -> None:
        """The record's vector by the rebuild's model; raises NotFoundError."""

    @abc.abstractmethod
    def embedding_models(self) -> EmbeddingModels:
        """The models as this transaction sees them until it commits: a rebuild's swap
        waits for it, so a vector written here is of the model read here. Called first
        in the transaction: the swap holds the models while it takes the records (every
        row on SQLite, the table on Postgres), so a transaction that had read or written
        a record first would deadlock with it."""


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
    def change_stamp(self, namespace: str) -> int:
        """A number that moves with every record of the namespace (prefix) written,
        deleted or embedded by any process, read in one cheap statement: how a process
        without shared epochs (no Redis) learns that another one (a second gunicorn
        worker) changed the vectors it caches. SQLite's counts every namespace's writes;
        Postgres' only the namespace's (``namespace_record_counts.changes``)."""

    @abc.abstractmethod
    def count_embeddings(self, namespace: str) -> int:
        """Embedded records under the namespace (``vector_index`` backends; the others
        raise NotImplementedError)."""

    @abc.abstractmethod
    def vector_cosines(
        self,
        namespace: str,
        vector: np.ndarray,
        record_ids: Sequence[str],
        model: str | None = None,
    ) -> dict[str, float]:
        """The cosine of ``vector`` with each of ``record_ids`` embedded under the
        namespace (``vector_index`` backends; the others raise NotImplementedError);
        ``model`` as ``Search.search_vector``'s."""

    @abc.abstractmethod
    def records_missing_embedding(
        self, limit: int, namespace: str | None = None
    ) -> list[MemoryRecord]:
        """Oldest first."""

    @abc.abstractmethod
    def embedding_models(self) -> EmbeddingModels: ...

    @abc.abstractmethod
    def claim_model(self, model: str, path: str | None = None) -> EmbeddingModels:
        """Record ``model`` (its file at ``path``) as the one that made the records'
        vectors if none is recorded yet (a database from before models were recorded, or
        a new one); the models as they are then."""

    @abc.abstractmethod
    def start_rebuild(self, model: str, path: str | None = None) -> int:
        """Stage vectors of ``model``, its file at ``path`` (``wakemark backfill
        --rebuild``); staged vectors of another model are dropped. Returns how many
        records lack a staged vector."""

    @abc.abstractmethod
    def records_missing_staged(self, limit: int, after: str = "") -> list[MemoryRecord]:
        """Records without a staged vector whose id sorts after ``after``, in id order."""

    @abc.abstractmethod
    def swap_staged(self, model: str) -> bool:
        """In one transaction, when every record has a vector staged by ``model``: the
        staged vectors become the records' vectors and ``model`` their model. False (and
        nothing changed) while a record lacks one or another rebuild took over. Postgres
        first builds the staged vectors' indexes, then renames the columns (no row is
        written); it raises SwapBlockedError when other transactions kept it from
        locking the table each time it tried."""

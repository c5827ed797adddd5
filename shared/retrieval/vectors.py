"""Per-namespace in-process vector matrix, cached by (namespace, epoch), LRU-bounded."""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime

import numpy as np

from shared.models import EMBEDDING_DIM, OBSERVATION_TYPES
from shared.retrieval.fusion import VectorCandidate
from shared.storage.base import EmbeddingRow

_TYPE_CODE = {name: code for code, name in enumerate(OBSERVATION_TYPES)}


@dataclass(frozen=True)
class VectorSet:
    """Unit-normalized float32 rows with the filter columns kept beside them."""

    ids: list[str]
    matrix: np.ndarray  # (n, 384) float32, rows of norm 1 (or 0 for a zero vector)
    created_ts: np.ndarray  # (n,) float64 seconds since the epoch
    types: np.ndarray  # (n,) int8 code of observation_type, -1 if unknown

    @classmethod
    def build(cls, rows: Sequence[EmbeddingRow]) -> VectorSet:
        n = len(rows)
        matrix = np.empty((n, EMBEDDING_DIM), dtype=np.float32)
        created = np.empty(n, dtype=np.float64)
        types = np.empty(n, dtype=np.int8)
        ids: list[str] = []
        for i, row in enumerate(rows):
            matrix[i] = row.vector
            created[i] = row.created_at.timestamp()
            types[i] = _TYPE_CODE.get(row.observation_type, -1)
            ids.append(row.record_id)
        norms = np.linalg.norm(matrix, axis=1, keepdims=True)
        np.divide(matrix, norms, out=matrix, where=norms > 0)
        return cls(ids, matrix, created, types)

    @property
    def nbytes(self) -> int:
        return self.matrix.nbytes + self.created_ts.nbytes + self.types.nbytes

    def top(
        self,
        query: np.ndarray,
        k: int,
        observation_type: str | None = None,
        since: datetime | None = None,
    ) -> list[VectorCandidate]:
        """The ``k`` nearest rows by cosine, best first, after the filters."""
        if not self.ids or k <= 0:
            return []
        q = np.asarray(query, dtype=np.float32).reshape(-1)
        norm = float(np.linalg.norm(q))
        if q.shape[0] != EMBEDDING_DIM or not np.isfinite(norm) or norm == 0.0:
            raise ValueError("query vector has the wrong shape or norm")
        scores = self.matrix @ (q / norm)
        mask = None
        if observation_type is not None:
            mask = self.types == _TYPE_CODE.get(observation_type, -2)
        if since is not None:
            recent = self.created_ts >= since.timestamp()
            mask = recent if mask is None else mask & recent
        if mask is not None:
            # Masked rows sink below any real cosine (which is >= -1).
            scores = np.where(mask, scores, -np.inf)
            k = min(k, int(mask.sum()))
            if k == 0:
                return []
        k = min(k, len(self.ids))
        idx = np.argpartition(-scores, k - 1)[:k] if k < len(self.ids) else np.arange(k)
        idx = idx[np.argsort(-scores[idx], kind="stable")]
        return [
            VectorCandidate(self.ids[i], float(self.created_ts[i]), float(scores[i])) for i in idx
        ]


class VectorCache:
    """Namespace -> VectorSet, valid while the namespace's epoch is unchanged.

    The epoch is read before loading, so a write that lands during a load leaves the
    entry one epoch behind and the next search reloads it.
    """

    def __init__(
        self,
        load: Callable[[str], Sequence[EmbeddingRow]],
        epoch_of: Callable[[str], int],
        max_namespaces: int = 4,
    ) -> None:
        self._load = load
        self._epoch_of = epoch_of
        self._max = max_namespaces
        self._entries: OrderedDict[str, tuple[int, VectorSet]] = OrderedDict()
        self._lock = threading.Lock()
        self._load_lock = threading.Lock()  # one load at a time: no stampede on a cold cache
        self.loads = 0

    def get(self, namespace: str) -> VectorSet:
        epoch = self._epoch_of(namespace)
        hit = self._lookup(namespace, epoch)
        if hit is not None:
            return hit
        with self._load_lock:
            hit = self._lookup(namespace, epoch)
            if hit is not None:
                return hit
            vset = VectorSet.build(self._load(namespace))
            self.loads += 1
            with self._lock:
                self._entries[namespace] = (epoch, vset)
                self._entries.move_to_end(namespace)
                while len(self._entries) > self._max:
                    self._entries.popitem(last=False)
            return vset

    def _lookup(self, namespace: str, epoch: int) -> VectorSet | None:
        with self._lock:
            entry = self._entries.get(namespace)
            if entry is None or entry[0] != epoch:
                return None
            self._entries.move_to_end(namespace)
            return entry[1]

    def stats(self) -> dict[str, int]:
        with self._lock:
            return {
                "namespaces": len(self._entries),
                "rows": sum(len(v.ids) for _, v in self._entries.values()),
                "bytes": sum(v.nbytes for _, v in self._entries.values()),
                "loads": self.loads,
            }

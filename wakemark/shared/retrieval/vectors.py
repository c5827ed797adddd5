"""Per-namespace in-process vector matrix, cached by (namespace, epoch), LRU within a
byte budget."""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from datetime import datetime
from functools import cached_property

import numpy as np
import simsimd
from threadpoolctl import threadpool_limits

from wakemark.shared.heap import release_free_memory
from wakemark.shared.models import EMBEDDING_DIM, OBSERVATION_TYPES
from wakemark.shared.retrieval.fusion import Candidate
from wakemark.shared.storage import EmbeddingMatrix

# One BLAS thread per process. The products here are small (a search's candidates, the
# gate's hits), and OpenBLAS's extra threads keep spinning after each call, taking the
# CPU from the lexical leg and the query embedding that run beside it (bench/search).
threadpool_limits(1, user_api="blas")

_TYPE_CODE = {name: code for code, name in enumerate(OBSERVATION_TYPES)}
HEADROOM = 1 / 8  # spare rows kept after a refresh, so the next appends copy nothing
# A search reads every row once: as int8 codes it reads a quarter of the float32 bytes
# (the scan is bound by memory, not arithmetic), through simsimd's SIMD int8 dot product.
# Components of a unit vector of 384 dimensions stay far below 127 / SCALE (MiniLM's
# largest is about 0.25); one past it is clipped, which only moves it in the first pass.
SCALE = 320.0
ENCODE_ROWS = 4096
# The first pass keeps this many rows per row asked for (at least RESCORE_MIN), and
# those are ranked again by their float16 vectors: the codes' error (a cosine off by a
# few thousandths at most) never reorders what is returned.
RESCORE = 4
RESCORE_MIN = 256
# What a row costs beside its int8 code and float16 vector: the created time and type
# code, the id's str object and list slot, and its entry in the id -> row dict (``_rows``).
ROW_OVERHEAD = 8 + 1 + 86 + 104
ROW_BYTES = EMBEDDING_DIM * 3 + ROW_OVERHEAD
RECHECK_S = 60.0  # how often a namespace left to the database is counted again
# With a database to search instead, a namespace is loaded only into room that entries
# searched within this long leave free: several clients over more namespaces than fit
# would otherwise evict and reload them in turn (bench scale: 182 loads and 139
# evictions in one worker over 900 searches, 28 % of them past the deadline).
IDLE_S = 300.0
# Namespaces held (cached or counted as left to the database), whatever their bytes: an
# empty namespace's entry costs nothing against the byte budget, so without this bound a
# client searching ever new project ids would add entries forever.
MAX_ENTRIES = 4096


def _normalize(matrix: np.ndarray) -> np.ndarray:
    """Rows scaled to norm 1 in place (a zero row stays zero)."""
    norms = np.linalg.norm(matrix, axis=1, keepdims=True)
    np.divide(matrix, norms, out=matrix, where=norms > 0)
    return matrix


def _encoded(vectors: np.ndarray) -> np.ndarray:
    """int8 codes of unit rows (or of one unit vector), a block at a time: a large
    namespace's float32 temporaries would otherwise peak at several times its codes."""
    out = np.empty(vectors.shape, np.int8)
    for lo in range(0, len(vectors), ENCODE_ROWS):
        block = vectors[lo : lo + ENCODE_ROWS] * SCALE
        np.rint(block, out=block)
        np.clip(block, -127, 127, out=block)
        out[lo : lo + ENCODE_ROWS] = block
    return out


def _codes(types: list[str]) -> np.ndarray:
    return np.fromiter((_TYPE_CODE.get(t, -1) for t in types), dtype=np.int8, count=len(types))


@dataclass(frozen=True)
class Rows:
    """The vectors of a set, two ways: int8 codes scanned by a search, float16 vectors
    that rank its candidates and answer the gate's cosines."""

    codes: np.ndarray  # (n, 384) int8
    halves: np.ndarray  # (n, 384) float16, rows of norm 1 (or 0 for a zero vector)

    @classmethod
    def of(cls, unit: np.ndarray) -> Rows:
        return cls(_encoded(unit), unit.astype(np.float16))

    def __len__(self) -> int:
        return self.codes.shape[0]

    @property
    def nbytes(self) -> int:
        return self.codes.nbytes + self.halves.nbytes

    def __getitem__(self, which: slice | np.ndarray) -> Rows:
        return Rows(self.codes[which], self.halves[which])

    def cosines(self, at: Sequence[int] | np.ndarray, unit: np.ndarray) -> np.ndarray:
        """The cosine of rows ``at`` with the unit float32 vector ``unit``."""
        return self.halves[at].astype(np.float32) @ unit

    def copy(self) -> Rows:
        return Rows(self.codes.copy(), self.halves.copy())

    def put(self, at: slice | np.ndarray, rows: Rows) -> None:
        self.codes[at], self.halves[at] = rows.codes, rows.halves

    @classmethod
    def empty(cls, n: int) -> Rows:
        return cls(np.empty((n, EMBEDDING_DIM), np.int8), np.empty((n, EMBEDDING_DIM), np.float16))


@dataclass(frozen=True)
class VectorSet:
    """Unit-normalized rows (``Rows``) with the filter columns kept beside them.

    ``rows`` may be the first rows of a larger ``buffer``: a refresh that only adds
    records writes them past the end, where no reader of this set ever looks, and returns
    a new set over the longer prefix. Rows inside a set are never written again.
    """

    ids: list[str]
    rows: Rows
    created_ts: np.ndarray  # (n,) float64 seconds since the epoch
    types: np.ndarray  # (n,) int8 code of observation_type, -1 if unknown
    watermark: int = 0  # the storage snapshot this set is current as of
    buffer: Rows | None = None  # what ``rows`` is a prefix of, if it has spare rows
    model: str | None = None  # the identity of the model that made the vectors

    @classmethod
    def build(cls, columns: EmbeddingMatrix) -> VectorSet:
        unit = _normalize(np.ascontiguousarray(columns.vectors, dtype=np.float32))
        created = np.asarray(columns.created_at, dtype=np.float64)
        types = _codes(columns.observation_types)
        ids = list(columns.record_ids)
        return cls(ids, Rows.of(unit), created, types, columns.watermark, None, columns.model)

    @property
    def nbytes(self) -> int:
        """What the set holds, spare buffer rows included (the cache's budget unit)."""
        rows = self.buffer if self.buffer is not None else self.rows
        return rows.nbytes + len(self.ids) * ROW_OVERHEAD

    def patched(self, delta: EmbeddingMatrix) -> VectorSet:
        """This set with ``delta``'s rows added or, for ids already here, replaced."""
        if not len(delta):
            return VectorSet(
                self.ids,
                self.rows,
                self.created_ts,
                self.types,
                delta.watermark,
                self.buffer,
                self.model,
            )
        rows = Rows.of(_normalize(np.ascontiguousarray(delta.vectors, dtype=np.float32)))
        created = np.asarray(delta.created_at, dtype=np.float64)
        types = _codes(delta.observation_types)
        where = {rid: i for i, rid in enumerate(self.ids)}
        old = np.array([where.get(rid, -1) for rid in delta.record_ids], dtype=np.int64)
        new = old < 0
        # Postgres may hand back rows already seen (written by a transaction that was
        # still open at the last snapshot's xmin): unchanged rows need no copy.
        seen = np.flatnonzero(~new)
        same = np.all(self.rows.halves[old[seen]] == rows.halves[seen], axis=1)
        same &= self.types[old[seen]] == types[seen]
        if same.all():
            keep = np.flatnonzero(new)
            added_ids = [delta.record_ids[i] for i in keep]
            return self._appended(
                added_ids, rows[keep], created[keep], types[keep], delta.watermark
            )
        # A re-embedded record: copy, never write a row a concurrent reader may be using.
        all_rows, created_all, types_all = (
            self.rows.copy(),
            self.created_ts.copy(),
            self.types.copy(),
        )
        hit = old[~new]
        all_rows.put(hit, rows[~new])
        created_all[hit], types_all[hit] = created[~new], types[~new]
        base = VectorSet(
            list(self.ids), all_rows, created_all, types_all, self.watermark, None, self.model
        )
        added = [rid for rid, is_new in zip(delta.record_ids, new, strict=True) if is_new]
        return base._appended(added, rows[new], created[new], types[new], delta.watermark)

    def _appended(
        self,
        ids: list[str],
        rows: Rows,
        created: np.ndarray,
        types: np.ndarray,
        watermark: int,
    ) -> VectorSet:
        n, k = len(self.ids), len(ids)
        buffer = self.buffer if self.buffer is not None else self.rows
        if len(buffer) < n + k:
            grown = Rows.empty(n + k + int((n + k) * HEADROOM) + 64)
            grown.put(slice(0, n), self.rows)
            buffer = grown
        buffer.put(slice(n, n + k), rows)
        return VectorSet(
            [*self.ids, *ids],
            buffer[: n + k],
            np.concatenate([self.created_ts, created]),
            np.concatenate([self.types, types]),
            watermark,
            buffer,
            self.model,
        )

    @cached_property
    def _rows(self) -> dict[str, int]:
        return {rid: i for i, rid in enumerate(self.ids)}

    def cosines(self, query: np.ndarray, ids: Collection[str]) -> dict[str, float]:
        """The cosine of each of ``ids`` that has a row here (the relevance gate's evidence
        for lexical hits the vector leg did not rank)."""
        rows = [(rid, self._rows[rid]) for rid in ids if rid in self._rows]
        if not rows:
            return {}
        q = np.asarray(query, dtype=np.float32).reshape(-1)
        q = q / (float(np.linalg.norm(q)) or 1.0)
        scores = self.rows.cosines([i for _, i in rows], q)
        return {rid: float(s) for (rid, _), s in zip(rows, scores, strict=True)}

    def keeping(self, alive: Collection[str]) -> VectorSet:
        """Only the rows whose id is in ``alive`` (a new, compact set)."""
        keep = np.fromiter((rid in alive for rid in self.ids), dtype=bool, count=len(self.ids))
        if keep.all():
            return self
        ids = [rid for rid, kept in zip(self.ids, keep, strict=True) if kept]
        rows, created, types = self.rows[keep], self.created_ts[keep], self.types[keep]
        return VectorSet(ids, rows, created, types, self.watermark, None, self.model)

    def top(
        self,
        query: np.ndarray,
        k: int,
        observation_type: str | None = None,
        since: datetime | None = None,
    ) -> list[Candidate]:
        """The ``k`` nearest rows by cosine (their ``score``), best first, after the filters."""
        if not self.ids or k <= 0:
            return []
        q = np.asarray(query, dtype=np.float32).reshape(-1)
        norm = float(np.linalg.norm(q))
        if q.shape[0] != EMBEDDING_DIM or not np.isfinite(norm) or norm == 0.0:
            raise ValueError("query vector has the wrong shape or norm")
        q = q / norm
        first = simsimd.cdist(_encoded(q), self.rows.codes, metric="dot", out_dtype="float32")
        scores = np.asarray(first).reshape(-1)
        eligible = len(self.ids)
        mask = None
        if observation_type is not None:
            mask = self.types == _TYPE_CODE.get(observation_type, -2)
        if since is not None:
            recent = self.created_ts >= since.timestamp()
            mask = recent if mask is None else mask & recent
        if mask is not None:
            # Masked rows sink below any real score.
            scores = np.where(mask, scores, -np.inf)
            eligible = int(mask.sum())
        k = min(k, eligible)
        if k == 0:
            return []
        depth = min(eligible, max(RESCORE_MIN, RESCORE * k))
        if depth < len(scores):
            idx = np.argpartition(-scores, depth - 1)[:depth]
        else:
            idx = np.arange(depth)
        cosine = self.rows.cosines(idx, q)
        best = np.argsort(-cosine, kind="stable")[:k]
        return [
            Candidate(self.ids[i], float(self.created_ts[i]), float(c))
            for i, c in zip(idx[best], cosine[best], strict=True)
        ]


log = logging.getLogger(__name__)

Loader = Callable[[str, int | None], EmbeddingMatrix]  # list_embeddings(namespace, since)


class VectorCache:
    """Namespace -> VectorSet, valid while the namespace's epoch is unchanged, the least
    recently used evicted past ``budget_bytes`` or ``max_entries``.

    The epoch is read before loading, so a write that lands during a load leaves the
    entry one epoch behind and the next search refreshes it. A refresh asks storage only
    for rows embedded since the entry's watermark and patches the set; deletions show as
    a count that no longer matches, and then (only then) the ids are listed to drop them.

    With ``count`` (the storage can search vectors itself: Postgres), a namespace is
    loaded only if its rows fit beside the entries searched within ``idle_s``; otherwise
    ``get`` answers None and the caller searches the database, and the namespace is
    counted again after ``RECHECK_S`` (and a write). Without it (SQLite, where this
    matrix is the only vector search) every namespace searched is loaded, the least
    recently used evicted, and one larger than the budget is held alone, over it.
    """

    def __init__(
        self,
        load: Loader,
        epoch_of: Callable[[str], int],
        embedded_ids: Callable[[str], list[str]],
        budget_bytes: int,
        count: Callable[[str], int] | None = None,
        idle_s: float = IDLE_S,
        max_entries: int = MAX_ENTRIES,
    ) -> None:
        self._load = load
        self._epoch_of = epoch_of
        self._embedded_ids = embedded_ids
        self._budget = budget_bytes
        self._count = count
        self._idle_s = idle_s
        self._max_entries = max_entries
        self._entries: OrderedDict[str, tuple[int, VectorSet]] = OrderedDict()
        self._used: dict[str, float] = {}  # ns -> when last searched
        self._elsewhere: dict[str, tuple[float, int]] = {}  # ns -> (when counted, rows)
        self._lock = threading.Lock()
        self._load_lock = threading.Lock()  # one load at a time: no stampede on a cold cache
        self._loading: dict[str, threading.Event] = {}  # background loads in flight
        self.loads = 0
        self.refreshes = 0
        self.evictions = 0

    def fresh(self) -> VectorCache:
        """An empty cache over the same sources (a forked child starts with one)."""
        return VectorCache(
            self._load,
            self._epoch_of,
            self._embedded_ids,
            self._budget,
            self._count,
            self._idle_s,
            self._max_entries,
        )

    def get_within(self, namespace: str, wait: float) -> VectorSet | None:
        """``get``, but a load or refresh (a whole large namespace, or a refresh after a
        large backfill) runs on a background thread, and None comes back if it takes over
        ``wait`` seconds; it goes on, for the next search. None at once for a namespace
        left to the database, before its epoch is read: the database answers whatever the
        epoch says, and reading it costs a round trip (Redis, or the database's change
        stamp)."""
        if self._searched_in_database(namespace):
            return None
        hit = self._lookup(namespace, self._epoch_of(namespace))
        if hit is not None:
            return hit
        if not self._load_in_background(namespace).wait(wait):
            return None
        return self.get(namespace)

    def held(self, namespace: str) -> VectorSet | None:
        """The namespace's set as last read, current or not (None if never loaded or
        evicted): what a search answers from while a refresh outlasts its wait."""
        with self._lock:
            entry = self._entries.get(namespace)
        return None if entry is None else entry[1]

    def rows(self, namespace: str) -> int | None:
        """The namespace's embedded rows as last seen (cached or counted), if known."""
        with self._lock:
            entry = self._entries.get(namespace)
            if entry is not None:
                return len(entry[1].ids)
            elsewhere = self._elsewhere.get(namespace)
        return elsewhere[1] if elsewhere is not None else None

    def _searched_in_database(self, namespace: str) -> bool:
        with self._lock:
            seen = self._elsewhere.get(namespace)
        if seen is None:
            return False
        if time.monotonic() - seen[0] >= RECHECK_S:
            self._load_in_background(namespace)  # counts again; loads it if it now fits
        return True

    def warm(self, namespace: str) -> None:
        """Start loading a namespace not cached yet, without waiting."""
        with self._lock:
            cold = namespace not in self._entries and namespace not in self._elsewhere
        if cold:
            self._load_in_background(namespace)

    def preload(self, namespaces: list[str]) -> threading.Thread:
        """Load ``namespaces`` (the most wanted first) one after another on a background
        thread, each that fits beside those loaded before it: a starting process has its
        active namespaces in hand before their searches arrive, instead of loading each
        at its first search while the others go to the database. Nothing is evicted for
        them, and one too large is skipped, since a smaller one may still fit."""

        def run() -> None:
            for namespace in namespaces:
                with self._lock:
                    if namespace in self._entries or namespace in self._elsewhere:
                        continue
                    held = self._held_bytes()
                try:
                    if self._count is not None:
                        rows = self._count(namespace)
                    else:
                        rows = len(self._embedded_ids(namespace))
                    if held + rows * ROW_BYTES <= self._budget:
                        self.get(namespace)
                except Exception as exc:  # its first search loads it again
                    log.warning("preloading the vectors of a namespace failed: %r", exc)

        thread = threading.Thread(target=run, name="wakemark-vector-preload", daemon=True)
        thread.start()
        return thread

    def _load_in_background(self, namespace: str) -> threading.Event:
        with self._lock:
            done = self._loading.get(namespace)
            if done is not None:
                return done
            done = self._loading[namespace] = threading.Event()

        def load() -> None:
            try:
                self.get(namespace)
            except Exception as exc:  # the next search tries again, and degrades meanwhile
                log.warning("loading the vectors of a namespace failed: %r", exc)
            finally:
                with self._lock:
                    self._loading.pop(namespace, None)
                done.set()

        threading.Thread(target=load, name="wakemark-vector-load", daemon=True).start()
        return done

    def get(self, namespace: str) -> VectorSet | None:
        """The namespace's set, loaded or refreshed as needed; None if ``count`` was given
        and there is no room for it."""
        epoch = self._epoch_of(namespace)
        hit = self._lookup(namespace, epoch)
        if hit is not None:
            return hit
        with self._load_lock:
            hit = self._lookup(namespace, epoch)
            if hit is not None:
                return hit
            with self._lock:
                stale = self._entries.get(namespace)
            if stale is not None:
                vset, read_whole = self._refresh(namespace, stale[1])
            else:
                if self._count is not None:
                    rows = self._count(namespace)
                    if not self._room_for(rows * ROW_BYTES):
                        self._leave_to_database(namespace, rows)
                        return None
                vset, read_whole = VectorSet.build(self._load(namespace, None)), True
                release_free_memory()  # the fetched rows left freed heap behind
            return self._store(namespace, epoch, vset, read_whole)

    def _held_bytes(self) -> int:
        """What the cached sets hold; the caller holds ``_lock``."""
        return sum(v.nbytes for _, v in self._entries.values())

    def _room_for(self, nbytes: int) -> bool:
        """Whether ``nbytes`` fit beside the entries searched within ``idle_s`` (the
        idle ones are evicted to make the room, by ``_store``)."""
        now = time.monotonic()
        with self._lock:
            active = sum(
                v.nbytes for ns, (_, v) in self._entries.items()
                if now - self._used.get(ns, 0.0) < self._idle_s
            )  # fmt: skip
        return active + nbytes <= self._budget

    def _store(
        self, namespace: str, epoch: int, vset: VectorSet, read_whole: bool
    ) -> VectorSet | None:
        """``vset`` cached, counted as a load (``read_whole``) or a refresh along with it,
        so ``stats`` never shows a load whose set is not there yet."""
        if self._count is not None and vset.nbytes > self._budget:  # it grew past it
            self._leave_to_database(namespace, len(vset.ids))
            with self._lock:
                self._count_read(read_whole)
            return None
        with self._lock:
            self._count_read(read_whole)
            self._elsewhere.pop(namespace, None)
            self._entries[namespace] = (epoch, vset)
            self._entries.move_to_end(namespace)
            self._used[namespace] = time.monotonic()
            held = self._held_bytes()
            while len(self._entries) > 1 and (
                held > self._budget or len(self._entries) > self._max_entries
            ):
                gone, (_, old) = self._entries.popitem(last=False)
                self._used.pop(gone, None)
                held -= old.nbytes
                self.evictions += 1
        return vset

    def _count_read(self, read_whole: bool) -> None:
        if read_whole:
            self.loads += 1
        else:
            self.refreshes += 1

    def _leave_to_database(self, namespace: str, rows: int) -> None:
        with self._lock:
            if self._entries.pop(namespace, None) is not None:
                self._used.pop(namespace, None)
            self._elsewhere[namespace] = (time.monotonic(), rows)
            if len(self._elsewhere) > self._max_entries:  # forget the longest counted
                del self._elsewhere[min(self._elsewhere, key=lambda ns: self._elsewhere[ns][0])]

    def _refresh(self, namespace: str, stale: VectorSet) -> tuple[VectorSet, bool]:
        """``stale`` brought up to date from what changed since it, and whether that took
        reading the namespace whole."""
        delta = self._load(namespace, stale.watermark)
        if delta.model != stale.model:  # a rebuild swapped the model: no row is kept
            return VectorSet.build(self._load(namespace, None)), True
        # Every record embedded now was in ``stale`` (unchanged since) or is in the delta,
        # so the patched set holds them all; equal counts mean it holds nothing more.
        vset = stale.patched(delta)
        if len(vset.ids) != delta.total:
            vset = vset.keeping(set(self._embedded_ids(namespace)))
        return vset, False

    def _lookup(self, namespace: str, epoch: int) -> VectorSet | None:
        with self._lock:
            entry = self._entries.get(namespace)
            if entry is None or entry[0] != epoch:
                return None
            self._entries.move_to_end(namespace)
            self._used[namespace] = time.monotonic()
            return entry[1]

    def stats(self) -> dict[str, int]:
        with self._lock:
            return {
                "namespaces": len(self._entries),
                "rows": sum(len(v.ids) for _, v in self._entries.values()),
                "bytes": self._held_bytes(),
                "budget_bytes": self._budget,
                "in_database": len(self._elsewhere),
                "loads": self.loads,
                "refreshes": self.refreshes,
                "evictions": self.evictions,
            }

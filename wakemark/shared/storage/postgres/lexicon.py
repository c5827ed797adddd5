"""The full-text index held in the process, for Postgres: SQLite's (``sqlite.lexicon``:
the same postings, tokenizer, through an in-memory SQLite, and FTS5's bm25 with global
statistics) built from Postgres' rows, so both backends rank alike and a search costs one
round trip for the ranked records rather than a tsvector statement.

Postgres stays the source of truth, written by other processes (API workers, Celery
workers), so every search first asks whether the index is still current (``CHECK``, one
round trip). Each write of a record's searchable columns stamps the row with its
transaction's id (``text_xid``, migration 0019). An index read in snapshot S holds every
row of transactions below xmin(S), so a row it does not hold as it is now carries a stamp
>= xmin(S). The index is current while (a) the rows stamped >= xmin(S) are exactly those
it read with those stamps, and (b) the number of records (``fts_doc_count``) is the one
it read: a delete moves the count, and a delete hidden by an insert shows in (a).

Otherwise a background thread re-reads the rows stamped since the build's snapshot (their
old slots masked, as SQLite's refresh does), or rebuilds past ``lexicon.DELTA_ROWS``;
the search waits ``lexicon.REFRESH_WAIT_S`` for it and asks Postgres meanwhile. A
database of more records than the process may hold (``WAKEMARK_TEXT_INDEX_RECORDS``) is
left to Postgres (checked again every ``RETRY_S``).

Slots are numbered as SQLite's rowids would be: in order of (created_at, record_id) at
the build, then in order of first appearance, so "the newest matches" means the same.
The build reads the records in order of namespace, so each namespace's are one run of
the index (``lexicon.Index``).
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import numpy as np
import psycopg

from wakemark.shared.storage.lexicon import (
    DELTA_ROWS,
    READ_ROWS,
    WINDOW,
    Index,
    Lexicon,
    Ranking,
    TooBroad,
    phrases,
    read_batch,
)
from wakemark.shared.storage.ports.search import SearchQuery, TermStats
from wakemark.shared.storage.postgres.connection import REPEATABLE_READ

RETRY_S = 60.0  # how long a database past its size is left to Postgres before a recount

# In one snapshot: its xmin (rows stamped below it were all read) and the record count.
STATE = """
SELECT pg_snapshot_xmin(pg_current_snapshot())::text::bigint, n FROM fts_doc_count WHERE id = 1
"""
ROWS = """
SELECT record_id, namespace, observation_type, created_at, title, summary,
       array_to_string(facts, E'\\n'), text_xid
  FROM memory_records WHERE text_xid >= %s ORDER BY created_at, record_id
"""
# The build's rows: in order of namespace (each namespace's records one run of the
# index, ``Index``), each numbered by its place in order of age.
BUILD_ROWS = """
SELECT record_id, namespace, observation_type, created_at, title, summary,
       array_to_string(facts, E'\\n'), text_xid,
       row_number() OVER (ORDER BY created_at, record_id) - 1
  FROM memory_records ORDER BY namespace, created_at, record_id
"""
IDS = "SELECT record_id FROM memory_records"
TEXTS = """
SELECT record_id, title, summary, array_to_string(facts, E'\\n')
  FROM memory_records WHERE record_id = ANY(%s)
"""
# The per-search check: the record count, and the rows stamped since the index's snapshot
# (a few: those of transactions that were open or just committed then). In order of the
# stamp, so that a plan made without knowing %(seq)s (``search.CHECKED_RECORDS``) walks
# the stamp's index too: unordered, a plan guessing a third of the table past it may scan
# the table for the first %(most)s.
CHECK = """
SELECT n, ARRAY(SELECT record_id || ' ' || text_xid FROM memory_records
                 WHERE text_xid >= %(seq)s ORDER BY text_xid LIMIT %(most)s)
  FROM fts_doc_count WHERE id = 1
"""


class Ids:
    """Record ids by slot number: the build's in one array of bytes (a Python string and
    a dict entry per record would cost about four times as much), those seen since in a
    list. Only appended; shared by the snapshots of one build."""

    def __init__(self, built: list[str]) -> None:
        self._built = np.array([i.encode() for i in built], dtype=bytes)
        self._order = np.argsort(self._built)
        self._more: list[str] = []
        self._more_slots: dict[str, int] = {}

    def __getitem__(self, slot: int) -> str:
        size = len(self._built)
        return self._built[slot].decode() if slot < size else self._more[slot - size]

    def of(self, slots: np.ndarray) -> list[str]:
        """The ids of ``slots``."""
        if len(slots) and slots.max() >= len(self._built):
            return [self[slot] for slot in slots.tolist()]
        return [i.decode() for i in self._built[slots].tolist()]

    def slots(self, record_ids: Sequence[str]) -> list[int]:
        """Each id's slot number; -1 for an id not seen."""
        if not record_ids or not len(self._built):
            return [self._more_slots.get(i, -1) for i in record_ids]
        wanted = np.array([i.encode() for i in record_ids], dtype=bytes)
        at = np.minimum(self._built.searchsorted(wanted, sorter=self._order), len(self._built) - 1)
        slot = self._order[at]
        found = self._built[slot] == wanted
        return [
            int(s) if hit else self._more_slots.get(i, -1)
            for i, s, hit in zip(record_ids, slot.tolist(), found.tolist(), strict=True)
        ]

    def add(self, record_id: str) -> int:
        """A new slot for ``record_id`` (not seen before)."""
        slot = self._more_slots[record_id] = len(self._built) + len(self._more)
        self._more.append(record_id)
        return slot


@dataclass(frozen=True)
class Snapshot:
    """The index as of one Postgres snapshot, and what tells whether it still is current."""

    index: Index  # index.base_seq: the build's xmin; index.seq: this snapshot's
    ids: Ids  # record id by slot number (rowid)
    count: int  # the records in the snapshot
    recent: frozenset[str]  # "record_id xid" of its rows stamped >= index.seq

    @property
    def check_params(self) -> dict[str, int]:
        return {"seq": self.index.seq, "most": DELTA_ROWS + 1}

    def holds(self, count: int, recent: Sequence[str]) -> bool:
        same = count == self.count and len(recent) <= DELTA_ROWS
        return same and frozenset(recent) == self.recent

    def term_stats(self, stems: sqlite3.Connection, tokens: Sequence[str]) -> TermStats:
        """As SQLite's: a token the index splits into several stems is left out."""
        found = phrases(stems, tokens)
        single = {t: p[0] for t, p in found.items() if len(p) == 1}
        return TermStats({t: self.index.doc_freq(s) for t, s in single.items()}, self.index.total)

    def ranked(
        self, stems: sqlite3.Connection, query: SearchQuery, terms: Sequence[str]
    ) -> list[tuple[str, float]] | None:
        """The best ``query.limit`` matches as SQLite orders them (bm25, newest, record
        id): their record ids and creation times (seconds since the epoch); None: a
        phrase too broad to recount, ask Postgres."""
        found = phrases(stems, terms)
        want = Ranking(query.namespace, query.limit, query.observation_type, query.since)
        try:
            ranked = self.index.ranked(stems, [found[t] for t in terms if t in found], want,
                                       WINDOW)  # fmt: skip
        except TooBroad:
            return None
        slot, rowid, bm25 = ranked
        created = self.index.created[slot]
        # SQLite's order: bm25, then newest, then record id (read only if the first two tie).
        order = np.lexsort((-created, bm25))
        tied = (bm25[order][1:] == bm25[order][:-1]) & (created[order][1:] == created[order][:-1])
        if tied.any():
            by_id = np.argsort(self.ids.of(rowid), kind="stable")
            order = by_id[np.lexsort((-created[by_id], bm25[by_id]))]
        order = order[: query.limit]
        return list(zip(self.ids.of(rowid[order]), (created[order] / 1e6).tolist(), strict=True))


class Memory:
    """The process's index of one Postgres database: built at a server's warm-up and
    refreshed on a background thread (``Lexicon``), checked before each use."""

    def __init__(self, connection: Any, max_records: int) -> None:
        self._connection = connection  # () -> a context manager yielding a pooled connection
        self.max_records = max_records
        self._local = threading.local()  # a tokenizer (an in-memory SQLite) per thread
        self.lexicon: Lexicon[Snapshot] = Lexicon(self._build, self._refreshed, RETRY_S)

    def stems(self) -> sqlite3.Connection:
        conn: sqlite3.Connection | None = getattr(self._local, "conn", None)
        if conn is None:
            conn = self._local.conn = sqlite3.connect(":memory:")
        return conn

    @property
    def latest(self) -> Snapshot | None:
        """The index last built or refreshed, current or not."""
        return self.lexicon.latest

    def current(self, conn: psycopg.Connection, wait_s: float = 0.0) -> Snapshot | None:
        """The index if it is current with what ``conn`` sees now, after waiting up to
        ``wait_s`` for a build; None: Postgres answers."""

        def fresh(snap: Snapshot) -> bool:
            row = conn.execute(CHECK, snap.check_params).fetchone()
            return row is not None and snap.holds(*row)

        return self.lexicon.current(fresh, wait_s)

    def texts(self, ids: Ids) -> Any:
        def read(_: sqlite3.Connection, rowids: list[int]) -> list[tuple[Any, ...]]:
            with self._connection() as conn:
                rows = conn.execute(TEXTS, ([ids[r] for r in rowids],)).fetchall()
            slot = {ids[r]: r for r in rowids}
            return [(slot[r[0]], *r[1:]) for r in rows]

        return read

    @contextmanager
    def _snapshot(self) -> Iterator[tuple[psycopg.Connection, int, int]]:
        with self._connection() as conn, conn.transaction():
            conn.execute(REPEATABLE_READ)
            xmin, count = conn.execute(STATE).fetchone() or (0, 0)
            yield conn, int(xmin), int(count)

    def _build(self) -> Snapshot | None:
        built: list[str] = []
        recent: set[str] = set()
        vocab: dict[str, int] = {}
        with self._snapshot() as (conn, xmin, count):
            if count > self.max_records:
                return None
            with conn.cursor(name="wakemark_lexicon") as cursor:
                cursor.execute(BUILD_ROWS)
                batches = iter(lambda: cursor.fetchmany(READ_ROWS), [])
                numbered = _aged(batches, built, recent, xmin)
                base = read_batch(self.stems(), numbered, vocab)
        empty = read_batch(self.stems(), [], vocab)
        alive = np.ones(len(base.rowid), dtype=bool)
        ids = Ids(built)
        del built
        index = Index((base, xmin), empty, alive, vocab, xmin, self.texts(ids))
        return Snapshot(index, ids, count, frozenset(recent))

    def _refreshed(self, snap: Snapshot) -> Snapshot | None:
        """``snap`` brought up to date: the rows stamped since its build indexed beside it
        and their old slots masked, those of records gone masked; a rebuild past
        ``DELTA_ROWS``."""
        old = snap.index
        base = old.base
        recent: set[str] = set()
        present = None
        with self._snapshot() as (conn, xmin, count):
            if count > self.max_records:
                return None
            rows = conn.execute(ROWS + " LIMIT %s", (old.base_seq, DELTA_ROWS + 1)).fetchall()
            if len(rows) <= DELTA_ROWS:
                held = snap.ids.slots([r[0] for r in rows])
                numbered = next(_numbered([rows], snap.ids, recent, xmin))
                stale = np.isin(base.rowid, [s for s in held if s >= 0])
                if len(base.rowid) - int(stale.sum()) + len(rows) != count:  # some deleted
                    present = snap.ids.slots([r[0] for r in conn.execute(IDS)])
        if len(rows) > DELTA_ROWS:
            return self._build()
        vocab = dict(old.vocab)
        delta = read_batch(self.stems(), [numbered], vocab)
        alive = ~stale
        if present is not None:
            alive &= np.isin(base.rowid, present)
        alive = np.concatenate((alive, np.ones(len(rows), dtype=bool)))
        index = Index((base, old.base_seq), delta, alive, vocab, xmin, old.texts)
        return Snapshot(index, snap.ids, count, frozenset(recent))


def _aged(
    batches: Iterable[list[Any]], ids: list[str], recent: set[str], xmin: int
) -> Iterator[list[tuple[Any, ...]]]:
    """Rows of ``BUILD_ROWS`` as ``read_batch`` reads them: the record id replaced by its
    place in order of age (its slot number, and its place in ``ids``). Rows stamped >=
    ``xmin`` are added to ``recent``."""
    for rows in batches:
        out = []
        for record_id, *columns, xid, slot in rows:
            ids.extend([""] * (slot + 1 - len(ids)))
            ids[slot] = record_id
            if xid >= xmin:
                recent.add(f"{record_id} {xid}")
            out.append((slot, *columns))
        yield out


def _numbered(
    batches: Iterable[list[Any]], ids: Ids, recent: set[str], xmin: int
) -> Iterator[list[tuple[Any, ...]]]:
    """Rows of ``ROWS`` as ``read_batch`` reads them: the record id replaced by its slot
    number (a new one for a record not seen before). Rows stamped >= ``xmin`` are added
    to ``recent``."""
    for rows in batches:
        out = []
        slots = ids.slots([r[0] for r in rows])
        for (record_id, *columns, xid), slot in zip(rows, slots, strict=True):
            if slot < 0:
                slot = ids.add(record_id)
            if xid >= xmin:
                recent.add(f"{record_id} {xid}")
            out.append((slot, *columns))
        yield out

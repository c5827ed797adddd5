"""The full-text index held in the process: the records' postings as numpy arrays, ranked
with FTS5's bm25 (same tokenizer, formula, column weights, statistics and window), so a
search answers without FTS5's per-statement count of every document holding each term.
Both backends hold it (``sqlite.lexicon``, ``postgres.lexicon``: how each builds it from
its rows and tells whether it is current), so both rank alike; text is split and stemmed
by FTS5's own tokenizer, through a scratch FTS5 table of an SQLite connection (the
database's own, or one in memory).

The database stays the source of truth. The index is built from it at the worker's
warm-up or first use, on a background thread (the database answers meanwhile); a refresh
indexes the rows changed since the build beside it (their old entries masked) and masks
records gone, or rebuilds once that delta grows past ``DELTA_ROWS``.

Postings are held per segment of ``SEGMENT`` records, so a slot fits two bytes, and a
frequency in one (the rare larger ones apart). Positions are not held: a phrase of three
stems or more (``foo_bar_baz``) is counted in the text of the few records holding each
adjacent pair of it, and left to the database when they are many (``TooBroad``).
"""

from __future__ import annotations

import bisect
import functools
import itertools
import logging
import math
import os
import re
import sqlite3
import threading
import time
import weakref
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, Generic, NamedTuple, TypeVar

import numpy as np

from wakemark.shared.heap import release_free_memory

log = logging.getLogger(__name__)

K1, B = 1.2, 0.75  # FTS5's bm25 constants
WEIGHTS = (4.0, 2.0, 1.0)  # title, summary, facts: the weights of SQLite's bm25() call
# The scope column (migration 0002, weight 0) holds two tokens per record: they count in
# a record's length, and so in the average, as FTS5 counts them.
SCOPE_TOKENS = 2
# Rows changed since the build indexed beside it; past this many, a rebuild.
DELTA_ROWS = 2000
REFRESH_WAIT_S = 0.05  # a search waits this long for a refresh, then asks the database
STEM_CACHE = 50_000  # query tokens whose stems are kept
READ_ROWS = 2000
PHRASES = 64  # phrases of three stems or more whose recount a snapshot keeps
SEGMENT = 2**16  # records per segment: a slot within one fits uint16
FREQ_HELD_APART = 255  # a weighted frequency this large is held beside the uint8 ones
# A phrase of three stems or more is recounted in the text of at most this many records
# (those holding each adjacent pair of it); beyond, the database answers the query.
RECOUNT_MAX = 200

# Runs of ASCII letters and digits or of other characters: every other ASCII character
# separates tokens for unicode61, so each run is stemmed whole by the index's tokenizer,
# which splits it further where it would.
_RUN = re.compile(r"[0-9A-Za-z\x80-\U0010ffff]+")
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MICROSECOND = timedelta(microseconds=1)

# A search ranks only the newest this many matches (FTS5's bm25() first counts every
# document holding each phrase: with common terms, the whole index).
WINDOW = 2000
FULL_NAMESPACE = re.compile(r"/actor/[^/]+/project/[^/]+/")
_ACTOR = re.compile(r"/actor/[^/]+/")

# The index's tokenizer (migrations 0001, 0002): text is split, folded and stemmed by it
# alone, through a scratch FTS5 table per connection (TEMP, so nothing is written to the
# database file) and its per-instance vocabulary, which lists each text's stems in order.
TOKENIZE = "porter unicode61 remove_diacritics 2"
_STEM_TABLES = (
    "CREATE VIRTUAL TABLE IF NOT EXISTS temp.wakemark_stem "
    f"USING fts5 (t, tokenize = '{TOKENIZE}')",
    "CREATE VIRTUAL TABLE IF NOT EXISTS temp.wakemark_stem_instances "
    "USING fts5vocab(temp, wakemark_stem, instance)",
)
CLEAR_STEMS = "DELETE FROM temp.wakemark_stem"
PUT_TEXT = "INSERT INTO temp.wakemark_stem (rowid, t) VALUES (?, ?)"
TEXT_STEMS = "SELECT doc, term FROM temp.wakemark_stem_instances ORDER BY doc, offset"


def has_scope(namespace: str) -> bool:
    """Whether the index holds a scope token for ``namespace``."""
    return bool(FULL_NAMESPACE.fullmatch(namespace) or _ACTOR.fullmatch(namespace))


def stems(conn: sqlite3.Connection, texts: Sequence[str]) -> dict[str, tuple[str, ...]]:
    """Each text's stems in order, as the index would hold them (a text with none is left
    out)."""
    for sql in _STEM_TABLES:
        conn.execute(sql)
    began = not conn.in_transaction  # one transaction, not one per inserted row
    if began:
        conn.execute("BEGIN")
    try:
        conn.execute(CLEAR_STEMS)
        conn.executemany(PUT_TEXT, enumerate(texts))
        found: dict[int, list[str]] = {}
        for doc, term in conn.execute(TEXT_STEMS):
            found.setdefault(doc, []).append(term)
        conn.execute(CLEAR_STEMS)
    except BaseException:
        if began and conn.in_transaction:  # interrupted: leave no snapshot open
            conn.execute("ROLLBACK")
        raise
    if began:
        conn.execute("COMMIT")
    return {texts[doc]: tuple(terms) for doc, terms in found.items()}


class TooBroad(Exception):
    """A phrase may be in too many records to count it in their text: ask the database."""


def micros(value: datetime | str) -> int:
    """Microseconds since the epoch of a time or of its ISO text (SQLite's); a naive time
    is UTC."""
    if isinstance(value, str):
        value = datetime.fromisoformat(value)
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    return (value - _EPOCH) // _MICROSECOND


@dataclass(frozen=True)
class Pairs:
    """One segment's (key, slot) pairs in CSR form: per distinct key (a stem, or two
    adjacent stems), the slots holding it and its weighted frequency in each."""

    keys: np.ndarray  # int32 stem or int64 bigram, ascending
    at: np.ndarray  # int32; key i's pairs: [at[i], at[i + 1])
    doc: np.ndarray  # uint16 slot within the segment, ascending within a key
    freq: np.ndarray  # uint8 weighted frequency; FREQ_HELD_APART: the pair is in ``over``
    over_at: np.ndarray  # int64 pairs whose frequency did not fit, ascending
    over: np.ndarray  # uint32 their frequency

    @property
    def nbytes(self) -> int:
        arrays = (self.keys, self.at, self.doc, self.freq, self.over_at, self.over)
        return sum(a.nbytes for a in arrays)

    def span(self, key: int) -> tuple[int, int]:
        """Where ``key``'s pairs are (an empty span if nowhere)."""
        i = int(self.keys.searchsorted(self.keys.dtype.type(key)))  # a Python int casts keys
        if i == len(self.keys) or self.keys[i] != key:
            return 0, 0
        return int(self.at[i]), int(self.at[i + 1])

    def get(self, key: int) -> tuple[np.ndarray, np.ndarray]:
        """The slots holding ``key`` and its frequency in each."""
        lo, hi = self.span(key)
        freq = self.freq[lo:hi]
        if len(self.over_at) and self.over_at[-1] >= lo:
            first, last = self.over_at.searchsorted((lo, hi))
            if first < last:
                freq = freq.astype(np.uint32)
                freq[self.over_at[first:last] - lo] = self.over[first:last]
        return self.doc[lo:hi], freq


def _pairs(key: np.ndarray, doc: np.ndarray, weight: np.ndarray) -> Pairs:
    """Pairs of per-position ``key``, ``doc`` (ascending) and field ``weight``."""
    order = np.argsort(key, kind="stable")
    key, doc, weight = key[order], doc[order], weight[order]
    new = np.ones(len(key), dtype=bool)
    new[1:] = (key[1:] != key[:-1]) | (doc[1:] != doc[:-1])
    first = np.flatnonzero(new)
    freq = np.add.reduceat(weight, first) if len(first) else weight[:0]
    over_at = np.flatnonzero(freq >= FREQ_HELD_APART)
    keys = key[first]
    starts = np.flatnonzero(np.concatenate((keys[:1] == keys[:1], keys[1:] != keys[:-1])))
    return Pairs(
        keys[starts],
        np.append(starts, len(first)).astype(np.int32),
        doc[first].astype(np.uint16),
        np.minimum(freq, FREQ_HELD_APART).astype(np.uint8),
        over_at,
        freq[over_at].astype(np.uint32),
    )


def bigram(a: int, b: int) -> int:
    return (a << 32) | b


def _key(stems: Sequence[int]) -> int:
    """The postings key of a phrase of one or two stems."""
    return stems[0] if len(stems) == 1 else bigram(stems[0], stems[1])


@dataclass(frozen=True)
class Segment:
    """The postings of records of a batch from slot ``start``: every stem, and every two
    stems adjacent in one field. A phrase of more stems may only be where each adjacent
    pair of it is; its instances are counted in the records' text."""

    start: int
    terms: Pairs
    bigrams: Pairs

    @property
    def nbytes(self) -> int:
        return self.terms.nbytes + self.bigrams.nbytes


def _pairs_of(seg: Segment, stems: Sequence[int]) -> Pairs:
    return seg.terms if len(stems) == 1 else seg.bigrams


_EMPTY_SLOTS = np.zeros(0, dtype=np.int32)
_EMPTY_FREQ = np.zeros(0, dtype=np.uint8)


@dataclass(frozen=True)
class Batch:
    """Records read from the database: their columns and their segments' postings."""

    rowid: np.ndarray  # int64
    namespaces: list[str]  # the batch's, distinct
    ns: np.ndarray  # int32 index into ``namespaces`` per record
    types: list[str]  # the batch's observation types, distinct
    type: np.ndarray  # int32 index into ``types`` per record
    created: np.ndarray  # int64 microseconds
    length: np.ndarray  # float64 tokens of all four columns
    segments: list[Segment]
    # Records holding each phrase of one or two stems counted so far (``count``).
    counted: dict[tuple[int, ...], int] = field(default_factory=dict, compare=False, repr=False)

    @property
    def nbytes(self) -> int:
        return sum(s.nbytes for s in self.segments)

    @functools.cached_property
    def _starts(self) -> list[int]:
        return [seg.start for seg in self.segments]

    def _stop(self, i: int) -> int:
        """The slot after segment ``i``'s last."""
        return self.segments[i + 1].start if i + 1 < len(self.segments) else len(self.rowid)

    def frequency(
        self, stems: Sequence[int], lo: int = 0, hi: int | None = None, newest: int | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        """Slots in [lo, hi) holding a phrase of one or two stems (the last ``newest`` of
        them, if given), and its weighted frequency in each (FTS5's phrase instances:
        consecutive positions in one field)."""
        hi = len(self.rowid) if hi is None else hi
        slots, freqs, held = [], [], 0
        starts = self._starts
        within = range(max(bisect.bisect_right(starts, lo) - 1, 0), bisect.bisect_left(starts, hi))
        for i in reversed(within):
            seg, stop = self.segments[i], self._stop(i)
            doc, freq = _pairs_of(seg, stems).get(_key(stems))
            if len(doc) and (seg.start < lo or stop > hi):  # within the segment, both < 2**16
                at = doc.dtype.type
                first = int(doc.searchsorted(at(lo - seg.start))) if seg.start < lo else 0
                last = int(doc.searchsorted(at(hi - seg.start))) if stop > hi else len(doc)
                doc, freq = doc[first:last], freq[first:last]
            if newest is not None and held + len(doc) > newest:
                doc, freq = doc[held + len(doc) - newest :], freq[held + len(doc) - newest :]
            if len(doc):
                slots.append(np.add(doc, seg.start, dtype=np.int32))
                freqs.append(freq)
                held += len(doc)
            if newest is not None and held >= newest:
                break
        if len(slots) < 2:
            return (slots[0], freqs[0]) if slots else (_EMPTY_SLOTS, _EMPTY_FREQ)
        return np.concatenate(slots[::-1]), np.concatenate(freqs[::-1])

    def count(self, stems: Sequence[int]) -> int:
        """The records holding a phrase of one or two stems, masked or not."""
        held = self.counted.get(tuple(stems))
        if held is None:
            key = _key(stems)
            held = sum(hi - lo for lo, hi in (_pairs_of(s, stems).span(key) for s in self.segments))
            if len(self.counted) >= STEM_CACHE:
                self.counted.clear()
            self.counted[tuple(stems)] = held
        return held

    def holders(self, stems: Sequence[int], slots: np.ndarray) -> int:
        """How many of ``slots`` (ascending) hold a phrase of one or two stems."""
        found = 0
        bounds = np.append(slots.searchsorted(self._starts), len(slots)).tolist()
        for i in np.flatnonzero(np.diff(bounds)).tolist():  # the segments holding any
            seg, lo, hi = self.segments[i], bounds[i], bounds[i + 1]
            doc = _pairs_of(seg, stems).get(_key(stems))[0]
            if len(doc):
                local = (slots[lo:hi] - seg.start).astype(doc.dtype)
                at = np.minimum(doc.searchsorted(local), len(doc) - 1)
                found += int((doc[at] == local).sum())
        return found

    def holding_pairs(self, stems: Sequence[int]) -> np.ndarray:
        """Slots holding every two adjacent stems of ``stems``: where the phrase may be."""
        found = []
        for seg in self.segments:
            docs = None
            for a, b in itertools.pairwise(stems):
                these = seg.bigrams.get(bigram(a, b))[0]
                docs = these if docs is None else np.intersect1d(docs, these, assume_unique=True)
                if not len(docs):
                    break
            if docs is not None and len(docs):
                found.append(docs.astype(np.int32) + seg.start)
        return np.concatenate(found) if found else _EMPTY_SLOTS


def read_batch(
    conn: sqlite3.Connection, slices: Iterable[Sequence[Sequence[Any]]], vocab: dict[str, int]
) -> Batch:
    """Rows of (rowid, namespace, observation type, created at (a datetime or its ISO
    text), title, summary, facts), a slice at a time
    (so only one slice's text, and one segment's stems, are held), indexed; new stems
    are added to ``vocab``. Each slice's stems go into arrays at once: millions of small
    objects held over a segment would leave the allocator's pages fragmented."""
    ids: dict[str, list[int]] = {}  # run -> its stems' ids
    namespaces: dict[str, int] = {}
    types: dict[str, int] = {}
    columns: list[list[np.ndarray]] = [[], [], [], []]  # rowid, ns, type, created per slice
    segments: list[Segment] = []
    held: list[np.ndarray] = []  # the open segment's stems, and its fields' sizes
    sizes: list[np.ndarray] = []
    start = count = 0  # the open segment's first slot, and its records
    lengths: list[np.ndarray] = []
    for rows in slices:
        fields = [_RUN.findall(t) for r in rows for t in (r[4], r[5], r[6])]
        new = list({run: None for field in fields for run in field if run not in ids})
        stemmed = stems(conn, new)
        for run in new:
            ids[run] = [vocab.setdefault(s, len(vocab)) for s in stemmed.get(run, ())]
        stream: list[int] = []
        before = np.zeros(len(fields) + 1, dtype=np.int64)  # stems before each field
        for i, runs in enumerate(fields):
            for run in runs:
                stream.extend(ids[run])
            before[i + 1] = len(stream)
        stream_at = np.asarray(stream, dtype=np.int32)
        del stream
        n = len(rows)
        columns[0].append(np.fromiter((r[0] for r in rows), np.int64, n))
        columns[1].append(
            np.fromiter((namespaces.setdefault(r[1], len(namespaces)) for r in rows), np.int32, n)
        )
        columns[2].append(
            np.fromiter((types.setdefault(r[2], len(types)) for r in rows), np.int32, n)
        )
        columns[3].append(np.fromiter((micros(r[3]) for r in rows), np.int64, n))
        done = 0
        while done < n:
            take = min(n - done, SEGMENT - count)
            held.append(stream_at[before[3 * done] : before[3 * (done + take)]])
            sizes.append(np.diff(before[3 * done : 3 * (done + take) + 1]))
            done, count = done + take, count + take
            if count == SEGMENT:
                segments.append(_segment(start, held, sizes))
                lengths.append(_lengths(sizes))
                start, count, held, sizes = start + count, 0, [], []
    if count:
        segments.append(_segment(start, held, sizes))
        lengths.append(_lengths(sizes))
    rowid, ns, kind, created = (
        np.concatenate(c) if c else np.zeros(0, dtype=np.int64) for c in columns
    )
    return Batch(
        rowid,
        list(namespaces),
        ns.astype(np.int32),
        list(types),
        kind.astype(np.int32),
        created,
        np.concatenate(lengths) if lengths else np.zeros(0),
        segments,
    )


def _segment(start: int, stems: list[np.ndarray], sizes: list[np.ndarray]) -> Segment:
    """The postings of records from slot ``start``: their stems, and each of their three
    fields' number of stems, in order."""
    stem = np.concatenate(stems)
    size = np.concatenate(sizes)
    field = np.repeat(np.arange(len(size), dtype=np.int32), size)  # of each position
    doc = (field // 3).astype(np.uint16)
    weight = np.asarray(WEIGHTS, dtype=np.uint32)[field % 3]
    terms = _pairs(stem, doc, weight)
    follows = np.flatnonzero(field[1:] == field[:-1])  # a stem followed by another in its field
    pair = (stem[follows].astype(np.int64) << 32) | stem[follows + 1]
    bigrams = _pairs(pair, doc[follows], weight[follows])
    return Segment(start, terms, bigrams)


def _lengths(sizes: list[np.ndarray]) -> np.ndarray:
    """Each record's tokens in all four columns."""
    return np.concatenate(sizes).reshape(-1, 3).sum(axis=1).astype(np.float64) + SCOPE_TOKENS


# The title, summary and facts of records by rowid: ``(rowid, title, summary, facts)``.
Texts = Callable[[sqlite3.Connection, list[int]], Sequence[Sequence[Any]]]


def recount(
    conn: sqlite3.Connection,
    slots: np.ndarray,
    rowids: np.ndarray,
    phrase: Sequence[str],
    texts: Texts,
) -> tuple[np.ndarray, np.ndarray]:
    """The slots whose record's text holds ``phrase`` and its weighted frequency in each:
    FTS5's phrase instances (consecutive stems of one field, overlaps counted), from the
    text read again (``texts``) and stemmed by the index's tokenizer (``conn``'s)."""
    rows = texts(conn, rowids.tolist())
    text = {r[0]: (r[1], r[2], r[3]) for r in rows}
    stemmed = stems(conn, list({t for r in rows for t in r[1:] if t}))
    want, n = tuple(phrase), len(phrase)
    found, freq = [], []
    for slot, rowid in zip(slots.tolist(), rowids.tolist(), strict=True):
        count = 0.0
        for weight, t in zip(WEIGHTS, text.get(rowid, ()), strict=False):
            got = stemmed.get(t, ())
            count += weight * sum(
                1 for i, s in enumerate(got) if s == want[0] and got[i : i + n] == want
            )
        if count:
            found.append(slot)
            freq.append(count)
    return np.asarray(found, dtype=np.int32), np.asarray(freq, dtype=np.float64)


# A phrase's postings: slots ascending, and its weighted frequency in each.
Postings = tuple[np.ndarray, np.ndarray]


def _places(slots: np.ndarray, lo: int, hi: int, size: int) -> np.ndarray:
    """Where ascending ``slots`` (the base's within [lo, hi), then the delta's from
    ``size`` on) fall in an array of the base's [lo, hi) followed by the delta's."""
    at = slots - lo
    if len(slots) and slots[-1] >= size:
        at[int(slots.searchsorted(slots.dtype.type(size))) :] += hi - size
    return at


def _slots(places: np.ndarray, lo: int, hi: int, size: int) -> np.ndarray:
    """The slots at ascending ``places`` (``_places``' inverse)."""
    found = places + lo
    if len(places) and places[-1] >= hi - lo:
        found[int(places.searchsorted(hi - lo)) :] += size - hi
    return found


def _after(postings: Postings, start: int) -> Postings:
    """The postings from slot ``start`` on."""
    docs, freq = postings
    at = int(docs.searchsorted(docs.dtype.type(start)))
    return docs[at:], freq[at:]


class Ranked(NamedTuple):
    """An index's answer, best first: the live slots, their rowids and bm25 (FTS5's:
    lower is better)."""

    slot: np.ndarray
    rowid: np.ndarray
    bm25: np.ndarray


@dataclass(frozen=True)
class Ranking:
    """What a search asks of the index: the namespace (a prefix), the filters and how many."""

    namespace: str
    limit: int
    observation_type: str | None
    since: datetime | None


def _codes(*batches: tuple[list[str], np.ndarray]) -> tuple[list[str], np.ndarray]:
    """The batches' names as one sorted list, and each record's index into it."""
    names = sorted({n for own, _ in batches for n in own})
    code = {n: i for i, n in enumerate(names)}
    per = [np.asarray([code[n] for n in own], dtype=np.int32)[at] for own, at in batches]
    return names, np.concatenate(per)


class Index:
    """An immutable snapshot: the records of a build (``base``) and those changed since
    (``delta``, slots after the base's), the slots of records gone or changed masked.

    A base read in order of namespace holds each namespace's records in one run of
    slots: a search scores only its namespace's run and the delta. The statistics bm25
    weighs terms by stay the whole index's, as FTS5's."""

    def __init__(
        self,
        base: tuple[Batch, int],
        delta: Batch,
        alive: np.ndarray,
        vocab: dict[str, int],
        seq: int,
        texts: Texts,
    ) -> None:
        (self.base, self.base_seq), self.delta = base, delta
        self.alive, self.vocab, self.seq = alive, vocab, seq  # seq: text_seq read at the refresh
        self.texts = texts  # where a phrase of three stems or more is recounted
        self.rowid = np.concatenate((self.base.rowid, delta.rowid))
        self.namespaces, self.ns = _codes(
            (self.base.namespaces, self.base.ns), (delta.namespaces, delta.ns)
        )
        self.types, self.type = _codes((self.base.types, self.base.type), (delta.types, delta.type))
        self._type = {t: i for i, t in enumerate(self.types)}
        self.created = np.concatenate((self.base.created, delta.created))
        length = np.concatenate((self.base.length, delta.length))
        self.total = int(alive.sum())
        avgdl = float(length[alive].sum()) / self.total if self.total else 1.0
        self.norm = K1 * ((1 - B) + B * length / avgdl)
        self.whole = bool(alive.all())
        size = len(self.base.rowid)
        dead = np.flatnonzero(~alive)
        self._dead = (dead[dead < size], dead[dead >= size] - size)  # in the base, the delta
        base_ns = self.ns[:size]
        self._grouped = bool((base_ns[1:] >= base_ns[:-1]).all())  # read in namespace order
        # Live records per namespace code: whether a prefix's match needs no scope token.
        self._live_per_namespace = np.bincount(self.ns[alive], minlength=len(self.namespaces))
        self._phrases: dict[tuple[str, ...], tuple[np.ndarray, np.ndarray]] = {}
        self._counted: dict[tuple[int, ...], int] = {}  # live records per phrase (``_count``)

    @property
    def nbytes(self) -> int:
        arrays = (self.rowid, self.ns, self.type, self.created, self.norm, self.alive)
        lists = 100 * len(self.vocab)
        postings = self.base.nbytes + self.delta.nbytes
        return postings + lists + sum(a.nbytes for a in arrays)

    def frequency(
        self,
        conn: sqlite3.Connection,
        phrase: Sequence[str],
        lo: int = 0,
        hi: int | None = None,
        base: Postings | None = None,
    ) -> tuple[np.ndarray, np.ndarray, int]:
        """The live slots holding the phrase among the base's [lo, hi) and the delta's,
        its weighted frequency in each, and the live records holding it in the whole
        index. A phrase of three stems or more is counted in the text of the records
        holding each adjacent pair of it (``recount``); ``TooBroad`` if they are more
        than ``RECOUNT_MAX``. ``base``: the phrase's postings in the base's [lo, hi),
        if already read."""
        ids = [self.vocab.get(s) for s in phrase]
        if not ids or None in ids:
            return _EMPTY_SLOTS, _EMPTY_FREQ, 0
        stems: list[int] = ids  # type: ignore[assignment]
        size = len(self.base.rowid)
        hi = size if hi is None else hi
        everywhere = lo == 0 and hi == size
        if len(stems) > 2:
            docs, freq = self._recounted(conn, phrase, stems)
            held = len(docs)
            if not everywhere:
                keep = ((docs >= lo) & (docs < hi)) | (docs >= size)
                docs, freq = docs[keep], freq[keep]
            return docs, freq, held
        docs, freq = self._frequency(stems, lo, hi, base)
        return docs, freq, len(docs) if everywhere else self._count(stems)

    def _frequency(
        self, stems: list[int], lo: int = 0, hi: int | None = None, base: Postings | None = None
    ) -> Postings:
        docs, freq = self.base.frequency(stems, lo, hi) if base is None else base
        if len(self.delta.rowid):
            more, more_freq = self.delta.frequency(stems)
            docs = np.concatenate((docs, more + len(self.base.rowid)))
            freq = np.concatenate((freq, more_freq))
        if not self.whole:
            live = self.alive[docs]
            docs, freq = docs[live], freq[live]
        return docs, freq

    def _count(self, stems: list[int]) -> int:
        """The live records holding a phrase of one or two stems."""
        if self.whole:
            return self.base.count(stems) + self.delta.count(stems)
        # Those of the masked slots are looked up in every segment holding any: kept for
        # the snapshot's life, as each search asks again for its terms.
        held = self._counted.get(tuple(stems))
        if held is None:
            base_dead, delta_dead = self._dead
            held = self.base.count(stems) + self.delta.count(stems)
            held -= self.base.holders(stems, base_dead) + self.delta.holders(stems, delta_dead)
            if len(self._counted) >= STEM_CACHE:
                self._counted.clear()
            self._counted[tuple(stems)] = held
        return held

    def _recounted(
        self, conn: sqlite3.Connection, phrase: Sequence[str], stems: list[int]
    ) -> tuple[np.ndarray, np.ndarray]:
        key = tuple(phrase)
        found = self._phrases.get(key)
        if found is not None:
            return found
        slots = self.base.holding_pairs(stems)
        if len(self.delta.rowid):
            more = self.delta.holding_pairs(stems) + len(self.base.rowid)
            slots = np.concatenate((slots, more))
        if not self.whole:
            slots = slots[self.alive[slots]]
        if len(slots) > RECOUNT_MAX:
            raise TooBroad(f"{len(slots)} records may hold a phrase of {len(stems)} stems")
        found = (
            recount(conn, slots, self.rowid[slots], phrase, self.texts)
            if len(slots)
            else (slots, _EMPTY_FREQ)
        )
        if len(self._phrases) >= PHRASES:
            self._phrases.clear()
        self._phrases[key] = found
        return found

    def doc_freq(self, stem: str) -> int:
        at = self.vocab.get(stem)
        return 0 if at is None else self._count([at])

    def scores(
        self,
        conn: sqlite3.Connection,
        phrases: Sequence[Sequence[str]],
        lo: int = 0,
        hi: int | None = None,
        read: Sequence[Postings | None] = (),
    ) -> np.ndarray:
        """FTS5's bm25 (higher is better, 0 where nothing matched) of the base's slots
        [lo, hi) then the delta's, phrase by phrase in query order, each step as
        fts5_aux.c computes it. ``read``: per phrase, its postings in the base's [lo, hi)
        if already read."""
        size = len(self.base.rowid)
        hi = size if hi is None else hi
        scores = np.zeros(hi - lo + len(self.delta.rowid))
        for phrase, base in itertools.zip_longest(phrases, read[: len(phrases)]):
            docs, freq, held = self.frequency(conn, phrase, lo, hi, base)
            if not len(docs):
                continue
            idf = math.log((self.total - held + 0.5) / (held + 0.5))
            idf = idf if idf > 0.0 else 1e-6
            f = freq.astype(np.float64)
            # The same operations in the same order as the formula, in place.
            score = f * (K1 + 1.0)
            score /= f + self.norm[docs]
            score *= idf
            scores[_places(docs, lo, hi, size)] += score  # a slot once a phrase
        return scores

    def ranked(
        self,
        conn: sqlite3.Connection,
        phrases: Sequence[Sequence[str]],
        want: Ranking,
        window: int,
    ) -> Ranked:
        """The slots ``fts.ranked`` answers for the same MATCH, with their bm25: best
        first, the newest ``window`` matches ranked (all of them if that came back short),
        at least ``want.limit`` rows plus every row tied with the last. ``conn`` reads the
        text of records that may hold a phrase of three stems or more."""
        first, last = self._codes_of(want.namespace)
        live = self._live_per_namespace
        # FTS5's match is restricted to the namespace by its scope token, or because no
        # record lies outside; otherwise the window counts other namespaces' matches too.
        scoped = has_scope(want.namespace) or not (live[:first].any() or live[last:].any())
        size = len(self.base.rowid)
        lo, hi = (0, size)
        if scoped and self._grouped:
            codes = np.asarray((first, last), dtype=self.ns.dtype)  # else ns is cast
            lo, hi = (int(i) for i in self.ns[:size].searchsorted(codes))
        span = max(window, want.limit)
        read: list[Postings | None] = []
        if scoped and self._grouped and last - first == 1:
            # One namespace's run is in order of age: its matches older than its newest
            # ``span`` can only be ranked if the window comes back short.
            start, tails = self._window_start(conn, phrases, lo, hi, span)
            if start > lo:
                newest = [None if t is None else _after(t[:2], start) for t in tails]
                best = self._ranked(conn, phrases, want, span, (first, last), scoped, start, hi,
                                    newest)  # fmt: skip
                if best is not None:
                    return best
            read = [t[:2] if t is not None and t[2] else None for t in tails]
        found = self._ranked(conn, phrases, want, span, (first, last), scoped, lo, hi, read, False)
        assert found is not None
        return found

    def _window_start(
        self,
        conn: sqlite3.Connection,
        phrases: Sequence[Sequence[str]],
        lo: int,
        hi: int,
        span: int,
    ) -> tuple[int, list[tuple[np.ndarray, np.ndarray, bool] | None]]:
        """The first slot of [lo, hi) among the newest ``span`` live matches there, and
        per phrase of one or two stems the postings read to find it: its newest there,
        all of them in [start, hi), and whether they are all of its postings in [lo, hi)
        (the rest None)."""
        base_dead = self._dead[0]
        newest = span
        if len(base_dead):
            dead_lo, dead_hi = base_dead.searchsorted((lo, hi)).tolist()
            newest += dead_hi - dead_lo
        tails = []
        read: list[tuple[np.ndarray, np.ndarray, bool] | None] = []
        for phrase in phrases:
            ids = [self.vocab.get(s) for s in phrase]
            if not ids or None in ids:
                read.append(None)
                continue
            stems: list[int] = ids  # type: ignore[assignment]
            if len(stems) > 2:
                docs = self._recounted(conn, phrase, stems)[0]
                tails.append(docs[(docs >= lo) & (docs < hi)])
                read.append(None)
            else:
                docs, freq = self.base.frequency(stems, lo, hi, newest)
                tails.append(docs)
                read.append((docs, freq, len(docs) < newest))
        if not tails:
            return lo, read
        # A phrase whose newest ``newest`` were read holds ``span`` live matches from its
        # oldest of them on: the window starts there or later, so older slots need no merge.
        bound = max((int(t[0]) for t in tails if len(t) >= newest), default=lo)
        if bound > lo:
            tails = [t[int(t.searchsorted(t.dtype.type(bound))) :] for t in tails]
        # Runs of ascending slots: a stable sort merges them (quicksort sorts anew, and
        # np.unique hashes first).
        matched = np.sort(np.concatenate(tails), kind="stable")
        first = np.ones(len(matched), dtype=bool)
        first[1:] = matched[1:] != matched[:-1]
        matched = matched[first]
        if not self.whole:
            matched = matched[self.alive[matched]]
        return (int(matched[-span]) if len(matched) >= span else lo), read

    def _ranked(
        self,
        conn: sqlite3.Connection,
        phrases: Sequence[Sequence[str]],
        want: Ranking,
        span: int,
        codes: tuple[int, int],
        scoped: bool,
        lo: int,
        hi: int,
        read: Sequence[Postings | None] = (),
        window_only: bool = True,
    ) -> Ranked | None:
        """``ranked`` over the matches among the base's [lo, hi) and the delta (``read``:
        per phrase, its postings in the base's [lo, hi) if already read).
        ``window_only``: None if the newest ``span`` of them come back short."""
        size = len(self.base.rowid)
        scores = self.scores(conn, phrases, lo, hi, read)
        local = np.flatnonzero(scores > 0)
        found = _slots(local, lo, hi, size)
        if not self.whole:
            live_found = self.alive[found]
            local, found = local[live_found], found[live_found]
        code = self.ns[found]
        within = (code >= codes[0]) & (code < codes[1])
        keep = None
        if scoped:
            local, found = local[within], found[within]
        else:
            keep = within
        if want.observation_type is not None:
            kind = self.type[found] == self._type.get(want.observation_type, -1)
            keep = kind if keep is None else keep & kind
        if want.since is not None:
            recent = self.created[found] >= micros(want.since)
            keep = recent if keep is None else keep & recent
        if len(found) > span or window_only:
            newest = self.rowid[found]
            in_window = np.ones(len(found), dtype=bool)
            if len(found) > span:
                after = np.partition(newest, len(found) - span - 1)[len(found) - span - 1]
                in_window = newest > after
            if keep is not None:
                in_window &= keep
            best = self._top(scores, local[in_window], found[in_window], want.limit)
            if len(best.slot) >= want.limit:
                return best
            if window_only:
                return None
        if keep is not None:
            local, found = local[keep], found[keep]
        return self._top(scores, local, found, want.limit)

    def _codes_of(self, namespace: str) -> tuple[int, int]:
        """The namespaces under the prefix ``namespace``: codes [first, last)."""
        first = last = bisect.bisect_left(self.namespaces, namespace)
        while last < len(self.namespaces) and self.namespaces[last].startswith(namespace):
            last += 1
        return first, last

    def _top(self, scores: np.ndarray, local: np.ndarray, slots: np.ndarray, limit: int) -> Ranked:
        """The best ``limit`` of ``slots`` (their scores at ``local``) and their ties."""
        limit = max(limit, 1)  # as fts.ranked: a limit of 0 still ranks one row and its ties
        score = scores[local]
        if len(slots) > limit:
            kth = -np.partition(-score, limit - 1)[limit - 1]
            best = score >= kth
            slots, score = slots[best], score[best]
        order = np.argsort(-score, kind="stable")
        slots = slots[order]
        return Ranked(slots, self.rowid[slots], -score[order])


T = TypeVar("T")

# Every index of the process, so a forked child can drop what the parent's threads held.
_LEXICONS: weakref.WeakSet[Lexicon[Any]] = weakref.WeakSet()


class Lexicon(Generic[T]):
    """The process's index, built and refreshed on one background thread at a time.
    ``build`` may decline (None: the database is past what the index holds); it is then
    not tried again for ``retry_s``."""

    def __init__(
        self,
        build: Callable[[], T | None],
        refresh: Callable[[T], T | None],
        retry_s: float = 0.0,
    ) -> None:
        self._build, self._refresh, self._retry_s = build, refresh, retry_s
        self._lock = threading.Lock()
        self._index: T | None = None
        self._job: threading.Event | None = None  # set when the running build ends
        self._declined_at: float | None = None
        _LEXICONS.add(self)

    def _forked(self) -> None:
        # A fork copies the lock as it was: held, if a parent's build thread was inside
        # it, by a thread the child does not have. The job's thread is not in the child
        # either; what it built before the fork is kept.
        self._lock = threading.Lock()
        self._job = None

    @property
    def latest(self) -> T | None:
        """The index last built or refreshed, current or not."""
        return self._index

    def current(self, fresh: Callable[[T], bool], wait_s: float = 0.0) -> T | None:
        """The index if ``fresh`` says it is current with the database, after waiting up
        to ``wait_s`` for it to be built (or ``REFRESH_WAIT_S`` for a refresh); None: the
        database answers."""
        index = self._index
        if index is not None and fresh(index):
            return index
        declined = self._declined_at
        if index is None and declined is not None and time.monotonic() - declined < self._retry_s:
            return None
        done = self._start()
        if not done.wait(wait_s if index is None else max(wait_s, REFRESH_WAIT_S)):
            return None
        index = self._index
        return index if index is not None and fresh(index) else None

    def _start(self) -> threading.Event:
        with self._lock:
            if self._job is not None:
                return self._job
            done = self._job = threading.Event()
        threading.Thread(
            target=self._run, args=(done,), name="wakemark-lexicon", daemon=True
        ).start()
        return done

    def _run(self, done: threading.Event) -> None:
        try:
            index = self._index
            self._index = self._build() if index is None else self._refresh(index)
            self._declined_at = None if self._index is not None else time.monotonic()
            release_free_memory()  # the rows' text and the arrays of the build, freed
        except Exception as exc:  # the database answers meanwhile; the next search tries again
            log.warning("building the full-text index failed: %r", exc)
        finally:
            with self._lock:
                self._job = None
            done.set()


def _forked() -> None:
    for lexicon in list(_LEXICONS):
        lexicon._forked()


os.register_at_fork(after_in_child=_forked)

_stems: dict[str, tuple[str, ...]] = {}  # token -> stems (the tokenizer's, so per process)


def phrases(conn: sqlite3.Connection, tokens: Sequence[str]) -> dict[str, tuple[str, ...]]:
    """Each token's stems (its phrase in a MATCH); a token without any is left out."""
    global _stems
    missing = [t for t in tokens if t not in _stems]
    if missing:
        if len(_stems) > STEM_CACHE:
            _stems = {}
        found = stems(conn, missing)
        _stems.update({t: found.get(t, ()) for t in missing})
    cache = _stems
    return {t: cache[t] for t in tokens if cache.get(t)}

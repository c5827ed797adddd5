"""SQLite's binding of the full-text index held in the process
(``wakemark.shared.storage.lexicon``): built from the database's rows, and kept in step
through ``text_seq`` (migration 0016): a counter every insert, text edit and delete of a
record moves. While it reads what the index was built at, the index is current; otherwise
the rows stamped since the build are indexed again beside it (their old entries masked)
and records gone are masked, or the whole index is rebuilt once that delta grows past
``DELTA_ROWS``. FTS5 answers while it is built or refreshed.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import numpy as np

from wakemark.shared.storage.lexicon import DELTA_ROWS, READ_ROWS, Index, Lexicon, read_batch
from wakemark.shared.storage.sqlite.connection import connect

SEQ = "SELECT value FROM text_seq WHERE id = 1"
COUNT = "SELECT count(*) FROM memory_records"
IDS = "SELECT id FROM memory_records"
ROWS = """
SELECT id, namespace, observation_type, created_at, title, summary, facts_text
FROM memory_records WHERE text_seq > ?
"""
TEXTS = """
SELECT id, title, summary, facts_text FROM memory_records
WHERE id IN (SELECT value FROM json_each(?))
"""


def database_texts(conn: sqlite3.Connection, rowids: list[int]) -> list[sqlite3.Row]:
    """The records' text in the database ``conn`` opens."""
    return conn.execute(TEXTS, (json.dumps(rowids),)).fetchall()


def build(conn: sqlite3.Connection) -> Index:
    """Every record, read in one snapshot."""
    vocab: dict[str, int] = {}
    conn.execute("BEGIN")
    try:
        seq = int(conn.execute(SEQ).fetchone()[0])
        # In order of namespace: each namespace's records one run of the index (``Index``).
        cursor = conn.execute(ROWS + " ORDER BY namespace, id", (-1,))
        base = read_batch(conn, iter(lambda: cursor.fetchmany(READ_ROWS), []), vocab)
    finally:
        conn.execute("COMMIT")
    empty = read_batch(conn, [], vocab)
    alive = np.ones(len(base.rowid), dtype=bool)
    return Index((base, seq), empty, alive, vocab, seq, database_texts)


def refreshed(conn: sqlite3.Connection, index: Index) -> Index:
    """``index`` brought up to date: the rows stamped since its build indexed as its
    delta, the slots of records changed or gone masked; a rebuild past ``DELTA_ROWS``."""
    conn.execute("BEGIN")
    try:
        seq = int(conn.execute(SEQ).fetchone()[0])
        rows = conn.execute(ROWS + " LIMIT ?", (index.base_seq, DELTA_ROWS + 1)).fetchall()
        if len(rows) > DELTA_ROWS:
            conn.execute("COMMIT")
            return build(conn)
        count = int(conn.execute(COUNT).fetchone()[0])
        ids = None
        base = index.base
        stale = np.isin(base.rowid, [r[0] for r in rows])
        if len(base.rowid) - int(stale.sum()) + len(rows) != count:  # some were deleted
            ids = np.asarray([r[0] for r in conn.execute(IDS)], dtype=np.int64)
    finally:
        if conn.in_transaction:
            conn.execute("COMMIT")
    vocab = dict(index.vocab)
    delta = read_batch(conn, [rows], vocab)
    alive = ~stale
    if ids is not None:
        alive &= np.isin(base.rowid, ids)
    alive = np.concatenate((alive, np.ones(len(rows), dtype=bool)))
    return Index((base, index.base_seq), delta, alive, vocab, seq, database_texts)


def in_database(path: Path | str) -> Lexicon[Index]:
    """SQLite's index of the database at ``path``, read through a connection of its own."""

    def build_() -> Index:
        conn = connect(path)
        try:
            return build(conn)
        finally:
            conn.close()

    def refresh(index: Index) -> Index:
        conn = connect(path)
        try:
            return refreshed(conn, index)
        finally:
            conn.close()

    return Lexicon(build_, refresh)


def current_seq(conn: sqlite3.Connection) -> int:
    """What ``text_seq`` reads now: an index read at this value is current."""
    return int(conn.execute(SEQ).fetchone()[0])

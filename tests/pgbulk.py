"""Loading thousands of rows into a Postgres test schema in seconds rather than minutes.

Two costs dominate such loads, neither of them the product's per-record path:
- pgvector inserts each vector into the HNSW graph as it comes (a few ms each for random
  384-d vectors); building the index once over the loaded rows is several times faster,
  and gives the same kind of graph the searches walk.
- each record bumps the ``lexeme_df`` rows of its words; the same row updated again in
  one transaction leaves a chain of versions the next update walks, so one transaction
  of n records costs O(n²) (``CHUNK`` keeps each short).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from typing import TypeVar

import psycopg

CHUNK = 500
_INDEX = "memory_records_embedding"

T = TypeVar("T")


def chunks(items: Sequence[T], size: int = CHUNK) -> Iterable[Sequence[T]]:
    return (items[lo : lo + size] for lo in range(0, len(items), size))


@contextmanager
def hnsw_built_after(url: str) -> Iterator[None]:
    """Drops the schema's HNSW index for the block and builds it, as the migrations
    define it, at the block's end."""
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute(
            "SELECT indexdef FROM pg_indexes WHERE schemaname = current_schema()"
            " AND indexname = %s",
            (_INDEX,),
        ).fetchone()
        assert row, f"no {_INDEX} index in this schema"
        conn.execute(f"DROP INDEX {_INDEX}")
    yield
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(row[0])

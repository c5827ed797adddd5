"""Common-term pruning, the FTS scope column and bounded ranking of the lexical search."""

from __future__ import annotations

import shutil
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from wakemark.shared.models import MemoryRecord
from wakemark.shared.retrieval.lexical import fill, search_lexical, select_terms
from wakemark.shared.storage import Storage, lexical
from wakemark.shared.storage.sqlite import SqliteStorage, fts, migrate_sqlite
from wakemark.shared.storage.sqlite.migrate import migrator

NS = "/actor/a/project/p/"
T0 = datetime(2024, 5, 1, 12, 0, tzinfo=UTC)


def record(title: str, ns: str = NS, minutes: int = 0, **extra: object) -> MemoryRecord:
    return MemoryRecord(
        namespace=ns, title=title, created_at=T0 + timedelta(minutes=minutes), **extra
    )


def ids(hits: list) -> list[str]:  # type: ignore[type-arg]
    return [h.record.record_id for h in hits]


# --- the shared sanitizer ----------------------------------------------------------------


def test_pruning_drops_the_ubiquitous_term_and_keeps_the_rare_one() -> None:
    freq = {"error": 95, "zebra": 2, "fix": 60}
    terms = ["error", "zebra", "fix"]
    assert select_terms(terms, lambda t: freq, total=100) == ["zebra"]
    # Without the document count only the 32-term cap applies.
    assert select_terms(terms, lambda t: freq) == terms


def test_pruning_keeps_everything_when_no_rarer_term_matches_anything() -> None:
    freq = {"error": 95, "typo": 0}
    assert select_terms(["error", "typo"], lambda t: freq, total=100) == ["error", "typo"]
    assert select_terms(["error"], lambda t: freq, total=100) == ["error"]
    # A token of unknown frequency (a phrase like foo_bar) counts as rare and present.
    assert select_terms(["error", "foo_bar"], lambda t: freq, total=100) == ["foo_bar"]


@given(
    prefix=st.lists(st.sampled_from(["a", "b", "/", "0", ".", "\u00e9", "\U0001f600"]), max_size=4),
    name=st.text(
        st.sampled_from(["a", "b", "/", "0", ".", "-", "\u00e9", "\U0001f600"]), max_size=8
    ),
    cut=st.integers(min_value=0, max_value=8),
)
def test_namespace_range_holds_exactly_the_names_with_the_prefix(
    prefix: list[str], name: str, cut: int
) -> None:
    ns = "/" + "".join(prefix) + "/"
    name = ns[: max(0, len(ns) - cut)] + name  # near the prefix, often inside it
    bounds = lexical.namespace_range(ns)
    # SQLite's BINARY collation compares UTF-8 bytes, which order as code points do.
    inside = bounds["ns_lo"].encode() <= name.encode() < bounds["ns_hi"].encode()
    assert inside == name.startswith(ns)
    assert lexical.namespace_range(None)["ns_lo"] == "/"
    with pytest.raises(ValueError):
        lexical.namespace_range("/actor/a")


def test_fill_tops_up_from_the_wider_search_without_repeats() -> None:
    assert fill([1, 2], lambda: [2, 3, 4, 5], str, 4) == [1, 2, 3, 4]
    assert fill([1, 2], lambda: pytest.fail("not needed"), str, 2) == [1, 2]


# --- both backends -----------------------------------------------------------------------


def test_rare_term_ranks_first_and_common_term_hits_fill_the_rest(storage: Storage) -> None:
    rare = record("zebra crossing", minutes=0)
    common = [record(f"common entry {i}", minutes=i) for i in range(1, 10)]
    for r in (rare, *common):
        storage.put_memory_record(r)
    assert ids(search_lexical(storage, NS, "common zebra", 1)) == [rare.record_id]
    hits = ids(search_lexical(storage, NS, "common zebra", 20))
    assert hits[0] == rare.record_id and sorted(hits[1:]) == sorted(r.record_id for r in common)


@pytest.mark.parametrize(
    "other", ["/actor/a/project/pq/", "/actor/b/project/p/", "/actor/ab/project/p/"]
)
def test_namespace_and_actor_scopes_are_exact(storage: Storage, other: str) -> None:
    mine = record("shared words here", ns=NS)
    sibling = record("shared words here", ns="/actor/a/project/q/")
    theirs = record("shared words here", ns=other)
    for r in (mine, sibling, theirs):
        storage.put_memory_record(r)
    assert ids(search_lexical(storage, NS, "shared words", 10)) == [mine.record_id]
    actor = set(ids(search_lexical(storage, "/actor/a/", "shared words", 10)))
    expected = {mine.record_id, sibling.record_id}
    if other.startswith("/actor/a/"):
        expected.add(theirs.record_id)
    assert actor == expected
    # A prefix the index has no scope token for still filters exactly.
    everyone = set(ids(search_lexical(storage, "/actor/", "shared words", 10)))
    assert everyone == {mine.record_id, sibling.record_id, theirs.record_id}
    deleted = storage.delete_memory_records([mine.record_id])
    assert deleted == [mine.record_id]
    assert search_lexical(storage, NS, "shared words", 10) == []


def test_a_namespace_alone_in_the_index_then_with_a_neighbour(storage: Storage) -> None:
    # Alone, the MATCH needs no scope; once another namespace has records it must again.
    mine = [record(f"lonely parser {i}", minutes=i) for i in range(3)]
    for r in mine:
        storage.put_memory_record(r)
    expected = [r.record_id for r in reversed(mine)]
    assert ids(search_lexical(storage, NS, "parser", 10)) == expected
    assert ids(search_lexical(storage, "/actor/a/", "parser", 10)) == expected
    for ns in ("/actor/a/project/pq/", "/actor/a/project/o/", "/actor/b/project/p/"):
        storage.put_memory_record(record("lonely parser", ns=ns, minutes=9))
    assert ids(search_lexical(storage, NS, "parser", 10)) == expected
    assert len(search_lexical(storage, "/actor/a/", "parser", 10)) == 5


def test_bounded_ranking_reruns_unbounded_when_filters_leave_it_short(
    storage: Storage, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Tiny windows so that 12 records exceed them on both backends.
    monkeypatch.setattr(fts, "WINDOW", 3)
    from wakemark.shared.storage.postgres import storage as pg

    monkeypatch.setattr(pg.PostgresStorage, "fts_window", 2)
    old = record("deploy script failed", minutes=0, observation_type="decision")
    newer = [record(f"deploy script failed {i}", minutes=i + 1) for i in range(11)]
    for r in (old, *newer):
        storage.put_memory_record(r)
    assert ids(search_lexical(storage, NS, "deploy", 5, observation_type="decision")) == [
        old.record_id
    ]
    assert len(search_lexical(storage, NS, "deploy", 20)) == 12
    assert len(search_lexical(storage, NS, "deploy", 2)) == 2


# --- SQLite migration --------------------------------------------------------------------


def test_sqlite_scope_migration_reindexes_existing_records(tmp_path: Path) -> None:
    first = tmp_path / "only-0001"
    first.mkdir()
    shutil.copy(migrator.default_directory("sqlite") / "0001_initial.sql", first)
    path = tmp_path / "wakemark.db"
    migrate_sqlite(path, first)
    before = SqliteStorage(path)
    mine = record("legacy parser note")
    theirs = record("legacy parser note", ns="/actor/z/project/p/")
    before.put_memory_record(mine)
    before.put_memory_record(theirs)
    before.close()
    assert "0002_fts_scope" in migrate_sqlite(path)
    after = SqliteStorage(path)
    try:
        assert ids(search_lexical(after, NS, "parser", 10)) == [mine.record_id]
        assert ids(search_lexical(after, "/actor/z/", "legacy", 10)) == [theirs.record_id]
    finally:
        after.close()

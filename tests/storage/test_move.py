"""Moving a project's namespace (``Upkeep.move_namespace``), the storage contract, on each
backend: every row follows, the per-project counts end as if written in the new place,
caches warmed before the move find the rows after it, the move's audit entry commits with
it, and a move that cannot be made leaves everything as it was, its audit entry too."""

from __future__ import annotations

import sqlite3
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest

from tests.storage.conftest import T0, event, record, retrieval, vec
from tests.storage.test_anchors import anchors
from wakemark.shared.cache import LocalEpochs
from wakemark.shared.config import Settings
from wakemark.shared.models import MemoryRecord, StoredEvent, new_ulid
from wakemark.shared.retrieval.lexical import search_lexical
from wakemark.shared.retrieval.vectors import VectorCache
from wakemark.shared.storage import (
    AuditEntry,
    ConflictError,
    ImportBatch,
    ImportCounts,
    NotFoundError,
    Storage,
    TurnRow,
    open_storage,
)
from wakemark.shared.storage.postgres import PostgresStorage

OLD, NEW = "/actor/a/project/old/", "/actor/a/project/new/"
ALL_KINDS = ("records", "versions", "anchors", "turns", "events", "retrievals")
ENTRY = AuditEntry("cli:u", "move", OLD, (NEW,), 1, T0)


@dataclass
class Project:
    current: MemoryRecord  # a record with anchors and one older version
    version: MemoryRecord
    turn_id: str


@dataclass
class Watched:
    storage: Storage
    epochs: LocalEpochs
    vectors: VectorCache


@pytest.fixture
def watched(backend_settings: Settings) -> Iterator[Watched]:
    """A storage whose change hook bumps the epochs a vector cache over it reads."""
    epochs = LocalEpochs()
    storage = open_storage(backend_settings, on_change=epochs.bump)
    cache = VectorCache(storage.list_embeddings, epochs.get, storage.embedded_ids, 2**30)
    yield Watched(storage, epochs, cache)
    storage.close()


def _fill(storage: Storage, ns: str, word: str, path: str, seed: int) -> Project:
    """A project's rows: a prompt and a tool use in one turn, its retrieval audit row, and
    a record about ``word`` (embedded, with anchors) that superseded an older one."""
    prompt = event("prompt", text=f"why does the {word} fail", ns=ns, project_path=path)
    turn_id = storage.put_event(prompt).turn_id
    storage.put_event(event("tool_use", ns=ns, project_path=path))
    storage.put_retrieval(retrieval(prompt, minutes=seed))
    version = record(f"{word} parser drops the last line", ns=ns, minutes=seed)
    current = record(f"{word} parser reads to the end", ns=ns, minutes=seed + 1)
    storage.put_memory_record(version)
    storage.put_embedding(version.record_id, vec(seed))
    with storage.transaction() as tx:
        tx.put_memory_record(current)
        tx.put_embedding(current.record_id, vec(seed + 1))
        tx.put_anchors(anchors(current.record_id, ns=ns))
        assert tx.supersede(version.record_id, current.record_id, T0)
    assert turn_id is not None
    return Project(current, version, turn_id)


def _close(storage: Storage, project: Project) -> None:
    """Close the project's turn, as the idle sweep does."""
    assert storage.close_idle_turns(datetime.now(UTC) + timedelta(days=1)) == [project.turn_id]


def _state(storage: Storage) -> dict[str, Any]:
    """What a failed or dry-run move must leave exactly as it was."""
    return {
        "stats": (storage.stats(OLD), storage.stats(NEW)),
        "projects": storage.projects(),
        "sessions": (storage.retrieval_sessions(OLD), storage.retrieval_sessions(NEW)),
        "events": {e.event_id: e.namespace for e in storage.list_events("/actor/a/", limit=100)},
        "versions": storage.list_versions("/actor/a/"),
        "records": storage.list_memory_records("/actor/a/").items,
        "anchors": storage.list_anchors("/actor/a/", 100),
    }


def _found(storage: Storage, ns: str, query: str) -> list[str]:
    """The hits of a search answered by the full-text index held in the process, built
    or brought up to date first (FTS5 or Postgres would answer while it is not)."""
    assert storage.memory_index(wait_s=30) is not None  # type: ignore[attr-defined]
    return [h.record.record_id for h in search_lexical(storage, ns, query, 10)]


def _project(storage: Storage, ns: str) -> dict[str, Any]:
    return next(p for p in storage.projects() if p["namespace"] == ns)


def test_a_project_moves_whole_into_an_empty_namespace(watched: Watched) -> None:
    storage = watched.storage
    old = _fill(storage, OLD, "invoice", "/home/u/invoicer", 1)
    before, listed = storage.stats(OLD), _project(storage, OLD)
    assert _found(storage, OLD, "invoice") == [old.current.record_id]  # warm: the text index
    assert len(watched.vectors.get(OLD).ids) == 1  # type: ignore[union-attr]

    moved = storage.move_namespace(OLD, NEW, "/home/u/billing")
    assert moved == dict.fromkeys(ALL_KINDS, 1) | {"events": 2}
    assert storage.stats(NEW) == before
    assert storage.stats(OLD) == dict.fromkeys(before, 0)
    (project,) = storage.projects()
    assert project["namespace"] == NEW and project["project_path"] == "/home/u/billing"
    assert project["display_name"] == "billing"
    assert (project["event_count"], project["memory_count"]) == (2, 1)
    assert project["last_activity"] == listed["last_activity"]

    current = storage.get_memory_record(old.current.record_id)
    assert current is not None and current.namespace == NEW
    (version,) = storage.get_history(current.record_id)
    assert version.record.record_id == old.version.record_id
    assert version.record.namespace == NEW and version.current_id == current.record_id
    assert storage.get_anchors([current.record_id])[current.record_id].namespace == NEW
    assert {e.namespace for e in storage.list_events(NEW)} == {NEW}
    assert [r.namespace for r in storage.list_retrievals(NEW)] == [NEW]
    assert [s.prompts for s in storage.retrieval_sessions(NEW)] == [1]
    assert storage.retrieval_sessions(OLD) == [] and storage.list_events(OLD) == []
    assert storage.session_turns(NEW, "s1", 10)[0].turn_id == old.turn_id

    assert _found(storage, NEW, "invoice") == [current.record_id]
    assert _found(storage, OLD, "invoice") == []
    assert watched.vectors.get(NEW).ids == [current.record_id]  # type: ignore[union-attr]
    assert watched.vectors.get(OLD).ids == []  # type: ignore[union-attr]


def test_a_move_merges_with_what_the_new_place_already_holds(watched: Watched) -> None:
    """The realistic case: the agent wrote into the new place before the move. Counts,
    sums and the newest times are those of both projects' rows together."""
    storage = watched.storage
    old = _fill(storage, OLD, "invoice", "/home/u/invoicer", 1)
    _close(storage, old)  # the same session id carries on in the new place
    new = _fill(storage, NEW, "shipping", "/home/u/billing", 10)
    both = [storage.stats(OLD), storage.stats(NEW)]
    projects = {p["namespace"]: p for p in storage.projects()}
    sessions = storage.retrieval_sessions(OLD) + storage.retrieval_sessions(NEW)
    for ns in (OLD, NEW):  # warm caches of both
        assert len(_found(storage, ns, "parser")) == 1
        assert len(watched.vectors.get(ns).ids) == 1  # type: ignore[union-attr]

    moved = storage.move_namespace(OLD, NEW)
    assert moved == dict.fromkeys(ALL_KINDS, 1) | {"events": 2}
    assert storage.stats(NEW) == {k: both[0][k] + both[1][k] for k in both[0]}
    (project,) = storage.projects()
    assert project["project_path"] == "/home/u/billing"  # the newest event's
    assert (project["event_count"], project["memory_count"]) == (4, 2)
    assert project["last_activity"] == max(p["last_activity"] for p in projects.values())
    (session,) = storage.retrieval_sessions(NEW)
    assert (session.namespace, session.session_id, session.prompts) == (NEW, "s1", 2)
    assert session.records == sum(s.records for s in sessions)
    assert session.latency_ms == pytest.approx(sum(s.latency_ms for s in sessions))
    assert session.first_at == min(s.first_at for s in sessions)
    assert session.last_at == max(s.last_at for s in sessions)
    assert storage.retrieval_totals(NEW)["prompts"] == 2

    currents = {old.current.record_id, new.current.record_id}
    assert set(_found(storage, NEW, "parser")) == currents
    assert _found(storage, OLD, "parser") == []
    assert set(watched.vectors.get(NEW).ids) == currents  # type: ignore[union-attr]
    assert watched.vectors.get(OLD).ids == []  # type: ignore[union-attr]
    assert {v.record.record_id for v in storage.list_versions(NEW)} == {
        old.version.record_id,
        new.version.record_id,
    }


def test_the_change_hook_names_both_namespaces_after_the_commit(watched: Watched) -> None:
    _fill(watched.storage, OLD, "invoice", "/home/u/invoicer", 1)
    epochs = (watched.epochs.get(OLD), watched.epochs.get(NEW))
    watched.storage.move_namespace(OLD, NEW, commit=False)
    assert (watched.epochs.get(OLD), watched.epochs.get(NEW)) == epochs
    watched.storage.move_namespace(OLD, NEW)
    assert watched.epochs.get(OLD) > epochs[0] and watched.epochs.get(NEW) > epochs[1]


def test_a_dry_run_counts_and_writes_nothing(storage: Storage) -> None:
    old = _fill(storage, OLD, "invoice", "/home/u/invoicer", 1)
    _close(storage, old)
    _fill(storage, NEW, "shipping", "/home/u/billing", 10)
    before = _state(storage)
    moved = storage.move_namespace(OLD, NEW, "/home/u/elsewhere", commit=False)
    assert moved == dict.fromkeys(ALL_KINDS, 1) | {"events": 2}
    assert _state(storage) == before


def test_a_session_open_in_both_places_refuses_the_whole_move(storage: Storage) -> None:
    _fill(storage, OLD, "invoice", "/home/u/invoicer", 1)
    _fill(storage, NEW, "shipping", "/home/u/billing", 10)  # session s1, open in both
    before = _state(storage)
    with pytest.raises(ConflictError, match="s1"):
        storage.move_namespace(OLD, NEW, "/home/u/billing", audit=ENTRY)
    with pytest.raises(ConflictError):
        storage.move_namespace(OLD, NEW, commit=False)
    assert _state(storage) == before
    assert storage.list_audit() == []


def test_the_audit_entry_commits_with_the_move(storage: Storage) -> None:
    _fill(storage, OLD, "invoice", "/home/u/invoicer", 1)
    storage.move_namespace(OLD, NEW, audit=ENTRY, commit=False)
    assert storage.list_audit() == []
    storage.move_namespace(OLD, NEW, audit=ENTRY)
    (entry,) = storage.list_audit()
    assert entry == AuditEntry("cli:u", "move", OLD, (NEW,), 1, T0, id=entry.id)


def refuse_audit(storage: Storage) -> None:
    """A real failure of the audit insert, a move's last write: a trigger that raises."""
    if storage.backend == "sqlite":
        with storage._conns.write() as conn:  # type: ignore[attr-defined]
            conn.execute(
                "CREATE TRIGGER refuse_audit BEFORE INSERT ON audit_log"
                " BEGIN SELECT RAISE(ABORT, 'audit refused'); END"
            )
        return
    with storage._db.connection() as conn:  # type: ignore[attr-defined]
        conn.execute(
            "CREATE FUNCTION refuse_audit() RETURNS trigger LANGUAGE plpgsql"
            " AS $$ BEGIN RAISE EXCEPTION 'audit refused'; END $$"
        )
        conn.execute(
            "CREATE TRIGGER refuse_audit BEFORE INSERT ON audit_log"
            " FOR EACH ROW EXECUTE FUNCTION refuse_audit()"
        )


def test_a_move_whose_audit_entry_fails_moves_nothing(storage: Storage) -> None:
    _fill(storage, OLD, "invoice", "/home/u/invoicer", 1)
    before = _state(storage)
    refuse_audit(storage)
    with pytest.raises((sqlite3.Error, psycopg.Error), match="audit refused"):
        storage.move_namespace(OLD, NEW, "/home/u/billing", audit=ENTRY)
    assert _state(storage) == before
    assert storage.list_audit() == []


@pytest.mark.parametrize(
    ("old", "new"),
    [(OLD, OLD), ("/actor/a/", NEW), (OLD, "/actor/a/project/new"), (OLD, "")],
)
def test_a_move_needs_two_different_namespaces(storage: Storage, old: str, new: str) -> None:
    storage.put_memory_record(record(ns=OLD))
    with pytest.raises(ValueError):
        storage.move_namespace(old, new)


def test_nothing_to_move_is_not_found(storage: Storage) -> None:
    storage.put_memory_record(record(ns=NEW))
    with pytest.raises(NotFoundError):
        storage.move_namespace(OLD, NEW, "/home/u/billing")
    (project,) = storage.projects()
    assert project["namespace"] == NEW and project["project_path"] is None


def _waiting(pg_url: str, locktype: str) -> int:
    with psycopg.connect(pg_url) as conn:
        sql = "SELECT count(*) FROM pg_locks WHERE NOT granted AND locktype = %s"
        return int(conn.execute(sql, (locktype,)).fetchone()[0])  # type: ignore[index]


def _until(done: Callable[[], bool]) -> None:
    deadline = time.monotonic() + 10
    while not done() and time.monotonic() < deadline:
        time.sleep(0.02)


@contextmanager
def _move_held(storage: Storage, pg_url: str) -> Iterator[None]:
    """A move of OLD to NEW, held mid-way (its rows moved, its merge of the counts
    waiting on a table lock a second connection holds) until the block ends."""
    holder = psycopg.connect(pg_url)
    holder.execute("LOCK TABLE retrieval_sessions IN EXCLUSIVE MODE")  # the move's merge
    mover = threading.Thread(target=storage.move_namespace, args=(OLD, NEW))
    mover.start()
    try:
        _until(lambda: _waiting(pg_url, "relation") == 1)
        yield
    finally:
        holder.rollback()
        holder.close()
        mover.join(timeout=30)


def test_events_posted_into_the_old_place_during_a_move_land_whole(
    store: PostgresStorage, pg_url: str
) -> None:
    """Postgres (SQLite's one writer serializes a move whole): the move is held after
    its last UPDATE while two prompts are posted into the old namespace, one of the
    session whose open turn moves, one of a new session. They wait for the move, then
    open turns there: each event in its turn's namespace, every project counted right."""
    storage = store
    storage.put_event(event("prompt", ns=OLD, session="s1"))
    storage.put_memory_record(record(ns=OLD))
    posted: list[str] = []
    posters = [
        threading.Thread(
            target=lambda s=s: posted.append(
                storage.put_event(event("prompt", ns=OLD, session=s)).event_id
            )
        )  # fmt: skip
        for s in ("s1", "s2")
    ]
    with _move_held(storage, pg_url):
        for t in posters:
            t.start()
        _until(lambda: len(posted) == 2 or _waiting(pg_url, "advisory") == 2)
    for t in posters:
        t.join(timeout=30)

    with psycopg.connect(pg_url) as conn:
        stray = "SELECT count(*) FROM events e JOIN turns t USING (turn_id)"
        assert conn.execute(stray + " WHERE e.namespace <> t.namespace").fetchone() == (0,)
    events = storage.list_events("/actor/a/", limit=10)
    assert {e.event_id for e in events if e.namespace == OLD} == set(posted)
    assert [storage.stats(ns)["events"] for ns in (OLD, NEW)] == [2, 1]
    assert {p["namespace"]: p["event_count"] for p in storage.projects()} == {OLD: 2, NEW: 1}


def test_an_import_into_the_old_place_during_a_move_lands_whole(
    store: PostgresStorage, pg_url: str
) -> None:
    """Postgres: an import batch of a closed turn and its events (no records, so not
    held off by the records' lock) into the old namespace, made while a move is held
    mid-way, waits for the move, then lands whole in the old namespace, counted there."""
    storage = store
    storage.put_event(event("prompt", ns=OLD, session="s1"))
    storage.put_memory_record(record(ns=OLD))
    turn_id = new_ulid()
    batch = ImportBatch(turns=[TurnRow(turn_id, OLD, "s9", T0, T0, T0, None, [])])
    for kind in ("prompt", "tool_use"):
        e = event(kind, ns=OLD, session="s9", at=T0)
        batch.events.append(StoredEvent(**e.model_dump(), transaction_time=T0, turn_id=turn_id))
    imported: list[ImportCounts] = []
    importer = threading.Thread(target=lambda: imported.append(storage.import_batch(batch)))
    with _move_held(storage, pg_url):
        importer.start()
        _until(lambda: bool(imported) or _waiting(pg_url, "advisory") == 1)
        waited = not imported
    importer.join(timeout=30)

    assert waited
    assert imported == [ImportCounts(turns=1, events=2)]
    with psycopg.connect(pg_url) as conn:
        sql = "SELECT namespace, count(*) FROM events GROUP BY namespace"
        assert dict(conn.execute(sql).fetchall()) == {OLD: 2, NEW: 1}
        sql = "SELECT namespace, session_id FROM turns ORDER BY namespace"
        assert conn.execute(sql).fetchall() == [(NEW, "s1"), (OLD, "s9")]
    assert [storage.stats(ns)["events"] for ns in (OLD, NEW)] == [2, 1]
    assert {p["namespace"]: p["event_count"] for p in storage.projects()} == {OLD: 2, NEW: 1}

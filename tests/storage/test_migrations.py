"""The migration runner on each backend, with throwaway migration directories."""

from __future__ import annotations

import multiprocessing
import os
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from wakemark.shared.config import Settings, prepare_home
from wakemark.shared.retrieval.lexical import search_lexical
from wakemark.shared.storage import MigrationDriftError
from wakemark.shared.storage.migrator import default_directory, discover
from wakemark.shared.storage.sqlite.migrate import migrate_sqlite

BACKENDS = ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]


@pytest.fixture(params=BACKENDS)
def target(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[str, str]:
    if request.param == "postgres":
        return ("postgres", request.getfixturevalue("pg_url"))
    return ("sqlite", str(tmp_path / "m.db"))


def migrate(target: tuple[str, str], directory: Path) -> list[str]:
    backend, where = target
    if backend == "postgres":
        from wakemark.shared.storage.postgres import migrate_postgres

        return migrate_postgres(where, migrations_dir=directory)
    from wakemark.shared.storage.sqlite import migrate_sqlite

    return migrate_sqlite(where, migrations_dir=directory)


def query(target: tuple[str, str], sql: str) -> list[tuple[Any, ...]]:
    backend, where = target
    if backend == "postgres":
        import psycopg

        with psycopg.connect(where) as conn:
            return [tuple(r) for r in conn.execute(sql).fetchall()]
    import sqlite3

    conn = sqlite3.connect(where)
    try:
        return [tuple(r) for r in conn.execute(sql).fetchall()]
    finally:
        conn.close()


def write(directory: Path, files: dict[str, str]) -> Path:
    directory.mkdir(exist_ok=True)
    for name, sql in files.items():
        (directory / name).write_text(sql)
    return directory


FIRST = {
    "0001_things.sql": "CREATE TABLE things (id INTEGER PRIMARY KEY, v TEXT NOT NULL);\n",
    "0002_seed.sql": "-- one row per application\nINSERT INTO things (id, v) VALUES (1, 'a');\n",
}


def recorded(target: tuple[str, str]) -> list[tuple[Any, ...]]:
    return query(target, "SELECT id, name FROM _migrations ORDER BY id")


def test_fresh_apply_then_rerun_is_a_noop(target: tuple[str, str], tmp_path: Path) -> None:
    directory = write(tmp_path / "mig", FIRST)
    assert migrate(target, directory) == ["0001_things", "0002_seed"]
    assert recorded(target) == [(1, "things"), (2, "seed")]
    assert migrate(target, directory) == []
    assert query(target, "SELECT id, v FROM things") == [(1, "a")]

    write(directory, {"0003_more.sql": "INSERT INTO things (id, v) VALUES (2, 'b');\n"})
    assert migrate(target, directory) == ["0003_more"]
    assert query(target, "SELECT count(*) FROM things") == [(2,)]


def test_renamed_migration_is_drift(target: tuple[str, str], tmp_path: Path) -> None:
    directory = write(tmp_path / "mig", FIRST)
    migrate(target, directory)
    (directory / "0002_seed.sql").rename(directory / "0002_renamed.sql")
    with pytest.raises(MigrationDriftError, match="0002"):
        migrate(target, directory)


def test_missing_migration_file_is_drift(target: tuple[str, str], tmp_path: Path) -> None:
    directory = write(tmp_path / "mig", FIRST)
    migrate(target, directory)
    (directory / "0002_seed.sql").unlink()
    write(directory, {"0003_more.sql": "INSERT INTO things (id, v) VALUES (2, 'b');\n"})
    with pytest.raises(MigrationDriftError, match="0002_seed"):
        migrate(target, directory)
    assert query(target, "SELECT count(*) FROM things") == [(1,)]  # 0003 never ran


def test_failing_migration_rolls_back(target: tuple[str, str], tmp_path: Path) -> None:
    directory = write(tmp_path / "mig", FIRST)
    migrate(target, directory)
    write(
        directory,
        {
            "0003_broken.sql": (
                "CREATE TABLE half (id INTEGER);\n"
                "INSERT INTO things (id, v) VALUES (3, 'c');\n"
                "INSERT INTO no_such_table (id) VALUES (1);\n"
            )
        },
    )
    with pytest.raises(Exception, match="no_such_table"):  # noqa: B017 - driver-specific type
        migrate(target, directory)
    assert recorded(target) == [(1, "things"), (2, "seed")]
    assert query(target, "SELECT count(*) FROM things") == [(1,)]
    with pytest.raises(Exception, match="half"):  # noqa: B017
        query(target, "SELECT * FROM half")


def _race(target: tuple[str, str], directory: Path, start: Any, out: Any) -> None:
    start.wait()
    out.put(migrate(target, directory))


def test_two_processes_apply_each_migration_once(target: tuple[str, str], tmp_path: Path) -> None:
    files = {
        "0001_hits.sql": "CREATE TABLE hits (n INTEGER NOT NULL);\n",
        **{f"{i:04d}_hit{i}.sql": f"INSERT INTO hits (n) VALUES ({i});\n" for i in range(2, 12)},
    }
    directory = write(tmp_path / "mig", files)
    ctx = multiprocessing.get_context("fork")
    start, out = ctx.Event(), ctx.Queue()
    procs = [ctx.Process(target=_race, args=(target, directory, start, out)) for _ in range(2)]
    for p in procs:
        p.start()
    start.set()
    results = [out.get(timeout=60) for _ in procs]
    for p in procs:
        p.join(timeout=60)
        assert p.exitcode == 0
    applied = sorted(label for result in results for label in result)
    assert applied == sorted(Path(name).stem for name in files)
    assert query(target, "SELECT n FROM hits ORDER BY n") == [(i,) for i in range(2, 12)]
    assert len(recorded(target)) == 11


def test_misnamed_file_is_an_error(tmp_path: Path) -> None:
    directory = write(tmp_path / "mig", {"1_bad.sql": "SELECT 1;"})
    with pytest.raises(ValueError, match="NNNN_name"):
        discover(directory)


def test_shipped_migrations_are_well_formed() -> None:
    for backend in ("sqlite", "postgres"):
        migrations = discover(default_directory(backend))
        ids = [m.id for m in migrations]
        # Strictly increasing from 1; a gap is allowed while a parallel branch's number
        # (taken to avoid a clash) waits for its predecessor to land.
        assert ids[0] == 1 and ids == sorted(set(ids)), backend


# The migrations only one engine needs (its own index, trigger, function or counter);
# every other migration is in both backends under the same name (migrations/README.md).
BACKEND_ONLY = {
    "postgres": {"doc_count", "embedding_xid", "memory_fts", "wakemark_names",
                 "fts_namespace_gin", "trgm_namespace_gin", "text_xid", "staged_inline",
                 "change_count", "fts_sync_text_only"},
    "sqlite": {"fts_scope", "embedding_seq", "event_counts_per_batch", "text_seq"},
}  # fmt: skip


def test_the_backends_pair_their_migrations_by_name_in_the_same_order() -> None:
    names = {b: [m.name for m in discover(default_directory(b))] for b in BACKEND_ONLY}
    for backend, only in BACKEND_ONLY.items():
        assert sorted(only - set(names[backend])) == [], backend  # a stale entry
        assert len(set(names[backend])) == len(names[backend]), backend
    shared = {b: [n for n in names[b] if n not in BACKEND_ONLY[b]] for b in names}
    assert shared["sqlite"] == shared["postgres"]


@pytest.mark.postgres
def test_a_database_migrated_under_the_former_name_keeps_working(
    pg_url: str, tmp_path: Path
) -> None:
    """Migrations 0001-0005 as they were before the rename (functions named engram_*),
    then today's runner: 0006 renames them and full-text writes and search still work."""
    from wakemark.shared.config import Settings
    from wakemark.shared.models import MemoryRecord
    from wakemark.shared.storage import open_storage
    from wakemark.shared.storage.postgres import migrate_postgres

    old = tmp_path / "old"
    old.mkdir()
    for m in discover(default_directory("postgres")):
        if m.id <= 5:
            sql = m.sql.replace("wakemark_", "engram_")
            (old / f"{m.label}.sql").write_text(sql)
    assert len(migrate_postgres(pg_url, migrations_dir=old)) == 5
    assert migrate_postgres(pg_url)[0] == "0006_wakemark_names"  # then any later ones
    names = {r[0] for r in query(("postgres", pg_url), "SELECT proname FROM pg_proc")}
    assert not {n for n in names if n.startswith("engram_")}
    assert {"wakemark_fts_doc", "wakemark_memory_fts_sync", "wakemark_unaccent"} <= names
    store = open_storage(Settings(home=tmp_path / "home", database_url=pg_url, embedder="off"))
    try:
        record = MemoryRecord(namespace="/actor/a/project/p/", title="Crème brûlée recipe")
        store.put_memory_record(record)
        hits = search_lexical(store, "/actor/a/project/p/", "creme", 5)
        assert [h.record.record_id for h in hits] == [record.record_id]
    finally:
        store.close()


def test_the_project_counts_start_from_the_rows_already_stored(
    target: tuple[str, str], tmp_path: Path
) -> None:
    """The counts migration fills its tables from what a database already holds; the
    triggers (and SQLite's put_events) carry on from there."""
    from datetime import UTC, datetime

    import numpy as np

    from wakemark.shared.config import Settings
    from wakemark.shared.models import Event, MemoryRecord, new_ulid
    from wakemark.shared.storage import open_storage

    backend, where = target
    shipped = discover(default_directory(backend))
    counts = next(m.id for m in shipped if m.name == "viewer_counts")
    before = tmp_path / "before"
    before.mkdir()
    for m in shipped:
        if m.id < counts:
            (before / f"{m.label}.sql").write_text(m.sql)
    settings = Settings(home=tmp_path / "home", embedder="off",
                        database_url=where if backend == "postgres" else None)  # fmt: skip
    if backend == "sqlite":
        target = ("sqlite", str(settings.sqlite_path))
    migrate(target, before)
    ns = "/actor/a/project/p/"

    def event(path: str | None) -> Event:
        return Event.model_validate(
            {"event_id": new_ulid(), "session_id": "s", "actor_id": "a", "namespace": ns,
             "kind": "note", "body": {"type": "text", "content": "x"},
             "valid_time": datetime.now(UTC).isoformat(),
             "source": {"surface": "test", "project_path": path}}
        )  # fmt: skip

    events = [event("/src/old"), event("/src/p"), event(None)]
    if backend == "sqlite":
        # Today's SQLite put_events counts its batch itself, in a table this database
        # does not have yet: the events go in as that statement wrote them then.
        import sqlite3

        from wakemark.shared.storage.sqlite import codec
        from wakemark.shared.storage.sqlite import events as q

        with sqlite3.connect(target[1]) as conn:
            now = codec.ts(datetime.now(UTC))
            conn.executemany(
                q.INSERT_EVENT, [{**codec.event_params(e, now), "turn_id": "t"} for e in events]
            )
        conn.close()
    store = open_storage(settings)
    try:
        if backend == "postgres":
            store.put_events(events)
        records = [MemoryRecord(namespace=ns, title=f"r{i}") for i in range(3)]
        for r in records:
            store.put_memory_record(r)
        store.put_embedding(records[0].record_id, np.ones(384, dtype=np.float32))
    finally:
        store.close()
    migrate(target, default_directory(backend))
    store = open_storage(settings)
    try:
        stats = store.stats(ns)
        assert (stats["events"], stats["memories"], stats["embedded"]) == (3, 3, 1)
        store.put_memory_record(MemoryRecord(namespace=ns, title="after"))
        (project,) = store.projects()
        assert (project["event_count"], project["memory_count"]) == (3, 4)
        assert project["project_path"] == "/src/p"
        store.put_events([event("/src/new"), event(None)])
        (project,) = store.projects()
        assert (project["event_count"], project["project_path"]) == (5, "/src/new")
    finally:
        store.close()


def test_a_database_behind_the_code_is_migrated_by_the_command(tmp_path: Path) -> None:
    """``wakemark stats`` on a home whose database lacks the newer migrations applies them
    (the CLI's commands migrate before use) instead of failing on a missing table."""
    home = tmp_path / "home"
    prepare_home(Settings(home=home))
    first = tmp_path / "first"
    first.mkdir()
    for path in sorted(default_directory("sqlite").glob("*.sql"))[:5]:
        (first / path.name).write_text(path.read_text())
    migrate_sqlite(home / "wakemark.db", first)
    env = {k: v for k, v in os.environ.items() if not k.startswith("WAKEMARK_")}
    env |= {"WAKEMARK_HOME": str(home), "WAKEMARK_EMBEDDER": "off"}
    done = subprocess.run(
        [sys.executable, "-m", "wakemark.services.cli.main", "stats"],
        env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    with sqlite3.connect(home / "wakemark.db") as conn:
        [(count,)] = conn.execute("SELECT count(*) FROM _migrations").fetchall()
    assert count == len(discover(default_directory("sqlite")))

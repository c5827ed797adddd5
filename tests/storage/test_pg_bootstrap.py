"""``wakemark migrate`` and ``doctor`` on a Postgres database without the extensions.

Each test gets a fresh database owned by a fresh non-superuser role (created, then
dropped, as the superuser): ``unaccent`` is trusted, so its owner may create it;
``vector`` is not, so migrate stops with the one line a superuser must run, and doctor
names the missing extension instead of calling the database unreachable.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import pytest

from tests.conftest import TEST_DATABASE_URL, _unavailable
from wakemark.shared.storage.migrator import default_directory, discover

pytestmark = pytest.mark.postgres


@dataclass(frozen=True)
class FreshDatabase:
    name: str
    owner_url: str  # the non-superuser owner
    superuser_url: str  # the superuser, connected to this database


ALL = len(discover(default_directory("postgres")))


def _url(user: str, dbname: str) -> str:
    """The test server's URL (host, port, options) for another role and database."""
    parts = urlsplit(TEST_DATABASE_URL)
    host = parts.netloc.rsplit("@", 1)[-1]
    return urlunsplit(parts._replace(netloc=f"{user}@{host}", path=f"/{dbname}"))


def _superuser(dbname: str = "postgres") -> str:
    # The test server trusts loopback; elsewhere point WAKEMARK_TEST_SUPERUSER at a role.
    return _url(os.environ.get("WAKEMARK_TEST_SUPERUSER", "postgres"), dbname)


def _drop(name: str) -> None:
    import psycopg

    with psycopg.connect(_superuser(), autocommit=True) as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        admin.execute(f'DROP ROLE IF EXISTS "{name}"')


@pytest.fixture(scope="session")
def _dropping() -> Iterator[list[threading.Thread]]:
    """Databases are dropped on threads the test does not wait for: DROP DATABASE waits
    for a checkpoint, which flushes what every other test has written (seconds, under
    load). The session waits for them at its end."""
    threads: list[threading.Thread] = []
    yield threads
    for thread in threads:
        thread.join()


@pytest.fixture
def fresh_db(_dropping: list[threading.Thread]) -> Iterator[FreshDatabase]:
    import psycopg

    name = "wm_boot_" + uuid.uuid4().hex[:10]
    try:
        admin = psycopg.connect(_superuser(), autocommit=True, connect_timeout=3)
    except Exception as exc:
        _unavailable("Postgres superuser (WAKEMARK_TEST_SUPERUSER)", exc)
    with admin:
        admin.execute(f'CREATE ROLE "{name}" LOGIN')
        admin.execute(f'CREATE DATABASE "{name}" OWNER "{name}"')
    try:
        yield FreshDatabase(name, _url(name, name), _superuser(name))
    finally:
        thread = threading.Thread(target=_drop, args=(name,), name=f"drop {name}")
        thread.start()
        _dropping.append(thread)


def _extensions(db: FreshDatabase) -> set[str]:
    import psycopg

    with psycopg.connect(db.superuser_url) as conn:
        return {row[0] for row in conn.execute("SELECT extname FROM pg_extension")}


def _wakemark(tmp_path: Path, url: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("WAKEMARK_")}
    env.update(
        WAKEMARK_HOME=str(tmp_path / "home"),
        WAKEMARK_DATABASE_URL=url,
        WAKEMARK_EMBEDDER="off",
        WAKEMARK_PORT="1",  # doctor's port check: not this test's subject
        HF_HUB_OFFLINE="1",
    )
    argv = [sys.executable, "-m", "wakemark.services.cli.main", *args]
    return subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120)


def test_migrate_as_owner_stops_with_one_line_naming_the_sql(
    fresh_db: FreshDatabase, tmp_path: Path
) -> None:
    run = _wakemark(tmp_path, fresh_db.owner_url, "migrate")
    assert run.returncode == 1
    lines = run.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in run.stderr, run.stderr
    assert "extension vector missing" in lines[0]
    assert f"run in database '{fresh_db.name}': CREATE EXTENSION IF NOT EXISTS vector;" in lines[0]
    # What the owner may create, it did; nothing was migrated without vector.
    assert _extensions(fresh_db) >= {"unaccent"} and "vector" not in _extensions(fresh_db)

    # The superuser runs exactly the SQL given; then the owner's migrate succeeds.
    import psycopg

    sql = lines[0].rsplit(": ", 1)[1]
    with psycopg.connect(fresh_db.superuser_url, autocommit=True) as conn:
        conn.execute(sql)
    run = _wakemark(tmp_path, fresh_db.owner_url, "migrate")
    assert run.returncode == 0, run.stderr
    assert f"applied {ALL} migration(s)" in run.stdout
    doctor = _wakemark(tmp_path, fresh_db.owner_url, "doctor")
    assert "database postgres reachable and migrated" in doctor.stdout, doctor.stdout


def test_doctor_names_the_missing_extension(fresh_db: FreshDatabase, tmp_path: Path) -> None:
    run = _wakemark(tmp_path, fresh_db.owner_url, "doctor")
    assert run.returncode == 1
    line = next(x for x in run.stdout.splitlines() if "extension" in x)
    assert line.startswith("FAIL  extension vector missing; extension unaccent missing")
    assert "CREATE EXTENSION IF NOT EXISTS vector; CREATE EXTENSION IF NOT EXISTS unaccent;" in line
    assert "unreachable" not in run.stdout


def test_migrate_as_superuser_creates_the_extensions(
    fresh_db: FreshDatabase, tmp_path: Path
) -> None:
    assert not {"vector", "unaccent"} & _extensions(fresh_db)
    run = _wakemark(tmp_path, fresh_db.superuser_url, "migrate")
    assert run.returncode == 0, run.stderr
    assert f"applied {ALL} migration(s)" in run.stdout
    assert {"vector", "unaccent"} <= _extensions(fresh_db)
    again = _wakemark(tmp_path, fresh_db.superuser_url, "migrate")
    assert (again.returncode, again.stdout.strip()) == (0, "applied 0 migration(s)")


def test_doctor_still_says_unreachable_when_it_is(tmp_path: Path) -> None:
    run = _wakemark(tmp_path, "postgresql://nobody@127.0.0.1:1/none?connect_timeout=2", "doctor")
    assert "FAIL  database unreachable" in run.stdout and "extension" not in run.stdout

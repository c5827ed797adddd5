"""The job declarations are the one source: the worker's tasks, its beat schedule, the
routes and the in-process queues all come from ``JOBS``."""

from __future__ import annotations

from wakemark.services.worker import create_celery
from wakemark.shared.config import Settings
from wakemark.shared.jobs import BACKFILL, EMBED, EXTRACT, JOBS, SWEEP
from wakemark.shared.jobs.celery_dispatch import celery_config
from wakemark.shared.jobs.inprocess import InProcessDispatcher
from wakemark.shared.jobs.tasks import RETENTION


def test_every_job_is_one_celery_task_with_its_declared_policy(settings: Settings) -> None:
    app = create_celery(settings.replace(redis_url="redis://127.0.0.1:1/0"))
    for job in JOBS.values():
        task = app.tasks[job.name]
        assert task.max_retries == job.retry.max_retries
        assert task.retry_backoff_max == job.retry.backoff_max_s
    routes = celery_config(settings)["task_routes"]
    assert routes == {job.name: {"queue": job.queue} for job in JOBS.values()}
    schedule = app.conf.beat_schedule
    assert {e["task"]: e["kwargs"] for e in schedule.values()} == {
        BACKFILL.name: {},
        SWEEP.name: {"embeddings": False},  # the scheduled backfill embeds instead
        RETENTION.name: {},
    }
    every = settings.sweep_interval_s
    assert schedule[RETENTION.name]["schedule"] == RETENTION.every_s  # hourly, not per sweep
    assert schedule[SWEEP.name]["schedule"] == schedule[BACKFILL.name]["schedule"] == every


def test_in_process_queues_are_the_id_jobs_by_name(settings: Settings, make_runtime) -> None:
    runtime = make_runtime(settings.replace(embedder="onnx"))  # nothing loads: no records
    jobs = runtime.jobs
    assert isinstance(jobs, InProcessDispatcher)
    with jobs._cond:  # held: the job threads cannot take the work meanwhile
        jobs.enqueue(EXTRACT, ["t1", "t2"])
        jobs.enqueue(EMBED, ["r1"])
        assert jobs.queue_depth("extraction") == 2 and jobs.queue_depth("embedding") == 1
        assert [(job.name, len(q)) for job, q in jobs._queues.items()] == [
            (EXTRACT.name, 2),
            (EMBED.name, 1),
        ]
    assert jobs.wait_idle(timeout=30)  # unknown ids: both jobs run and write nothing


def test_an_embed_job_is_not_queued_with_the_embedder_off(settings: Settings, make_runtime):
    runtime = make_runtime(settings.replace(embedder="off"))
    runtime.jobs.enqueue(EMBED, ["r1"])
    assert runtime.jobs.queue_depth() == 0

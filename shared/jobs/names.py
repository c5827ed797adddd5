"""Queue and task names and the Celery configuration shared by producers and workers.

Routing is declared here, once (``TASK_ROUTES``): the API's dispatcher and the worker
both build their Celery app from ``celery_config``, so they can never disagree.
"""

from __future__ import annotations

from typing import Any

from wakemark.shared.config import Settings

QUEUE_EXTRACTION = "extraction"
QUEUE_EMBEDDING = "embedding"
QUEUE_BACKFILL = "backfill"
QUEUES = (QUEUE_EXTRACTION, QUEUE_EMBEDDING, QUEUE_BACKFILL)

TASK_EXTRACT = "wakemark.extract_turns"
TASK_EMBED = "wakemark.embed_records"
TASK_BACKFILL = "wakemark.backfill_embeddings"
TASK_SWEEP = "wakemark.sweep"
TASK_RETENTION = "wakemark.trim_events"

TASK_ROUTES = {
    TASK_EXTRACT: {"queue": QUEUE_EXTRACTION},
    TASK_EMBED: {"queue": QUEUE_EMBEDDING},
    TASK_BACKFILL: {"queue": QUEUE_BACKFILL},
    TASK_RETENTION: {"queue": QUEUE_BACKFILL},  # long and never urgent, like the backfill
    # The sweep is cheap and must run even where only extraction workers exist.
    TASK_SWEEP: {"queue": QUEUE_EXTRACTION},
}

EMBED_BATCH = 64  # records per embed_records job: one model call, one transaction
EXTRACT_BATCH = 32  # turns per extract_turns job: one model call, one transaction


def celery_config(settings: Settings) -> dict[str, Any]:
    limit = settings.task_time_limit_s
    return {
        "broker_url": settings.redis_url,
        "task_serializer": "json",
        "accept_content": ["json"],
        "result_serializer": "json",
        "task_ignore_result": True,  # the database is the result
        "task_routes": TASK_ROUTES,
        "task_default_queue": QUEUE_EXTRACTION,
        # Every task is idempotent (re-reads, conditional writes), so redelivery is safe.
        "task_acks_late": True,
        "task_reject_on_worker_lost": True,
        "task_time_limit": limit,
        "task_soft_time_limit": max(1, int(limit * 0.8)),
        "worker_prefetch_multiplier": 1,
        "worker_hijack_root_logger": False,
        "broker_connection_retry_on_startup": True,
        "broker_connection_timeout": 2,
        "broker_transport_options": {
            # A dead broker must cost the API about a second, not a hang.
            "socket_connect_timeout": 1,
            "socket_timeout": 5,
            "max_retries": 1,
            # Unacked messages of a killed worker come back after this; keep it above the
            # longest task so a slow task is not delivered twice while it still runs.
            "visibility_timeout": 2 * limit + 60,
        },
        "task_publish_retry": True,
        "task_publish_retry_policy": {
            "max_retries": 1,
            "interval_start": 0,
            "interval_step": 0.2,
            "interval_max": 0.2,
        },
    }

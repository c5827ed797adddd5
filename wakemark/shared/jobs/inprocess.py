"""The embedded-mode dispatcher: a tiny thread pool inside the API process.

Threads start lazily (first enqueue or ``start()``), never at construction, so a
gunicorn master that forks after building the app hands each worker a clean dispatcher;
``after_fork`` (called through the runtime's fork hook) resets what a child inherited.
Queued ids are deduplicated until their job finishes, so periodic sweeps do not pile up
copies of the same work.

Requests come first. The API wraps each request in ``serving()``, and a job starts only
once no request has been in flight for ``IDLE_GAP_S``, or once its oldest item has
waited ``MAX_DEFER_S``. A job running beside requests takes the GIL and the write lock
from them, so each request costs more CPU; deferred, the work runs after the burst in
full batches, which also costs less in total. Under load that never pauses it runs
anyway, so nothing waits for more than ``MAX_DEFER_S`` plus a job's time.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import Any

from wakemark.shared.jobs.job import Context, Job
from wakemark.shared.jobs.tasks import ID_JOBS, RETENTION, SWEEP

log = logging.getLogger("wakemark.jobs")

IDLE_GAP_S = 0.01  # no request in flight for this long: background work may start
MAX_DEFER_S = 2.0  # work queued this long starts even while requests keep coming


class InProcessDispatcher:
    mode = "inprocess"

    def __init__(
        self, context: Context, threads: int = 1, sweep_interval_s: float | None = None
    ) -> None:
        self._context = context
        self._threads_wanted = max(1, min(threads, 2))
        self._sweep_interval_s = sweep_interval_s or context.settings.sweep_interval_s
        self._reset()

    def _reset(self) -> None:
        # At construction and in a forked child: threads do not survive a fork, and a
        # lock held by one of them at fork time would never be released.
        self._cond = threading.Condition()
        # Per job, in ``ID_JOBS`` order: (id, monotonic time queued), oldest first.
        self._queues: dict[Job, deque[tuple[str, float]]] = {job: deque() for job in ID_JOBS}
        self._known: set[tuple[str, str]] = set()  # (job name, id) queued or running
        self._running = 0
        self._serving = 0  # requests in flight
        self._served_at = 0.0  # when the last one finished
        self._retention_due = 0.0  # monotonic time of the next retention run
        self._stopping = False
        self._threads: list[threading.Thread] = []
        self._stop_event = threading.Event()

    # --- public surface -------------------------------------------------------------------
    def start(self) -> None:
        with self._cond:
            if self._threads or self._stopping:
                return
            for i in range(self._threads_wanted):
                self._spawn(self._work, f"wakemark-jobs-{i}")
            self._spawn(self._sweeper, "wakemark-sweep")

    def enqueue(self, job: Job, ids: Iterable[str]) -> None:
        if job.embeds and self._context.settings.embedder == "off":
            return
        queue = self._queues[job]
        now = time.monotonic()
        with self._cond:
            if self._stopping:
                return
            for item in ids:
                if (job.name, item) not in self._known:
                    self._known.add((job.name, item))
                    queue.append((item, now))
            self._cond.notify_all()  # workers, and wait_idle callers, share the condition
        self.start()

    @contextmanager
    def serving(self) -> Iterator[None]:
        """Wraps one API request: queued jobs wait until requests pause."""
        with self._cond:
            self._serving += 1
        try:
            yield
        finally:
            with self._cond:
                self._serving -= 1
                if not self._serving:
                    self._served_at = time.monotonic()

    def queue_depth(self, queue: str | None = None) -> int:
        """Jobs waiting (not running); one queue (``extraction``/``embedding``) or all."""
        with self._cond:
            return sum(len(q) for job, q in self._queues.items() if queue in (None, job.queue))

    def queued_ids(self, queue: str) -> set[str]:
        """Ids waiting (not running) in one queue."""
        with self._cond:
            return {item for job, q in self._queues.items() if job.queue == queue for item, _ in q}

    def wait_idle(self, timeout: float | None = None) -> bool:
        """Block until nothing is queued or running; False on timeout."""
        with self._cond:
            return self._cond.wait_for(
                lambda: not (self._running or any(self._queues.values())), timeout
            )

    def after_fork(self) -> None:
        self._reset()

    def close(self) -> None:
        with self._cond:
            self._stopping = True
            self._stop_event.set()
            self._cond.notify_all()
            threads = list(self._threads)
        for thread in threads:
            # A job in flight finishes its transaction or never commits; what it leaves
            # pending is still pending in the database for the next start.
            thread.join(timeout=10)

    # --- internals ------------------------------------------------------------------------
    def _spawn(self, target: Any, name: str) -> None:
        thread = threading.Thread(target=target, name=name, daemon=True)
        self._threads.append(thread)
        thread.start()

    def _wait_s(self) -> float | None:
        """Seconds until a job may start (0: now; None: nothing queued). Holds _cond."""
        queued = [q[0][1] for q in self._queues.values() if q]
        if not queued:
            return None
        now = time.monotonic()
        quiet_at = now + IDLE_GAP_S if self._serving else self._served_at + IDLE_GAP_S
        return max(0.0, min(quiet_at, min(queued) + MAX_DEFER_S) - now)

    def _take(self) -> tuple[Job, list[str]] | None:
        with self._cond:
            while not self._stopping and (wait := self._wait_s()) != 0:
                self._cond.wait(wait)
            if self._stopping:
                return None
            self._running += 1
            job, queue = next((j, q) for j, q in self._queues.items() if q)
            return job, [queue.popleft()[0] for _ in range(min(job.batch, len(queue)))]

    def _work(self) -> None:
        while (taken := self._take()) is not None:
            job, ids = taken
            try:
                job.run(self._context, ids)
            except Exception:
                log.exception(
                    "job %s %s failed; it stays pending for the next sweep", job.name, ids
                )
            finally:
                with self._cond:
                    self._running -= 1
                    self._known.difference_update((job.name, i) for i in ids)
                    self._cond.notify_all()

    def _sweeper(self) -> None:
        # At start-up first (catch up on whatever a previous process left), then on a timer.
        # No backfill is scheduled here, so the sweep re-enqueues missing vectors too.
        while True:
            try:
                SWEEP.run(self._context)
            except Exception:
                log.exception("sweep failed; retrying at the next interval")
            if time.monotonic() >= self._retention_due:
                self._retention_due = time.monotonic() + (RETENTION.every_s or 0.0)
                try:
                    RETENTION.run(self._context)
                except Exception:
                    log.exception("event retention failed; retrying at its next run")
            if self._stop_event.wait(self._sweep_interval_s):
                return

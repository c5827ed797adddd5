"""The embedded-mode dispatcher: a tiny thread pool inside the API process.

Threads start lazily (first enqueue or ``start()``), never at construction, so a
gunicorn master that forks after building the app hands each worker a clean dispatcher;
a fork hook resets state the child inherited. Queued ids are deduplicated until their
job finishes, so periodic sweeps do not pile up copies of the same work.

Requests come first. The API wraps each request in ``serving()``, and a job starts only
once no request has been in flight for ``IDLE_GAP_S``, or once its oldest item has
waited ``MAX_DEFER_S``. A job running beside requests takes the GIL and the write lock
from them: during a burst of batched ingest the server spent 114-119 us of CPU per event
against 41-44 with jobs held off (bench/ingest). Deferred, the work runs after the burst
in full batches, which also costs less in total; under load that never pauses it runs
anyway, so nothing waits for more than ``MAX_DEFER_S`` plus a job's time.
"""

from __future__ import annotations

import logging
import os
import threading
import time
import weakref
from collections import deque
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from wakemark.shared import retention
from wakemark.shared.jobs import tasks
from wakemark.shared.jobs.names import EMBED_BATCH, EXTRACT_BATCH, QUEUE_EMBEDDING, QUEUE_EXTRACTION

if TYPE_CHECKING:
    from wakemark.shared.runtime import Runtime

log = logging.getLogger("wakemark.jobs")

IDLE_GAP_S = 0.01  # no request in flight for this long: background work may start
MAX_DEFER_S = 2.0  # work queued this long starts even while requests keep coming


class InProcessDispatcher:
    mode = "inprocess"

    def __init__(
        self, runtime: Runtime, threads: int = 1, sweep_interval_s: float | None = None
    ) -> None:
        self._runtime = runtime
        self._threads_wanted = max(1, min(threads, 2))
        self._sweep_interval_s = sweep_interval_s or runtime.settings.sweep_interval_s
        self._reset()
        os.register_at_fork(after_in_child=_reset_in_child(weakref.ref(self)))

    def _reset(self) -> None:
        # Called at construction and in a forked child: threads do not survive a fork,
        # and a lock held by one of them at fork time would never be released.
        self._cond = threading.Condition()
        # (id, monotonic time queued), oldest first
        self._extract: deque[tuple[str, float]] = deque()
        self._embed: deque[tuple[str, float]] = deque()
        self._known: set[tuple[str, str]] = set()  # queued or running
        self._running = 0
        self._serving = 0  # requests in flight
        self._served_at = 0.0  # when the last one finished
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

    def enqueue_extract(self, turn_ids: Iterable[str]) -> None:
        self._put(self._extract, "x", turn_ids)

    def enqueue_embed(self, record_ids: Iterable[str]) -> None:
        if self._runtime.settings.embedder != "off":
            self._put(self._embed, "e", record_ids)

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
            sizes = {QUEUE_EXTRACTION: len(self._extract), QUEUE_EMBEDDING: len(self._embed)}
            return sizes.get(queue, 0) if queue else sum(sizes.values())

    def state(self) -> dict[str, Any]:
        return {
            "mode": self.mode,
            "queue_depth": self.queue_depth(),
            "running": self._running,
            "backfill": tasks.backfill_breaker(self._runtime).snapshot(),
        }

    def wait_idle(self, timeout: float | None = None) -> bool:
        """Block until nothing is queued or running; False on timeout."""
        with self._cond:
            return self._cond.wait_for(
                lambda: not (self._extract or self._embed or self._running), timeout
            )

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

    def _put(self, queue: deque[tuple[str, float]], kind: str, ids: Iterable[str]) -> None:
        now = time.monotonic()
        with self._cond:
            if self._stopping:
                return
            for item in ids:
                if (kind, item) not in self._known:
                    self._known.add((kind, item))
                    queue.append((item, now))
            self._cond.notify_all()  # workers, and wait_idle callers, share the condition
        self.start()

    def _wait_s(self) -> float | None:
        """Seconds until a job may start (0: now; None: nothing queued). Holds _cond."""
        queued = [q[0][1] for q in (self._extract, self._embed) if q]
        if not queued:
            return None
        now = time.monotonic()
        quiet_at = now + IDLE_GAP_S if self._serving else self._served_at + IDLE_GAP_S
        return max(0.0, min(quiet_at, min(queued) + MAX_DEFER_S) - now)

    def _take(self) -> tuple[str, list[str]] | None:
        with self._cond:
            while not self._stopping and (wait := self._wait_s()) != 0:
                self._cond.wait(wait)
            if self._stopping:
                return None
            self._running += 1
            # Extraction first: it creates the records to embed.
            queue, kind, size = (
                (self._extract, "x", EXTRACT_BATCH)
                if self._extract
                else (self._embed, "e", EMBED_BATCH)
            )
            return kind, [queue.popleft()[0] for _ in range(min(size, len(queue)))]

    def _work(self) -> None:
        while (job := self._take()) is not None:
            kind, ids = job
            try:
                run = tasks.extract_turns if kind == "x" else tasks.embed_records
                run(self._runtime, ids)
            except Exception:
                log.exception("job %s %s failed; it stays pending for the next sweep", kind, ids)
            finally:
                with self._cond:
                    self._running -= 1
                    self._known.difference_update((kind, i) for i in ids)
                    self._cond.notify_all()

    def _sweeper(self) -> None:
        # At start-up first (catch up on whatever a previous process left), then on a timer.
        while True:
            try:
                tasks.sweep(self._runtime)
            except Exception:
                log.exception("sweep failed; retrying at the next interval")
            try:
                retention.run(self._runtime)
            except Exception:
                log.exception("event retention failed; retrying at the next interval")
            if self._stop_event.wait(self._sweep_interval_s):
                return


def _reset_in_child(ref: weakref.ref[InProcessDispatcher]) -> Any:
    # Holds a weak reference only: a dispatcher that was closed and dropped is not kept
    # alive by the (unremovable) fork hook.
    def hook() -> None:
        dispatcher = ref()
        if dispatcher is not None:
            dispatcher._reset()

    return hook

"""The retrieval audit: one row per prompt-time retrieval (what the gate saw and did), the
session's earlier injections read back from it, and the process's injection counters.

The row is built and stored after the answer, by a background writer that drains the
whole queue each time it wakes. Until a row is stored it stays in the queue, where
``seen`` reads it too, so the session's next prompt in this process never misses what
this one injected; ``flush`` (on close, at exit, and before the API reads the audit)
writes what is left, so a clean shutdown loses nothing.
"""

from __future__ import annotations

import atexit
import logging
import threading
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from wakemark.shared.models import Retrieval, RetrievalCandidate
from wakemark.shared.retrieval.inject import REPEAT_AFTER, Selection

if TYPE_CHECKING:
    from wakemark.shared.retrieval.hits import SearchResult
    from wakemark.shared.storage import RetrievalLog

log = logging.getLogger(__name__)


def build_row(
    event: Any,
    result: SearchResult,
    selection: Selection,
    min_prompt_relevance: float,
    min_relevance: float,
    latency_ms: float,
    **identity: Any,
) -> Retrieval:
    """``identity``: the row's ``retrieval_id`` and ``created_at`` when fixed already."""
    injected = {h.record.record_id for h in selection.injected}
    lexical = result.degraded or any(h.evidence and h.evidence.cosine is None for h in result.items)
    reason = selection.reason
    if lexical:
        reason += "; lexical evidence only (the vector leg did not run)"
    candidates = [
        RetrievalCandidate(
            record_id=h.record.record_id,
            rank=rank,
            match_source=h.match_source,
            score=h.score,
            relevance=round(h.relevance, 4),
            evidence=h.evidence.to_json() if h.evidence else None,
            injected=h.record.record_id in injected,
            skipped=selection.skipped.get(h.record.record_id),
        )
        for rank, h in enumerate(result.items)
    ]
    return Retrieval(
        **identity,
        event_id=event.event_id,
        namespace=event.namespace,
        session_id=event.session_id,
        decision="inject" if injected else "none",
        reason=reason,
        mode="lexical" if lexical else "hybrid",
        prompt_relevance=(
            None if selection.prompt_relevance is None else round(selection.prompt_relevance, 4)
        ),
        min_prompt_relevance=min_prompt_relevance,
        min_relevance=min_relevance,
        latency_ms=latency_ms,
        bytes=len(selection.context.encode()),
        injected=[h.record.record_id for h in selection.injected],
        candidates=candidates,
    )


@dataclass(frozen=True)
class Queued:
    """A row not yet stored: what ``seen`` needs, and how to build the rest."""

    retrieval_id: str
    event_id: str
    namespace: str
    session_id: str
    injected: list[str]
    build: Callable[[], Retrieval]


class Audit:
    def __init__(self, storage: Callable[[], RetrievalLog]) -> None:
        self._storage = storage
        self._lock = threading.Lock()
        self.prompts = 0
        self.injections = 0
        self.records = 0
        self.bytes = 0
        self._start_writer()
        atexit.register(_flush_at_exit, weakref.ref(self))

    def _start_writer(self) -> None:
        self._queue: list[Queued] = []  # newest last; a row leaves once it is stored
        self._queued = threading.Condition(threading.Lock())
        self._writing = threading.Lock()  # one drain at a time: rows are stored in order
        self._writer: threading.Thread | None = None
        self._closed = False

    def after_fork(self) -> None:
        """The parent writes its own queue; the child starts with an empty one."""
        self._start_writer()

    def seen(self, namespace: str, session_id: str, event_id: str) -> set[str]:
        """Records injected by the session's last ``REPEAT_AFTER`` prompts, queued rows
        included. The prompt's own earlier rows do not count: a hook retried with the same
        event gets the same context again."""
        with self._queued:
            queued = [
                r for r in self._queue if (r.namespace, r.session_id) == (namespace, session_id)
            ]
        stored = self._storage().session_injections(namespace, session_id, REPEAT_AFTER + 1)
        # A row the writer stores meanwhile may be read twice: once is enough.
        rows = [(r.event_id, r.injected) for r in reversed(queued)] + stored
        earlier = [injected for event, injected in rows if event != event_id][:REPEAT_AFTER]
        return {rid for injected in earlier for rid in injected}

    def count(self, selection: Selection) -> None:
        with self._lock:
            self.prompts += 1
            if selection.injected:
                self.injections += 1
                self.records += len(selection.injected)
                self.bytes += len(selection.context.encode())

    def write(self, row: Queued) -> None:
        """Queues the row for the background writer, which builds and stores it; never
        fails the prompt."""
        with self._queued:
            closed = self._closed
            if not closed:
                self._queue.append(row)
        if closed:  # no writer any more: store it now
            self._put(row)
            return
        with self._queued:
            if self._writer is None or not self._writer.is_alive():
                self._writer = threading.Thread(
                    target=self._run, name="wakemark-audit", daemon=True
                )
                self._writer.start()
            self._queued.notify()

    def flush(self) -> None:
        """Stores every queued row, on the calling thread if the writer has not yet."""
        self._drain()

    def close(self) -> None:
        with self._queued:
            self._closed = True
            self._queued.notify()
        self.flush()

    def _run(self) -> None:
        while True:
            with self._queued:
                while not self._queue and not self._closed:
                    self._queued.wait()
                if self._closed:
                    return
            self._drain()

    def _drain(self) -> None:
        with self._writing:
            with self._queued:
                batch = list(self._queue)
            for row in batch:
                self._put(row)
            with self._queued:
                del self._queue[: len(batch)]

    def _put(self, row: Queued) -> None:
        """A lost audit row costs an explanation, not context."""
        try:
            self._storage().put_retrieval(row.build())
        except Exception as exc:
            log.warning("retrieval audit row not written: %r", exc)

    def snapshot(self) -> dict[str, float | int]:
        with self._lock:
            n = self.injections
            return {
                "prompts": self.prompts,
                "injected_share": round(n / self.prompts, 4) if self.prompts else 0.0,
                "mean_records": round(self.records / n, 3) if n else 0.0,
                "mean_bytes": round(self.bytes / n, 1) if n else 0.0,
            }

    def prometheus_lines(self) -> list[str]:
        snap = self.snapshot()
        return [
            "# HELP wakemark_prompts_total Prompt-time retrievals run by this process.",
            "# TYPE wakemark_prompts_total counter",
            f"wakemark_prompts_total {snap['prompts']}",
            "# HELP wakemark_prompts_injected_total Prompts that got injected context.",
            "# TYPE wakemark_prompts_injected_total counter",
            f"wakemark_prompts_injected_total {self.injections}",
            "# HELP wakemark_injected_records_total Records injected at prompts.",
            "# TYPE wakemark_injected_records_total counter",
            f"wakemark_injected_records_total {self.records}",
            "# HELP wakemark_injected_bytes_total Bytes of context injected at prompts.",
            "# TYPE wakemark_injected_bytes_total counter",
            f"wakemark_injected_bytes_total {self.bytes}",
        ]


def _flush_at_exit(ref: weakref.ref[Audit]) -> None:
    audit = ref()
    if audit is not None:
        audit.flush()

"""The runtime of the app serving this request, and the uses of it that must never fail
a request: storing events with their jobs enqueued on commit, and prompt-time retrieval
(which never fails: ``Retriever``).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping, Sequence

from flask import current_app

from wakemark.services.api import client_files, optout, security
from wakemark.shared.jobs import EXTRACT, Job
from wakemark.shared.models import Event
from wakemark.shared.retrieval.hits import PromptContext
from wakemark.shared.runtime import Runtime
from wakemark.shared.storage import PutEventResult, Tx

log = logging.getLogger("wakemark.api")


def runtime() -> Runtime:
    rt: Runtime = current_app.extensions["wakemark"]
    return rt


class _LogOnce:
    """Log the first failure of a kind, stay quiet until it recovers (no log floods)."""

    def __init__(self) -> None:
        self._failing: set[str] = set()
        self._lock = threading.Lock()

    def failed(self, kind: str, exc: BaseException) -> None:
        with self._lock:
            first = kind not in self._failing
            self._failing.add(kind)
        if first:
            log.warning("%s failed (the sweep will catch up): %r", kind, exc)

    def ok(self, kind: str) -> None:
        if kind in self._failing:
            with self._lock:
                self._failing.discard(kind)
            log.info("%s recovered", kind)


_once = _LogOnce()


def store_events(events: Sequence[Event]) -> tuple[list[PutEventResult], dict[str, str]]:
    """Store the events (one transaction) but those of ignored projects; the turns they
    closed are enqueued on commit. Gives one result per event, and why each ignored
    project's events were dropped (by project path)."""
    rt = runtime()
    kept, ignored = optout.kept(rt.settings, events)
    with rt.storage.transaction() as tx:
        results = tx.put_events(kept)
        enqueue_on_commit(tx, EXTRACT, [t for r in results for t in r.closed_turns])
    return optout.answers(events, results), ignored


def as_stored(event: Event, result: PutEventResult) -> Event:
    """``event`` under the id storage holds it by (``PutEventResult.stored_id``), for what
    refers to the stored row, such as the retrieval audit."""
    if result.stored_id is None or result.stored_id == event.event_id:
        return event
    return event.model_copy(update={"event_id": result.stored_id})


def enqueue(job: Job, ids: Sequence[str], rt: Runtime | None = None) -> None:
    """Enqueue committed work. Never fails the request: the database remembers the work,
    and the sweep enqueues it again."""
    if not ids:
        return
    kind = f"enqueue {job.name}"
    try:
        (rt or runtime()).jobs.enqueue(job, list(ids))
    except Exception as exc:
        _once.failed(kind, exc)
    else:
        _once.ok(kind)


def enqueue_on_commit(tx: Tx, job: Job, ids: Sequence[str]) -> None:
    """``enqueue`` once ``tx`` commits (the runtime is read now, inside the request)."""
    if ids:
        rt = runtime()
        tx.on_commit(lambda: enqueue(job, ids, rt))


def reads_client_files() -> bool:
    """Whether this request's client is the server's own user, whose project files its
    memories may be checked against."""
    return client_files.local_client(runtime().settings, security.principal())


def project_root(namespace: str) -> str | None:
    """Where the project of ``namespace`` is now, for a route without a hook's payload:
    the root its newest event came from (None when not known: each record is then
    checked where it was captured)."""
    found = (p["project_path"] for p in runtime().storage.projects() if p["namespace"] == namespace)
    return next(found, None)


def retrieve_for(
    event: Event,
    min_relevance: float | None = None,
    reported: Mapping[str, str | None] | None = None,
) -> PromptContext:
    """Context for a prompt (empty, never an error, when retrieval fails), its records
    checked against the project where the prompt came from (it may have moved since they
    were captured); ``reported``: the hashes a client whose files are not read sent of them."""
    return runtime().retriever.for_prompt(
        event.namespace,
        event,
        min_relevance,
        read_files=reads_client_files(),
        reported=reported,
        root=event.source.project_path,
    )

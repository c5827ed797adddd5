"""Events of ignored projects (``shared/optout.py``) are dropped before storage, counted
for ``/health`` and ``/metrics``, and logged once per project and process."""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable, Sequence

from wakemark.services.api import metrics
from wakemark.shared import optout
from wakemark.shared.config import Settings
from wakemark.shared.models import Event
from wakemark.shared.storage import PutEventResult

log = logging.getLogger("wakemark.api")

_lock = threading.Lock()
_dropped = 0
_logged: set[str] = set()


def kept(settings: Settings, events: Sequence[Event]) -> tuple[list[Event], dict[str, str]]:
    """The events whose project is not ignored, and why each ignored project is (by its
    path); the dropped events are counted and logged."""
    patterns = settings.ignore_projects
    reasons = {
        path: optout.ignored(path, patterns) for path in {e.source.project_path for e in events}
    }
    keep = [e for e in events if not reasons[e.source.project_path]]
    why = {p: r for p, r in reasons.items() if p and r}
    if len(keep) < len(events):
        _count(len(events) - len(keep), why)
    return keep, why


def answers(events: Sequence[Event], results: Sequence[PutEventResult]) -> list[PutEventResult]:
    """One result per event posted: a dropped event answers ``stored=False``."""
    if len(results) == len(events):
        return list(results)
    stored = {r.event_id: r for r in results}
    return [
        stored.get(e.event_id) or PutEventResult(event_id=e.event_id, stored=False, turn_id=None)
        for e in events
    ]


def _count(n: int, reasons: dict[str, str]) -> None:
    global _dropped
    with _lock:
        _dropped += n
        new = {p: r for p, r in reasons.items() if p not in _logged}
        _logged.update(new)
    for path, reason in new.items():
        log.info("dropping events of ignored project %s (%s); not logged again", path, reason)


def dropped() -> int:
    return _dropped


def _prometheus_lines() -> Iterable[str]:
    return [
        "# HELP wakemark_events_dropped_total Events not stored: their project is ignored.",
        "# TYPE wakemark_events_dropped_total counter",
        f'wakemark_events_dropped_total{{reason="ignored_project"}} {_dropped}',
    ]


metrics.register(_prometheus_lines)

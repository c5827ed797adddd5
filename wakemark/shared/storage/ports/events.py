"""Events and turns: what clients send, grouped into the turns extraction reads.

``put_events`` assigns each event to a turn of its session. A ``prompt`` closes the
session's open turn and opens a new one; ``tool_use`` joins the open turn (opening one
if there is none); ``session_summary`` joins the open turn and closes it; a ``note`` is
a turn of its own, closed at once. A batch assigns turns exactly as its events stored
one at a time would (the rules live once, in ``wakemark.shared.storage.turns``). A turn
is pending extraction until ``mark_turn_extracted`` commits together with its records.
"""

from __future__ import annotations

import abc
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Protocol

from wakemark.shared.models import Event, StoredEvent


@dataclass(frozen=True)
class PutEventResult:
    event_id: str
    stored: bool
    turn_id: str | None
    closed_turns: tuple[str, ...] = ()  # turns this event closed: extraction may start
    # The id it is (or already was) stored under: the client's, or (that id taken in
    # another namespace) ``turns.namespaced_id``. None: not stored (an ignored project).
    stored_id: str | None = None


@dataclass(frozen=True)
class Turn:
    turn_id: str
    namespace: str
    session_id: str
    closed: bool
    extracted: bool
    events: list[StoredEvent] = field(default_factory=list)  # in valid_time order


@dataclass(frozen=True)
class TurnInfo:
    """A turn without its events: what became of it (``record_ids`` empty once extracted
    means extraction kept nothing of it)."""

    turn_id: str
    opened_at: datetime
    closed: bool
    extracted: bool
    record_ids: list[str]
    skip_reason: str | None = None  # why extraction kept nothing: command, meta, trivial...


class EventsTx(Protocol):
    """The event and turn writes of a transaction."""

    @abc.abstractmethod
    def put_events(self, events: Sequence[Event]) -> list[PutEventResult]:
        """See ``Events.put_events``."""

    @abc.abstractmethod
    def mark_turn_extracted(
        self,
        turn_id: str,
        record_ids: Sequence[str],
        skip_reason: str | None = None,
        repeat_of: str | None = None,
    ) -> bool:
        """Mark the turn extracted (with why it gave no record, if it gave none); False
        (and nothing changes) if it already was. ``repeat_of``: for a turn whose records
        were all repeats, the record its newest one repeated (``session_recent``)."""

    @abc.abstractmethod
    def delete_events(self, event_ids: Sequence[str]) -> int:
        """Delete the events that exist among ``event_ids``; returns how many. Their turns
        stay (with the ids of the records made from them)."""


class Events(Protocol):
    @abc.abstractmethod
    def put_events(self, events: Sequence[Event]) -> list[PutEventResult]:
        """Store events in one transaction (all or none). Idempotent per ``event_id``: a
        repeat keeps the first row and ``transaction_time`` and reports stored=False."""

    def put_event(self, event: Event) -> PutEventResult:
        return self.put_events([event])[0]

    @abc.abstractmethod
    def get_event(self, event_id: str) -> StoredEvent | None: ...

    @abc.abstractmethod
    def count_events(self, event_ids: Sequence[str]) -> int:
        """How many of ``event_ids`` are stored."""

    @abc.abstractmethod
    def list_events(
        self, namespace: str | None = None, session_id: str | None = None, limit: int = 50
    ) -> list[StoredEvent]:
        """Newest first (transaction_time desc, event_id desc)."""

    @abc.abstractmethod
    def events_after(self, after: str | None, limit: int) -> list[StoredEvent]:
        """Every event, in ``event_id`` order, after ``after`` (None: from the first)."""

    @abc.abstractmethod
    def rewrite_events(self, events: Sequence[Event]) -> int:
        """Overwrite the client text of each stored event with the same ``event_id`` by
        ``event``'s — its body, source and actor (``wakemark scrub``); ids, namespace,
        session, times and turn stay. Returns how many existed."""

    @abc.abstractmethod
    def rename_session(self, namespace: str, old: str, new: str) -> int:
        """Move session ``old`` of ``namespace`` to the id ``new`` (``wakemark scrub``
        redacting a session id): its events, turns and retrieval audit rows. Should ``new``
        already have an open turn there, ``old``'s open turn closes at its last event (a
        session has one open turn). Returns how many events moved."""

    def get_turn(self, turn_id: str) -> Turn | None:
        turns = self.get_turns([turn_id])
        return turns[0] if turns else None

    @abc.abstractmethod
    def get_turns(self, turn_ids: Sequence[str]) -> list[Turn]:
        """The turns that exist among ``turn_ids``, in that order, each with its events
        (read in one snapshot)."""

    @abc.abstractmethod
    def turns_before(self, turn_id: str, limit: int) -> list[str]:
        """The ids of the turns of ``turn_id``'s session opened before it, nearest first,
        at most ``limit`` ([] for an unknown turn)."""

    @abc.abstractmethod
    def session_turns(self, namespace: str, session_id: str, limit: int = 200) -> list[TurnInfo]:
        """The session's turns in that namespace, oldest first, at most ``limit``."""

    @abc.abstractmethod
    def close_idle_turns(self, idle_before: datetime) -> list[str]:
        """Close open turns whose last event was recorded before ``idle_before``."""

    @abc.abstractmethod
    def pending_turns(self, limit: int = 1000) -> list[str]:
        """Closed turns not yet extracted, oldest first."""

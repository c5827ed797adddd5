"""The turn rules of ``put_events`` (``ports.events``), once for both backends.

A backend looks up what the batch needs (events already stored, each session's open
turn) inside its write transaction, asks ``plan`` what to do, and applies the plan with
a few multi-row statements: close existing turns first (at most one turn per session is
open), insert the new turns, touch the ones that stay open, insert the events.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace

from wakemark.shared.models import Event, new_ulid
from wakemark.shared.storage.ports.events import PutEventResult

SessionKey = tuple[str, str]  # (namespace, session_id)


@dataclass(frozen=True)
class NewTurn:
    turn_id: str
    namespace: str
    session_id: str
    closed: bool  # closed by the end of the batch

    def row(self, now: object) -> dict[str, object]:
        """The parameters of the backends' INSERT_TURN, opened (and maybe closed) ``now``."""
        return {
            "turn_id": self.turn_id,
            "namespace": self.namespace,
            "session_id": self.session_id,
            "now": now,
            "closed_at": now if self.closed else None,
        }


@dataclass
class Plan:
    results: list[PutEventResult] = field(default_factory=list)
    new_turns: list[NewTurn] = field(default_factory=list)
    close: list[str] = field(default_factory=list)  # turns that existed before the batch
    touch: list[str] = field(default_factory=list)  # existing turns an event joined
    events: list[tuple[Event, str]] = field(default_factory=list)  # (event, turn) to insert


def sessions(events: Sequence[Event]) -> list[SessionKey]:
    """The batch's sessions in one stable order (the order backends lock them in)."""
    return sorted({(e.namespace, e.session_id) for e in events})


def plan(
    events: Sequence[Event],
    stored: Mapping[str, str | None],
    open_turns: Callable[[SessionKey], str | None],
) -> Plan:
    """What storing ``events`` in order does. ``stored`` maps the ids of events already
    in the database to their turn; ``open_turns`` gives a session's open turn before the
    batch (asked at most once per session)."""
    out = Plan()
    new: dict[str, NewTurn] = {}
    seen: dict[str, str | None] = dict(stored)
    current: dict[SessionKey, str | None] = {}

    def open_new(event: Event, closed: bool) -> str:
        turn = NewTurn(new_ulid(), event.namespace, event.session_id, closed)
        new[turn.turn_id] = turn
        return turn.turn_id

    def close(turn_id: str) -> None:
        if turn_id in new:
            new[turn_id] = replace(new[turn_id], closed=True)
        else:
            out.close.append(turn_id)

    for event in events:
        if event.event_id in seen:
            out.results.append(PutEventResult(event.event_id, False, seen[event.event_id]))
            continue
        closed: list[str] = []
        if event.kind == "note":
            turn_id = open_new(event, closed=True)
            closed.append(turn_id)
        else:
            key = (event.namespace, event.session_id)
            if key not in current:
                current[key] = open_turns(key)
            open_turn = current[key]
            if event.kind == "prompt":
                if open_turn is not None:
                    close(open_turn)
                    closed.append(open_turn)
                turn_id = open_new(event, closed=False)
            else:  # tool_use joins the open turn; session_summary joins and closes it
                turn_id = open_turn if open_turn is not None else open_new(event, closed=False)
                if turn_id not in new and turn_id not in out.touch:
                    out.touch.append(turn_id)
                if event.kind == "session_summary":
                    close(turn_id)
                    closed.append(turn_id)
            current[key] = None if closed and closed[-1] == turn_id else turn_id
        seen[event.event_id] = turn_id
        out.events.append((event, turn_id))
        out.results.append(PutEventResult(event.event_id, True, turn_id, tuple(closed)))
    out.new_turns = list(new.values())
    return out

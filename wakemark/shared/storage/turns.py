"""The turn rules of ``put_events`` (``ports.events``), once for both backends.

A backend looks up what the batch needs (events already stored, each session's open
turn) inside its write transaction, asks ``plan`` what to do, and applies the plan with
a few multi-row statements: close existing turns first (at most one turn per session is
open), insert the new turns, touch the ones that stay open, insert the events.

Client event ids are de-duplicated per namespace: an id already stored in another
namespace is no duplicate (answering ``stored: false`` would tell the client that the id
exists elsewhere). Such an event is stored under ``namespaced_id`` of its namespace and
id; its result still names the client's id.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace

from ulid import ULID

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


def namespaced_id(namespace: str, event_id: str) -> str:
    """Where an event goes whose client id is taken in another namespace: a ULID from
    both, so a redelivery in this namespace finds it again. Its time bits keep the
    client id's, so it sorts where the client's id would."""
    digest = hashlib.sha256(f"{namespace}\0{event_id}".encode("utf-8", "surrogatepass")).digest()
    # A ULID's last 16 characters are its 80 random bits; the first 10 its time.
    return event_id[:10] + str(ULID(digest[:16]))[10:]


def lookup_ids(events: Sequence[Event]) -> list[str]:
    """The ids ``plan`` needs looked up: each event's own and its namespaced one."""
    return [i for e in events for i in (e.event_id, namespaced_id(e.namespace, e.event_id))]


def sessions(events: Sequence[Event]) -> list[SessionKey]:
    """The batch's sessions in one stable order (the order backends lock them in)."""
    return sorted({(e.namespace, e.session_id) for e in events})


def plan(
    events: Sequence[Event],
    stored: Mapping[str, tuple[str | None, str]],
    open_turns: Callable[[SessionKey], str | None],
) -> Plan:
    """What storing ``events`` in order does. ``stored`` maps the ids of events already
    in the database (of ``lookup_ids``) to their turn and namespace; ``open_turns`` gives
    a session's open turn before the batch (asked at most once per session)."""
    out = Plan()
    new: dict[str, NewTurn] = {}
    seen: dict[str, tuple[str | None, str]] = dict(stored)
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

    for posted in events:
        event = posted
        taken = seen.get(event.event_id)
        if taken is not None and taken[1] != event.namespace:
            event = posted.model_copy(
                update={"event_id": namespaced_id(posted.namespace, posted.event_id)}
            )
            taken = seen.get(event.event_id)
        if taken is not None:
            # Another namespace holding even the namespaced id (only a client that
            # computed it could cause that) is answered as a duplicate as well.
            out.results.append(PutEventResult(posted.event_id, False, taken[0], (), event.event_id))
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
        seen[event.event_id] = (turn_id, event.namespace)
        out.events.append((event, turn_id))
        out.results.append(
            PutEventResult(posted.event_id, True, turn_id, tuple(closed), event.event_id)
        )
    out.new_turns = list(new.values())
    return out

"""What every agent shares: the ``Agent`` base class, the hook context, the mapping
result and the event builders its ``map_payload`` uses.

Event ids are deterministic where the payload allows, so a hook delivered twice (a
retry, a hook installed both per-user and per-project, Codex's Stop hook and its
``notify`` program reporting the same turn) is stored once: ``put_events`` is idempotent
on ``event_id``.

- The payload carries a stable id (Claude Code ``tool_use_id``/``prompt_id``, Codex
  ``turn_id``/``tool_use_id``, Cursor ``generation_id``): the whole ULID is derived from
  SHA-256 of (agent, session, kind, those ids, a content hash). Its time bits are then
  hash bits, not a clock: the id is an idempotency key; ``valid_time`` carries the time.
- The payload carries its own timestamp (Gemini): time bits = that timestamp, random
  bits = the hash, so a re-delivery of the same payload maps to the same id.
- Neither (Kiro): time bits = receipt time and the hash includes it. Two genuinely
  identical tool uses in one session (``pytest -q`` run twice with the same output) must
  stay two events, so without an id or a timestamp we cannot tell a retry from a repeat.
"""

from __future__ import annotations

import abc
import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, BinaryIO, ClassVar

from ulid import ULID

from wakemark.services.agents.configs import Edit, Where
from wakemark.shared.models import MAX_BODY_BYTES, Event

# Tool outputs are cut to this many characters each; a few of them fit in one body
# with room for the input, far below the 1 MiB body limit.
MAX_TOOL_TEXT = 64 * 1024
MAX_JSON_BYTES = MAX_BODY_BYTES // 4
SHORTEST_CLIP = MAX_TOOL_TEXT // 4**4  # the last limit clip_json tries (256)
MAX_SESSION_ID = 200

# What the hook view does with a mapped hook besides storing its events.
SESSION_START = "session_start"  # reply with the session index
PROMPT = "prompt"  # store, then reply with the prompt's retrieval context
OBSERVE = "observe"  # store, reply with the agent's "nothing to say"
IGNORE = "ignore"  # unknown or uninteresting hook: 200, nothing stored


class HookPayloadError(ValueError):
    """The payload lacks what its hook needs; the view answers 422 with this reason."""


@dataclass(frozen=True)
class HookContext:
    """Everything about one hook call that is not the payload itself."""

    agent: str
    namespace: str
    actor: str
    project_path: str | None
    received: datetime
    hook_hint: str | None = None  # `wakemark hook <agent> <event>`'s event argument
    # Opens a file the payload names, for reading, if the server may read it for this
    # client (``services/api/client_files.py``); None otherwise. Never reads by default.
    open_client_file: Callable[[Any], BinaryIO | None] = lambda _path: None


@dataclass
class Mapped:
    hook: str
    intent: str
    events: list[Event] = field(default_factory=list)


def text_field(payload: dict[str, Any], key: str, required: bool = True) -> str | None:
    value = payload.get(key)
    if isinstance(value, str) and value.strip():
        return value
    if required:
        raise HookPayloadError(f"payload field {key!r} must be a non-empty string")
    return None


def session_of(payload: dict[str, Any], *keys: str) -> str:
    for key in keys:
        value = payload.get(key)
        if isinstance(value, str) and value.strip():
            return value.strip()[:MAX_SESSION_ID]
    raise HookPayloadError(f"payload has no session id (looked for {', '.join(keys)})")


def project_session(ctx: HookContext) -> str:
    """The session of a delivery that names none: one per agent and project, the same on
    every delivery from that project."""
    return f"{ctx.agent}:" + ctx.namespace.rstrip("/").rsplit("/", 1)[-1]


def payload_time(payload: dict[str, Any], key: str = "timestamp") -> datetime | None:
    raw = payload.get(key)
    if not isinstance(raw, str):
        return None
    try:
        parsed = datetime.fromisoformat(raw.replace("Z", "+00:00"))
    except ValueError:
        return None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


def clip_text(value: Any, limit: int = MAX_TOOL_TEXT) -> Any:
    """Strings longer than ``limit`` keep their head and tail (errors often sit at the end)."""
    return _clip(value, limit, None)


def _clip(value: Any, limit: int, long: list[str] | None) -> Any:
    """``clip_text``; with ``long``, also collects the clipped strings longer than
    ``SHORTEST_CLIP`` (dict values and list items: keys are never clipped)."""
    if isinstance(value, str):
        if len(value) > limit:
            half = limit // 2
            cut = len(value) - 2 * half
            value = f"{value[:half]}\n... [{cut} characters truncated] ...\n{value[-half:]}"
        if long is not None and len(value) > SHORTEST_CLIP:
            long.append(value)
        return value
    if isinstance(value, dict):
        return {str(k): _clip(v, limit, long) for k, v in value.items()}
    if isinstance(value, list):
        return [_clip(v, limit, long) for v in value]
    return value


def _fits(value: Any) -> bool:
    return len(json.dumps(value, default=str)) <= MAX_JSON_BYTES


def clip_json(value: Any) -> Any:
    """A JSON-able value under ``MAX_JSON_BYTES``: strings clipped harder until it fits
    (each limit a quarter of the last, down to ``SHORTEST_CLIP``), else a clipped
    serialization as text."""
    long: list[str] = []
    clipped = _clip(value, MAX_TOOL_TEXT, long)
    size = len(json.dumps(clipped, default=str))
    if size <= MAX_JSON_BYTES:
        return clipped
    # Every harder clip leaves the strings of up to SHORTEST_CLIP characters as they are
    # and keeps more than that of each longer one, so ``floor`` (those counted as that
    # many, in quotes) is at most the size at any limit: when it does not fit, none does.
    # That is a huge structure of small strings, which trying each limit would rebuild
    # and serialize four times for nothing.
    floor = size - sum(len(json.dumps(s)) - (SHORTEST_CLIP + 2) for s in long)
    limit = MAX_TOOL_TEXT
    while floor <= MAX_JSON_BYTES and limit > SHORTEST_CLIP:
        limit //= 4
        clipped = clip_text(value, limit)
        if _fits(clipped):
            return clipped
    return clip_text(json.dumps(value, default=str)[: MAX_JSON_BYTES // 2], SHORTEST_CLIP)


def tool_data(tool_name: Any, tool_input: Any, tool_response: Any, **extra: Any) -> dict[str, Any]:
    data = {
        "tool_name": str(tool_name or "unknown"),
        "tool_input": clip_json(tool_input if tool_input is not None else {}),
        "tool_response": clip_json(tool_response),
    }
    data.update({k: v for k, v in extra.items() if v is not None})
    return data


def event_id(
    ctx: HookContext,
    session_id: str,
    kind: str,
    content: Any,
    stable_ids: tuple[Any, ...] = (),
    when: datetime | None = None,
) -> str:
    """A deterministic ULID (see the module docstring for the three cases)."""
    digest = hashlib.sha256()
    stable = tuple(str(i) for i in stable_ids if i)
    received_ms = int(ctx.received.timestamp() * 1000)
    material = [ctx.agent, session_id, kind, *stable, json.dumps(content, sort_keys=True)]
    if not stable:
        material.append(str(int(when.timestamp() * 1000)) if when else str(received_ms))
    for part in material:
        digest.update(part.encode("utf-8", "surrogatepass"))
        digest.update(b"\x00")
    raw = bytearray(digest.digest()[:16])
    if stable:
        raw[0] &= 0x7F  # keep the 48-bit time field well inside ULID's range
    else:
        ms = int(when.timestamp() * 1000) if when else received_ms
        raw[:6] = ms.to_bytes(6, "big")
    return str(ULID(bytes(raw)))


def make_event(
    ctx: HookContext,
    *,
    session_id: str,
    kind: str,
    body: dict[str, Any],
    stable_ids: tuple[Any, ...] = (),
    when: datetime | None = None,
    version: str | None = None,
) -> Event:
    return Event(
        event_id=event_id(ctx, session_id, kind, body, stable_ids, when),
        session_id=session_id,
        actor_id=ctx.actor,
        namespace=ctx.namespace,
        kind=kind,  # type: ignore[arg-type]
        body=body,  # type: ignore[arg-type]
        valid_time=when or ctx.received,
        source={  # type: ignore[arg-type]
            "surface": ctx.agent,
            "version": version[:100] if isinstance(version, str) else None,
            "project_path": ctx.project_path,
        },
    )


def text_body(content: str) -> dict[str, Any]:
    return {"type": "text", "content": clip_text(content, MAX_JSON_BYTES)}


def json_body(data: dict[str, Any]) -> dict[str, Any]:
    return {"type": "json", "data": data}


def context_reply(hook: str, context: str, limit: int = 10_000) -> dict[str, Any]:
    """The ``hookSpecificOutput`` shape Claude Code, Gemini CLI and Codex all read."""
    return {"hookSpecificOutput": {"hookEventName": hook, "additionalContext": context[:limit]}}


class Agent(abc.ABC):
    """One coding agent, everything wakemark knows about it in one class: how its hook
    payloads map to events, whether a hook wants context back and in which reply format,
    what the forwarder prints when wakemark has nothing (or is down), and which config
    files ``wakemark install`` edits. Each subclass lives in its own module of this
    package, which is all the registry (``__init__``) needs to find it."""

    name: ClassVar[str]  # the URL and CLI name, ``wakemark hook <name>``
    # What the agent must read on stdout when wakemark has nothing to add or is down; the
    # forwarder keeps a copy (``hook.FAILSAFE``) because it cannot import this package.
    failsafe: ClassVar[str] = ""
    install_note: ClassVar[str]  # printed after `wakemark install <name>` changed a file

    def deliveries(self, payload: dict[str, Any]) -> list[dict[str, Any]]:
        """The hook deliveries one payload holds, each mapped with its own context (its
        own cwd, so its own project); most agents send one per payload."""
        return [payload]

    @abc.abstractmethod
    def map_payload(self, payload: dict[str, Any], ctx: HookContext) -> Mapped: ...

    def wants_context(self, mapped: Mapped) -> bool:
        """Whether the hook view should find context for this hook (a search, or the
        session index) and hand it to ``reply``."""
        return mapped.intent in (PROMPT, SESSION_START)

    @abc.abstractmethod
    def reply(self, mapped: Mapped, context: str) -> dict[str, Any] | None:
        """The body in the agent's own output format; None: 2xx with an empty body."""

    @abc.abstractmethod
    def install_targets(self, where: Where) -> list[tuple[str, Edit]]:
        """The config files `wakemark install` edits and how (``configs``)."""

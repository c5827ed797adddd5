"""``POST /v1/hooks/<agent>``: an agent's own hook payload in, its own output format out.

The agent (``services/agents``) maps the payload to events; they then take the same path as
``POST /v1/events`` (scrub → validate → store → enqueue after commit), and prompt and
session-start hooks get retrieval context back when the agent takes it. A hook we do not
use answers 200 with the agent's "nothing to add": a wakemark hook must never break the
agent. So does a delivery we cannot map (a field we need is missing in this agent
version's shape): it is counted as a capture miss with its reason, never answered 4xx.
"""

from __future__ import annotations

import logging
import os
import threading
from typing import Any

from flask import Blueprint, Response, jsonify, request

from wakemark.services import agents
from wakemark.services.agents.base import (
    IGNORE,
    PROMPT,
    SESSION_START,
    HookContext,
    HookPayloadError,
    Mapped,
)
from wakemark.services.api import client_files, current, metrics, security
from wakemark.services.api.errors import ApiError
from wakemark.services.api.params import json_object, query
from wakemark.services.api.schemas import HookQuery
from wakemark.shared import project
from wakemark.shared.models import FILE_HASHES, MAX_BATCH, Event, JsonBody, utcnow
from wakemark.shared.privacy import scrub
from wakemark.shared.retrieval import staleness
from wakemark.shared.storage import CodeAnchors, PutEventResult

bp = Blueprint("hooks", __name__)
log = logging.getLogger(__name__)
IGNORED_HEADER = "X-Wakemark-Ignored"
STOP_WITHOUT_ANSWER = metrics.Counter(
    "wakemark_hook_stop_without_answer_total",
    "Stop hooks that carried no final answer (a tool-only turn, or a transcript the server "
    "would not read): the turn is stored and extracted without one.",
)


class CaptureMisses:
    """Deliveries answered 2xx but not stored, by agent and reason. Both labels come from
    this code (registered agent names, fixed messages), so the series stay few."""

    name = "wakemark_hook_capture_misses_total"

    def __init__(self) -> None:
        self._counts: dict[tuple[str, str], int] = {}
        self._lock = threading.Lock()

    def inc(self, agent: str, reason: str, n: int = 1) -> None:
        with self._lock:
            self._counts[(agent, reason)] = self._counts.get((agent, reason), 0) + n

    def lines(self) -> list[str]:
        with self._lock:
            counts = sorted(self._counts.items())
        out = [
            f"# HELP {self.name} Hook deliveries the server could not map to events "
            "(answered 2xx in the agent's format, nothing stored).",
            f"# TYPE {self.name} counter",
        ]
        for (agent, reason), n in counts:
            label = reason.replace("\\", "\\\\").replace('"', '\\"')
            out.append(f'{self.name}{{agent="{agent}",reason="{label}"}} {n}')
        return out


CAPTURE_MISSES = CaptureMisses()


@bp.post("/v1/hooks/<agent>")
def post_hook(agent: str) -> Response | tuple[Response, int]:
    handler = agents.get(agent)
    if handler is None:
        known = ", ".join(agents.names())
        raise ApiError(404, f"unknown agent {agent!r} (known: {known})", code="unknown_agent")
    # Scrub first: event ids hash the content, and a secret must not leak into a hash.
    payload = scrub(json_object())
    hook = str(payload.get("hook_event_name") or query(HookQuery).event or "")
    mapped = Mapped(hook, IGNORE)
    namespace = root = None
    parts = handler.deliveries(payload)
    if len(parts) > MAX_BATCH:
        # Each delivery costs a project lookup and an event: a body of tiny ones would
        # hold the worker for a minute. The first ones are kept, as the agent sent them.
        reason = f"more than {MAX_BATCH} deliveries in one payload"
        log.info(
            "hook %s %r: %d deliveries, the first %d kept", agent, hook[:40], len(parts), MAX_BATCH
        )
        CAPTURE_MISSES.inc(agent, reason, len(parts) - MAX_BATCH)
        parts = parts[:MAX_BATCH]
    for part in parts:
        ctx = _context(agent, part)
        if namespace is None:
            namespace, root = ctx.namespace, ctx.project_path
        try:
            one = handler.map_payload(part, ctx)
        except HookPayloadError as exc:
            log.info("hook %s %r not captured: %s", agent, hook[:40], exc)
            CAPTURE_MISSES.inc(agent, str(exc))
            continue
        if mapped.intent == IGNORE:
            mapped.hook, mapped.intent = one.hook, one.intent
        mapped.events += one.events
    mapped.events = _with_edited(mapped.events)
    for event in mapped.events:
        security.require_scope(event.namespace)
        if event.kind == "session_summary" and not str(getattr(event.body, "content", "")).strip():
            STOP_WITHOUT_ANSWER.inc()
    ignored: dict[str, str] = {}
    results: list[PutEventResult] = []
    if mapped.events:
        results, ignored = current.store_events(mapped.events)
    context = ""
    watch: list[str] = []
    if handler.wants_context(mapped):
        if mapped.intent == PROMPT and mapped.events:
            prompt = current.as_stored(mapped.events[0], results[0])
            found = current.retrieve_for(prompt, reported=_reported())
            context, watch = found.context, found.watch
            _keep_baselines(found.baselines)
        elif mapped.intent == SESSION_START and namespace:
            index = current.runtime().retriever.session_index(
                namespace, read_files=current.reads_client_files(), reported=_reported(), root=root
            )
            context = index.context
    body = handler.reply(mapped, context)
    # Claude Code: a 2xx with an empty body is "success"
    response = Response(status=204) if body is None else jsonify(body)
    if watch:
        # The forwarder hashes these files for the next prompt (``staleness``).
        value = staleness.watch_value(watch)
        response.headers[staleness.WATCH_HEADER] = value.encode("utf-8").decode("latin-1")
    if ignored:
        # The forwarder writes this into its log: the user sees why nothing was stored.
        note = f"{len(mapped.events)} event(s) not stored: " + "; ".join(ignored.values())
        response.headers[IGNORED_HEADER] = note.encode("ascii", "backslashreplace").decode()
    return response


def _with_edited(events: list[Event]) -> list[Event]:
    """The tool-use events with the hashes the forwarder sent of the files the tool use
    wrote (``staleness.EDITED_HEADER``), on a server that may not read them; a local
    one reads the files itself at extraction and drops the header."""
    raw = request.headers.get(staleness.EDITED_HEADER)
    if raw is None:
        return events
    try:
        edited = staleness.parse_edited(raw.encode("latin-1").decode("utf-8", "replace"))
    except ValueError as exc:
        raise ApiError(400, str(exc), code="bad_edited_hashes") from None
    if current.reads_client_files():
        return events
    return [
        Event.model_validate(
            {
                **e.model_dump(),
                "body": {"type": "json", "data": {**e.body.data, FILE_HASHES: edited}},
            }
        )
        if e.kind == "tool_use" and isinstance(e.body, JsonBody)
        else e
        for e in events
    ]


def _reported() -> dict[str, str | None] | None:
    """The hashes a client whose files this server does not read sent of them (None for
    a client whose files it reads, or that sent none)."""
    if current.reads_client_files():
        return None
    raw = request.headers.get(staleness.HASHES_HEADER)  # UTF-8 read as Latin-1
    return staleness.parse_reported(
        None if raw is None else raw.encode("latin-1").decode("utf-8", "replace")
    )


def _keep_baselines(baselines: list[CodeAnchors]) -> None:
    """Anchors that took their hashes from a client's report, stored; one that fails
    (its record deleted meanwhile) costs the prompt nothing."""
    if not baselines:
        return
    try:
        with current.runtime().storage.transaction() as tx:
            for anchors in baselines:
                tx.put_anchors(anchors)
    except Exception as exc:
        log.warning("anchors from the client's hashes not stored: %r", exc)


def _context(agent: str, payload: dict[str, Any]) -> HookContext:
    start = _project_dir(payload)
    settings = current.runtime().settings
    local = client_files.local_client(settings, security.principal())
    # No path at all means the global project, never the server's own cwd. A path this
    # server cannot see (the API runs in a container), or may not probe (a scoped
    # token's client is someone else), is taken as the root as given.
    if local and start and os.path.isdir(start):
        root = project.find_root(start)
    else:
        root = os.path.normpath(start) if start else None
    actor = security.write_actor(request.headers.get("X-Wakemark-Actor")) or project.actor()
    actor = project.sanitize_actor(actor)
    namespace = project.namespace_for(actor, project.project_id(root))
    security.require_scope(namespace)  # a project-scoped token: that project only
    return HookContext(
        agent=agent,
        namespace=namespace,
        actor=actor,
        project_path=str(root) if root else None,
        received=utcnow(),
        hook_hint=query(HookQuery).event or None,
        open_client_file=client_files.opener(local),
    )


def _project_dir(payload: dict[str, Any]) -> str | None:
    # Header first (Claude Code fills it from $CLAUDE_PROJECT_DIR, the forwarder from its
    # own detection); an unset variable arrives as an empty string.
    candidates = [request.headers.get("X-Wakemark-Project"), payload.get("cwd")]
    roots = payload.get("workspace_roots")  # Cursor has no cwd
    if isinstance(roots, list) and roots:
        candidates.append(roots[0])
    for value in candidates:
        if isinstance(value, str) and value.startswith("/"):
            return value
    return None


@bp.record_once
def _register_metrics(_state: object) -> None:
    metrics.register(client_files.REFUSED.lines)
    metrics.register(STOP_WITHOUT_ANSWER.lines)
    metrics.register(CAPTURE_MISSES.lines)

"""Claude Code transcripts (``~/.claude/projects/<dir>/<session>.jsonl``) replayed as the
events its hooks would have posted: each user prompt a ``prompt``, each tool call with
its result a ``tool_use``, the last assistant text before the next prompt a
``session_summary``. Event ids are derived from the transcript's own ids (the
line's ``uuid``, the ``tool_use_id``), so importing a transcript twice stores nothing new.
The project comes from the session's ``cwd``, resolved as the hooks resolve it.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Iterator
from datetime import UTC, datetime
from typing import Any

from wakemark.services.agents.base import (
    HookContext,
    json_body,
    make_event,
    text_body,
    tool_data,
)
from wakemark.shared import project
from wakemark.shared.models import Event, utcnow
from wakemark.shared.privacy import scrub

AGENT = "claude-code"


def context_for(cwd: str | None, actor: str, agent: str = AGENT) -> HookContext:
    # As the API does for a hook: a directory this machine has is resolved to its project
    # root; one it does not have (a transcript from elsewhere) is the root as given.
    if cwd and os.path.isdir(cwd):
        root = project.find_root(cwd)
    else:
        root = os.path.normpath(cwd) if cwd else None
    actor = project.sanitize_actor(actor)
    return HookContext(
        agent=agent,
        namespace=project.namespace_for(actor, project.project_id(root)),
        actor=actor,
        project_path=str(root) if root else None,
        received=utcnow(),
    )


def line_time(line: dict[str, Any]) -> datetime | None:
    raw = line.get("timestamp")
    try:
        when = datetime.fromisoformat(str(raw).replace("Z", "+00:00"))
    except ValueError:
        return None
    return when if when.tzinfo else when.replace(tzinfo=UTC)


def _texts(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(
            b["text"]
            for b in content
            if isinstance(b, dict) and b.get("type") == "text" and isinstance(b.get("text"), str)
        )
    return ""


def json_objects(lines: Iterable[str | bytes]) -> Iterator[dict[str, Any]]:
    """The lines of a JSONL session log that hold a JSON object; the others are skipped."""
    for raw in lines:
        try:
            line = json.loads(raw)
        except ValueError:
            continue
        if isinstance(line, dict):
            yield line


def session_events(lines: Iterable[str | bytes], actor: str) -> Iterator[Event]:
    """The events of one transcript, in order; lines that are not JSON are skipped."""
    ctx: HookContext | None = None
    calls: dict[str, tuple[str, Any]] = {}  # tool_use_id -> (name, input)
    answer: tuple[str, dict[str, Any]] | None = None  # last assistant text, its line

    def summary() -> Iterator[Event]:
        nonlocal answer
        if answer is not None and ctx is not None:
            text, line = answer
            yield _event(ctx, line, "session_summary", text_body(text), (line.get("uuid"),))
        answer = None

    for line in json_objects(lines):
        if line.get("type") not in ("user", "assistant"):
            continue
        if line.get("isSidechain") or line.get("isMeta"):
            continue  # subagent threads and injected context are not the user's turn
        message = line.get("message")
        if not isinstance(message, dict) or not isinstance(line.get("sessionId"), str):
            continue
        if ctx is None:
            ctx = context_for(line.get("cwd"), actor)
        content = message.get("content")
        blocks = content if isinstance(content, list) else []
        if line["type"] == "assistant":
            for block in blocks:
                if isinstance(block, dict) and block.get("type") == "tool_use":
                    calls[str(block.get("id"))] = (str(block.get("name")), block.get("input"))
            text = _texts(content).strip()
            if text:
                answer = (text, line)
            continue
        results = [b for b in blocks if isinstance(b, dict) and b.get("type") == "tool_result"]
        for block in results:
            use_id = str(block.get("tool_use_id"))
            name, tool_input = calls.pop(use_id, ("unknown", None))
            response = line.get("toolUseResult")
            if not isinstance(response, dict):
                response = {"content": block.get("content")}
            data = tool_data(name, tool_input, response, is_error=block.get("is_error") or None)
            yield _event(ctx, line, "tool_use", json_body(data), (use_id,))
        prompt = _texts(content).strip()
        if prompt and not results:
            yield from summary()
            yield _event(ctx, line, "prompt", text_body(prompt), (line.get("uuid"),))
    yield from summary()


def _event(
    ctx: HookContext, line: dict[str, Any], kind: str, body: dict[str, Any], ids: tuple[Any, ...]
) -> Event:
    version = line.get("version")
    return make_event(
        ctx,
        session_id=str(line["sessionId"])[:200],
        kind=kind,
        body=scrub(body),
        stable_ids=ids,
        when=line_time(line),
        version=version if isinstance(version, str) else None,
    )


def transcripts(path: str) -> list[str]:
    """A transcript file, or every ``*.jsonl`` under a directory except subagents'."""
    if os.path.isfile(path):
        return [path]
    found = []
    for root, dirs, files in os.walk(path):
        dirs[:] = sorted(d for d in dirs if d != "subagents")
        found += [os.path.join(root, f) for f in sorted(files) if f.endswith(".jsonl")]
    return found

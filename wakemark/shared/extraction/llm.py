"""Opt-in LLM extractor against any OpenAI-compatible ``/chat/completions`` endpoint.

Strict: the reply must be one JSON object of the expected shape within the limits, or
the call counts as failed and the caller falls back to the deterministic record.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from datetime import UTC
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictStr

from wakemark.shared.config import Settings
from wakemark.shared.extraction import budget
from wakemark.shared.extraction.capture import in_project
from wakemark.shared.extraction.text import as_text, body_text, clip, collapse
from wakemark.shared.extraction.tools import parse_tool_use
from wakemark.shared.models import MemoryRecord
from wakemark.shared.storage import Turn

MAX_PROMPT_CHARS = 12_000
MAX_EVENT_CHARS = 1_500
MAX_OUTPUT_TOKENS = 1_024

SYSTEM = (
    "You turn one turn of an AI coding session into a memory record for later sessions. "
    "Reply with one JSON object and nothing else, with exactly these keys: "
    '"title" (one line, <= 200 chars, what was asked or done), '
    '"summary" (<= 4000 chars, what happened and why it matters), '
    '"facts" (<= 30 short strings: commands and their results, errors, decisions), '
    '"concepts" (<= 12 key terms: identifiers, libraries, error names), '
    '"files_touched" (paths edited or created, relative to the project), '
    '"observation_type" (one of: decision, bugfix, feature, refactor, discovery, change).'
)


class LlmError(Exception):
    """The LLM call failed or its reply was unusable; the message says why."""


class LlmOutput(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    title: Annotated[StrictStr, Field(min_length=1, max_length=200)]
    summary: Annotated[StrictStr, Field(max_length=4000)] = ""
    facts: list[Annotated[StrictStr, Field(max_length=300)]] = Field(max_length=30)
    concepts: list[Annotated[StrictStr, Field(max_length=100)]] = Field(max_length=12)
    files_touched: list[Annotated[StrictStr, Field(max_length=1000)]] = Field(max_length=200)
    observation_type: Literal["decision", "bugfix", "feature", "refactor", "discovery", "change"]


def render_turn(turn: Turn) -> tuple[str, list[str]]:
    """The turn as compact text for the model, and the ids of the events it shows."""
    lines: list[str] = []
    ids: list[str] = []
    for event in turn.events:
        if event.kind == "tool_use":
            use = parse_tool_use(event.body)
            head = use.command or ", ".join(f"{v} {p}" for v, p in use.files) or use.name
            exit_note = f" (exit {use.exit_code})" if use.exit_code is not None else ""
            text = f"{use.name or 'tool'}: {head}{exit_note}\n{use.output}"
        elif event.kind in ("prompt", "session_summary"):
            role = "user" if event.kind == "prompt" else "assistant"
            text = body_text(event.body, role=role) or as_text(event.body.model_dump())
        else:
            continue
        lines.append(f"[{event.kind}] {clip(text.strip(), MAX_EVENT_CHARS)}")
        ids.append(event.event_id)
    return "\n\n".join(lines)[:MAX_PROMPT_CHARS], ids


def extract_llm(turn: Turn, settings: Settings) -> MemoryRecord:
    """One record from the model, or LlmError. Tokens are reserved from the daily budget
    before the call and settled with the reply's ``usage.total_tokens`` after it."""
    user, ids = render_turn(turn)
    if not ids:
        raise LlmError("empty turn")
    payload = {
        "model": settings.llm_model,
        "messages": [{"role": "system", "content": SYSTEM}, {"role": "user", "content": user}],
        "response_format": {"type": "json_object"},
        "temperature": 0,
        "max_tokens": MAX_OUTPUT_TOKENS,
    }
    estimate = (len(SYSTEM) + len(user)) // 4 + MAX_OUTPUT_TOKENS
    if not budget.reserve(settings, estimate):
        raise LlmError("daily token budget exhausted")
    used, failed = estimate, True
    try:
        raw = _post(settings, payload)
        used = _tokens_used(raw, len(SYSTEM) + len(user))
        output = _parse(raw)
        failed = False
    except (urllib.error.HTTPError, urllib.error.URLError, ConnectionError) as exc:
        if not isinstance(getattr(exc, "reason", None), TimeoutError):
            used = 0  # refused or answered with an error status: the model did no work
        raise LlmError(f"request failed: {exc}") from exc
    except TimeoutError as exc:
        raise LlmError("timed out") from exc  # the model may have worked: keep the estimate
    finally:
        budget.settle(settings, estimate, used, failed)
    created = max(e.valid_time for e in turn.events).astimezone(UTC)
    roots = [e.source.project_path for e in turn.events if e.source.project_path]
    files = [in_project(f.strip(), roots) for f in output.files_touched if f.strip()]
    return MemoryRecord(
        namespace=turn.namespace,
        title=collapse(output.title) or "untitled",
        summary=output.summary.strip(),
        facts=[collapse(f) for f in output.facts if f.strip()],
        concepts=[collapse(c) for c in output.concepts if c.strip()],
        files_touched=list(dict.fromkeys(f for f in files if f)),
        observation_type=output.observation_type,
        source_event_ids=ids,
        strategy="llm",
        quality="full",
        created_at=created,
    )


def _post(settings: Settings, payload: dict[str, Any]) -> bytes:
    url = (settings.llm_base_url or "").rstrip("/") + "/chat/completions"
    headers = {"Content-Type": "application/json", "Accept": "application/json"}
    if settings.llm_api_key:
        headers["Authorization"] = f"Bearer {settings.llm_api_key}"
    request = urllib.request.Request(
        url, data=json.dumps(payload).encode(), headers=headers, method="POST"
    )
    with urllib.request.urlopen(request, timeout=settings.llm_timeout_s) as response:
        return bytes(response.read(4 * 1024 * 1024))


def _tokens_used(raw: bytes, prompt_chars: int) -> int:
    try:
        total = json.loads(raw)["usage"]["total_tokens"]
        if isinstance(total, int) and not isinstance(total, bool) and total >= 0:
            return total
    except (ValueError, KeyError, TypeError):
        pass
    return (prompt_chars + len(raw)) // 4  # no usage reported: estimate from characters


def _parse(raw: bytes) -> LlmOutput:
    try:
        reply = json.loads(raw)
        content = reply["choices"][0]["message"]["content"]
        if not isinstance(content, str):
            raise TypeError("content is not a string")
        data = json.loads(content)
        if not isinstance(data, dict):
            raise TypeError("content is not a JSON object")
        return LlmOutput.model_validate(data)
    except LlmError:
        raise
    except Exception as exc:
        raise LlmError(f"unusable reply: {exc.__class__.__name__}: {exc}") from exc

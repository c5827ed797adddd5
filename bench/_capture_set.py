"""Build the capture set: real Claude Code sessions replayed into turns as the hooks see them.

Reads session exports committed to public repositories (fetched as bare git directories
under ``/work/.mirror``), replays each session the way the Claude Code hooks post it — a
``prompt`` per user message, a ``tool_use`` per tool call with its result, and the text of
the turn's last assistant message as ``session_summary`` (none when the user interrupted
the turn: Claude Code sends no Stop then) — and writes one JSON line per turn to
``~/.wakemark-data/capture/turns.jsonl`` (``WAKEMARK_CAPTURE_DIR`` overrides).

Labels (must-skip with a reason, or work with a title) live in ``bench/capture_labels.json``,
keyed by turn id (``<repo>:<path>#<n>``); ``bench/capture.py`` scores the extractor on
the labelled turns. Run: ``python -m bench._capture_set``.

Four export formats are read, three of Claude Code sessions (keeping its raw message
content) and one of Gemini CLI:
- goodsch/brain_explore ``claude-prompts/*-full.md``: ``### User`` / ``### Assistant``
  sections, content blocks as JSON arrays;
- brightdigit/MistKit ``.taskmaster/docs/archive/conversations/*.md``: ``## User`` sections,
  the same JSON blocks;
- Randroids-Dojo/UnrealFrog ``.claude/transcripts/*.md``: prose, tool calls as
  ``- **Used Bash**: …`` lines (no tool output);
- FritzSavira/mcp-lektor ``docs/gemini_log/*.json``: Gemini CLI's saved chat, ``user`` and
  ``model`` messages of ``text``, ``functionCall`` and ``functionResponse`` parts.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

MIRROR = Path("/work/.mirror")
OUT = Path(os.environ.get("WAKEMARK_CAPTURE_DIR", Path.home() / ".wakemark-data" / "capture"))
SOURCES = {
    # repo: (commit, folder, file filter, format)
    "goodsch/brain_explore": (
        "5f0065446d2c83d2a5caf13c11a0e498f9faee56", "claude-prompts", r"/[0-9a-f]{8}-", "blocks3",
    ),
    "brightdigit/MistKit": (
        "e5b4db2527d9872d4fb632a69d13fe0dca53898b", ".taskmaster/docs/archive/conversations",
        r"/\d{8}-\d{6}_[0-9a-f-]+\.md$", "blocks2",
    ),
    "Randroids-Dojo/UnrealFrog": (
        "dc20bb855490ec404c58fd812200f41545d293a3", ".claude/transcripts", r"\.md$", "prose",
    ),
    "FritzSavira/mcp-lektor": (
        "53f730cbdd9f51e71c032ae9a12a62917a72a03c", "docs/gemini_log", r"\.json$", "gemini",
    ),
}  # fmt: skip
_HEADERS = {
    "blocks3": re.compile(r"^### (User|Assistant)\n> [\d/]+, [\d:]+ [AP]M\n", re.M),
    "blocks2": re.compile(r"^## (User|Assistant)\n\*\d{4}-\d{2}-\d{2} [\d:]+\*\n", re.M),
    "prose": re.compile(r"^## (User|Assistant) \(\d\d:\d\d UTC\)\n", re.M),
}
_PROSE_TOOL = re.compile(r"^- \*\*Used (\w+)\*\*(?::| on)? ?(.*)$", re.M)
# What Claude Code writes into the transcript when the user interrupts a turn: a user
# message no hook posts (no UserPromptSubmit), and a tool result when a tool was running.
_INTERRUPT = re.compile(r"\[Request interrupted by user[^\]]*\]")


@dataclass
class Turn:
    turn_id: str
    prompt: str
    tools: list[dict[str, Any]] = field(default_factory=list)
    texts: list[tuple[int, str]] = field(default_factory=list)  # (position, text)
    position: int = 0
    interrupted: int = -1  # position of the user's last interrupt

    def answer(self) -> str:
        """What the Stop hook reports: the text of the last assistant message (the text
        items after the last tool call, else the last text item). Claude Code sends no
        Stop for a turn the user interrupted (Esc, a tool use refused), so the text
        before an interrupt is no answer; only what the agent said after it is."""
        texts = [(p, t) for p, t in self.texts if p > self.interrupted]
        if not texts:
            return ""
        after = [t for p, t in texts if p > self.position]
        return "\n\n".join(after) if after else texts[-1][1]


def _git(repo: str, *args: str) -> str:
    gitdir = MIRROR / repo.replace("/", "+") / "repo"
    return subprocess.run(
        ["git", f"--git-dir={gitdir}", *args], check=True, capture_output=True, text=True
    ).stdout


def _items(text: str, form: str) -> Iterator[tuple[str, Any]]:
    """(kind, payload) in order: user_text, assistant_text, tool_use, tool_result."""
    if form == "gemini":
        yield from _gemini(json.loads(text))
        return
    parts = _HEADERS[form].split(text)
    for role, body in zip(parts[1::2], parts[2::2], strict=True):
        body = re.sub(r"\n---\n*\Z", "", body.strip("\n")).strip()
        if form == "prose":
            yield from _prose(role, body)
            continue
        blocks: Any = None
        if body.startswith("["):
            try:
                blocks = json.loads(body)
            except ValueError:
                blocks = None
        if not isinstance(blocks, list):
            yield (f"{role.lower()}_text", body)
            continue
        for block in blocks:
            kind = block.get("type") if isinstance(block, dict) else None
            if kind == "text" and role == "User" and _INTERRUPT.match(block.get("text", "")):
                yield ("interrupt", block["text"])
            elif kind == "text":
                yield (f"{role.lower()}_text", block.get("text", ""))
            elif kind == "tool_use":
                yield ("tool_use", block)
            elif kind == "tool_result":
                yield ("tool_result", block)


def _prose(role: str, body: str) -> Iterator[tuple[str, Any]]:
    interrupt = _INTERRUPT.match(body) if role == "User" else None
    if interrupt:  # the tool uses listed after it are the agent's, going on
        yield ("interrupt", interrupt.group())
        role, body = "Assistant", body[interrupt.end() :]
    if role == "User":
        # The export lists the agent's first tool calls, made before it says anything,
        # under the user's heading: the hook posts the message alone as the prompt.
        first = _PROSE_TOOL.search(body)
        cut = first.start() if first else len(body)
        yield ("user_text", body[:cut].strip().removeprefix("❯ "))
        body = body[cut:]
    body = body.removeprefix("🤖️").strip()
    for chunk in re.split(r"(^- \*\*Used \w+\*\*.*$)", body, flags=re.M):
        tool = _PROSE_TOOL.match(chunk)
        if tool:
            # "Used Edit on `path`": the file the hook's tool_input names
            path = re.fullmatch(r"`([^`]+)`", tool.group(2).strip())
            given = {"file_path": path.group(1)} if path else {"description": tool.group(2)}
            yield ("tool_use", {"name": tool.group(1), "input": given})
        elif chunk.strip():
            yield ("assistant_text", chunk.strip())


def _gemini(messages: list[dict[str, Any]]) -> Iterator[tuple[str, Any]]:
    calls, pending = 0, list[str]()  # responses answer the calls in order
    for message in messages:
        parts = message.get("parts") or []
        texts = [p["text"] for p in parts if isinstance(p.get("text"), str)]
        if message.get("role") == "user" and texts:
            yield ("user_text", "".join(texts))  # @file contents come as further parts
            continue
        for part in parts:
            if isinstance(part.get("text"), str) and part["text"].strip():
                yield ("assistant_text", part["text"])
            elif "functionCall" in part:
                call = part["functionCall"]
                calls += 1
                pending.append(f"call-{calls}")
                yield ("tool_use", {"id": pending[-1], "name": call.get("name"),
                                    "input": call.get("args")})  # fmt: skip
            elif "functionResponse" in part:
                response = part["functionResponse"].get("response") or {}
                yield ("tool_result", {"tool_use_id": pending.pop(0) if pending else "",
                                       "content": json.dumps(response)[:20_000]})  # fmt: skip


def _result_text(content: Any) -> str:
    if isinstance(content, list):
        return "\n".join(str(c.get("text", "")) for c in content if isinstance(c, dict))
    return str(content or "")


def replay(source_id: str, text: str, form: str) -> list[Turn]:
    """The session's turns. They are numbered by the user messages that open them and by
    the interrupts, so a turn keeps its number (the labels' key) however the replay
    treats the messages before it."""
    turns: list[Turn] = []
    number = 0
    by_id: dict[str, dict[str, Any]] = {}
    after_skill = False  # a skill's expansion follows its tool result as a user message
    for position, (kind, payload) in enumerate(_items(text, form)):
        if kind == "user_text":
            if after_skill or not turns and not payload.strip():
                continue
            turns.append(Turn(f"{source_id}#{number}", payload, position=position))
            number += 1
        elif kind == "interrupt":
            number += not after_skill and bool(turns)  # where a user message opens a turn
            if turns:
                turns[-1].interrupted = position
        elif not turns:
            continue  # a sidechain export starts with the agent, before any prompt
        elif kind == "assistant_text":
            after_skill = False
            turns[-1].texts.append((position, payload))
        elif kind == "tool_use":
            after_skill = False
            tool = {"tool_name": payload.get("name"), "tool_input": payload.get("input") or {}}
            turns[-1].tools.append(tool)
            turns[-1].position = position
            by_id[str(payload.get("id"))] = tool
        elif kind == "tool_result":
            tool = by_id.get(str(payload.get("tool_use_id")), {})
            output = _result_text(payload.get("content"))[:20_000]
            if payload.get("is_error"):
                tool.update(error=output, is_error=True)  # PostToolUseFailure
                if _INTERRUPT.search(output):  # "Exit code 137\n[Request interrupted…"
                    tool["is_interrupt"] = True
            else:
                tool["tool_response"] = output
                if tool.get("tool_name") == "Bash":
                    tool["exit_code"] = 0  # PostToolUse fires only on success
            after_skill = tool.get("tool_name") == "Skill"
    return turns


def events(turn: Turn, session: str) -> list[dict[str, Any]]:
    """The turn as the hooks would have posted it (``tests/extraction/turns.py`` shape)."""
    items: list[tuple[str, dict[str, Any]]] = [("prompt", {"type": "text", "content": turn.prompt})]
    items += [("tool_use", {"type": "json", "data": t}) for t in turn.tools]
    if turn.answer():
        items.append(("session_summary", {"type": "text", "content": turn.answer()}))
    return [
        {
            "kind": kind,
            "body": body,
            "session_id": session,
            "valid_time": f"2025-11-03T09:{i // 60:02d}:{i % 60:02d}+00:00",
        }
        for i, (kind, body) in enumerate(items)
    ]


def build() -> list[dict[str, Any]]:
    out = []
    for repo, (commit, folder, keep, form) in SOURCES.items():
        paths = [p for p in _git(repo, "ls-tree", "-r", "--name-only", commit, folder).split()]
        for path in sorted(p for p in paths if re.search(keep, p)):
            text = _git(repo, "show", f"{commit}:{path}")
            for turn in replay(f"{repo}:{path}", text, form):
                out.append(
                    {
                        "id": turn.turn_id,
                        "repo": repo,
                        "commit": commit,
                        "path": path,
                        "events": events(turn, turn.turn_id.split("#")[0][-60:]),
                    }
                )
    return out


def main() -> int:
    turns = build()
    OUT.mkdir(parents=True, exist_ok=True)
    with (OUT / "turns.jsonl").open("w") as fh:
        for turn in turns:
            fh.write(json.dumps(turn, ensure_ascii=False) + "\n")
    repos = {t["repo"] for t in turns}
    print(f"{len(turns)} turns from {len(repos)} repositories -> {OUT / 'turns.jsonl'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

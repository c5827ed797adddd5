"""Markdown the agent reads: the prompt-time context block and the session-start index."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from wakemark.shared.models import MemoryRecord

CONTEXT_HEADER = "## Prior observations"
INDEX_HEADER = "## Memory index"
INDEX_SUMMARY_CHARS = 140


def format_context(records: Sequence[MemoryRecord]) -> str:
    """Header, then per record ``### title``, summary, facts as bullets; no ids or times."""
    if not records:
        return ""
    blocks = [CONTEXT_HEADER]
    for record in records:
        lines = [f"### {_one_line(record.title)}"]
        if record.summary.strip():
            lines.append(record.summary.strip())
        lines.extend(f"- {_one_line(fact)}" for fact in record.facts if fact.strip())
        blocks.append("\n".join(lines))
    return "\n\n".join(blocks) + "\n"


def index_line(record: MemoryRecord) -> str:
    summary = _after_title(_one_line(record.summary), _one_line(record.title))
    if len(summary) > INDEX_SUMMARY_CHARS:
        summary = summary[: INDEX_SUMMARY_CHARS - 1].rstrip() + "…"
    title = _one_line(record.title).rstrip(" :;,") or _one_line(record.title)
    if not summary:
        return f"- {title}\n"
    # A title that ends a sentence ("…customers.", "…fail?") needs no colon after it.
    return (
        f"- {title} {summary}\n"
        if title.endswith((".", "!", "?", "…"))
        else f"- {title}: {summary}\n"
    )


def _after_title(summary: str, title: str) -> str:
    """The summary without its opening when that only says the title again (a title
    taken from the answer's first sentence); a title cut short ("…") is no such opening."""
    said = title.split(" (changed since: ")[0].rstrip(" :;,.!?")  # ``Verdict.marker``
    rest = summary[len(said) :]
    # The whole first sentence, not words that only begin the summary ("Fix login cookies").
    ends = rest == "" or rest[0] in ".:;,!?"
    if not said or title.endswith("…") or not summary.startswith(said) or not ends:
        return summary
    return rest.lstrip(" :;,.!?")


def format_index(records: Iterable[MemoryRecord], max_bytes: int) -> tuple[str, int]:
    """Header plus one line per record, whole lines only, within ``max_bytes`` UTF-8 bytes.

    The records are consumed lazily, so a caller can page through storage and stop as
    soon as the budget is full. Returns (text, used_bytes); nothing fits -> ("", 0).
    """
    header = INDEX_HEADER + "\n"
    used = len(header.encode())
    parts: list[str] = []
    for record in records:
        line = index_line(record)
        size = len(line.encode())
        if used + size > max_bytes:
            line = _fit(line, max_bytes - used)
            if line:
                parts.append(line)
                used += len(line.encode())
            break
        parts.append(line)
        used += size
    if not parts:
        return "", 0
    return header + "".join(parts), used


def _fit(line: str, room: int) -> str:
    """The line cut to ``room`` bytes at a character boundary, ending in "…\\n"; "" if
    too little room is left for a useful line."""
    tail = "…\n"
    room -= len(tail.encode())
    if room < 24:
        return ""
    cut = line.encode()[:room].decode("utf-8", errors="ignore").rstrip()
    return cut + tail


def _one_line(text: str) -> str:
    return " ".join(text.split())

"""Markdown the agent reads: the prompt-time context block and the session-start index."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from wakemark.shared.models import MemoryRecord

CONTEXT_HEADER = "## Prior observations"
INDEX_HEADER = "## Memory index"
INDEX_SUMMARY_CHARS = 140


def format_context(records: Sequence[MemoryRecord]) -> str:
    """Header, then per record ``### title``, summary, facts as bullets; no ids or times.
    Each byte costs the user a token, so nothing is said twice: not a summary's opening
    that only repeats the title (``_after_title``), nor a fact the title or summary
    already holds, nor the verb of each file in a run of edits."""
    if not records:
        return ""
    blocks = [CONTEXT_HEADER]
    for record in records:
        title = _one_line(record.title)
        summary = _after_title(record.summary.strip(), title)
        lines = [f"### {title}"]
        if summary:
            lines.append(summary)
        said = f"{title}\n{summary}"
        facts = dict.fromkeys(_one_line(fact) for fact in record.facts)
        new = [fact for fact in facts if fact and not _holds(said, fact)]
        lines.extend(f"- {fact}" for fact in _file_runs(new, record.files_touched))
        blocks.append("\n".join(lines))
    return "\n\n".join(blocks) + "\n"


def _file_runs(facts: list[str], files: Sequence[str]) -> list[str]:
    """Facts with a run of the same verb on the record's files ("edited a.py", "edited
    b.py") said as one ("edited a.py, b.py")."""
    out: list[str] = []
    verb = None
    for fact in facts:
        said, _, path = fact.partition(" ")
        if path in files and said == verb:
            out[-1] += f", {path}"
            continue
        out.append(fact)
        verb = said if path in files else None
    return out


def _holds(text: str, part: str) -> bool:
    """``text`` says ``part`` word for word (any case), not inside a longer word. (A
    pattern per part would be compiled anew for each record of a session's index.)"""
    text, part = text.lower(), part.lower()
    start = text.find(part)
    while start >= 0:
        end = start + len(part)
        if not (_word_char(text, start - 1) or _word_char(text, end)):
            return True
        start = text.find(part, start + 1)
    return False


def _word_char(text: str, at: int) -> bool:
    return 0 <= at < len(text) and (text[at].isalnum() or text[at] == "_")


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
    """The summary without its opening when that only says the title again: a first line
    the title holds whole ("* Fix login" under "Fix login (#12)", a squashed commit's), or
    a first sentence the title is (taken from the answer's; a title cut short ("…") is no
    such sentence)."""
    said = title.split(" (changed since: ")[0].rstrip(" :;,.!?")  # ``Verdict.marker``
    first, _, after = summary.partition("\n")
    line = first.strip().lstrip("*-# ").rstrip(" :;,.!?")
    if line and _holds(said, line):
        return after.strip()
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

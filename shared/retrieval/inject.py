"""Which of a prompt's hits are injected: relevant enough, new to the session, distinct in
content, and whole within the byte budget.

A record injected earlier in the session is left out until ``REPEAT_AFTER`` more prompts
of that session have passed (the agent still has it in context until then; a long
session may have compacted it away after). Records are taken best relevance first;
recency, through the search's order, only breaks ties. A record that does not fit the
budget whole is skipped for a smaller one, so the block holds fewer, complete records; only
a best record too large alone is cut, at a line.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from wakemark.shared.models import MemoryRecord
from wakemark.shared.retrieval.formatting import format_context

if TYPE_CHECKING:
    from wakemark.shared.retrieval.hits import SearchHit

MAX_RECORDS = 5
REPEAT_AFTER = 10  # prompts of a session before an injected record may come back
_CUT = "…\n"


@dataclass(frozen=True)
class Selection:
    injected: list[SearchHit]
    context: str
    reason: str
    skipped: dict[str, str] = field(default_factory=dict)  # record_id -> why


def content_key(record: MemoryRecord) -> tuple[str, ...]:
    """Two records with this key equal would read the same to the agent."""
    parts = [record.title, record.summary, *record.facts]
    return tuple(" ".join(p.lower().split()) for p in parts)


def select(
    hits: Sequence[SearchHit],
    min_relevance: float,
    seen: Collection[str],
    max_bytes: int,
    limit: int = MAX_RECORDS,
) -> Selection:
    if not hits:
        return Selection([], "", "no candidates")
    order = sorted(range(len(hits)), key=lambda i: (-hits[i].relevance, i))
    eligible = [hits[i] for i in order if hits[i].relevance >= min_relevance]
    if not eligible:
        best = max(h.relevance for h in hits)
        return Selection([], "", f"best relevance {best:.3f} is below {min_relevance:.3f}")
    chosen: list[SearchHit] = []
    skipped: dict[str, str] = {}
    keys: set[tuple[str, ...]] = set()
    context = ""
    for hit in eligible:
        record = hit.record
        if record.record_id in seen:
            skipped[record.record_id] = "seen"
        elif content_key(record) in keys:
            skipped[record.record_id] = "duplicate"
        elif len(chosen) >= limit:
            skipped[record.record_id] = "limit"
        else:
            block = format_context([h.record for h in chosen] + [record])
            if len(block.encode()) <= max_bytes:
                chosen.append(hit)
                keys.add(content_key(record))
                context = block
            elif not chosen:
                chosen.append(hit)
                keys.add(content_key(record))
                context = _cut(block, max_bytes)
            else:
                skipped[record.record_id] = "budget"
    if not chosen:
        reason = f"none of the {len(eligible)} hits at or above {min_relevance:.3f} is new here"
        return Selection([], "", reason + " (already injected in this session)", skipped)
    reason = f"{len(chosen)} of {len(eligible)} hits at or above {min_relevance:.3f} injected"
    return Selection(chosen, context, reason, skipped)


def _cut(block: str, max_bytes: int) -> str:
    """The block cut at the last line that fits, marked with an ellipsis."""
    room = max_bytes - len(_CUT.encode())
    text = block.encode()[:room].decode("utf-8", errors="ignore")
    if "\n" in text:
        text = text[: text.rindex("\n")]
    return text.rstrip() + _CUT

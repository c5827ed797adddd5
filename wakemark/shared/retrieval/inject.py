"""Which of a prompt's hits are injected: none unless the prompt as a whole looks relevant
to the project (``gate.prompt_relevance``), then those relevant enough, new to the
session, distinct in content, and whole within the byte budget.

A record injected earlier in the session is left out until ``REPEAT_AFTER`` more prompts
of that session have passed (the agent still has it in context until then; a long
session may have compacted it away after), unless it ranks first by a wide margin: its
relevance at least ``REPEAT_MARGIN`` above every other candidate's (the prompt is about
that record, and one repeat is cheaper than the agent working without it). Records are
taken best relevance first; recency, through the search's order, only breaks ties. A
record that does not fit the budget whole is skipped for a smaller one, so the block
holds fewer, complete records; only a best record too large alone is cut, at a line.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from wakemark.shared.models import MemoryRecord
from wakemark.shared.retrieval import gate
from wakemark.shared.retrieval.formatting import format_context
from wakemark.shared.retrieval.hits import shown

if TYPE_CHECKING:
    from wakemark.shared.retrieval.hits import SearchHit

MAX_RECORDS = 5
REPEAT_AFTER = 10  # prompts of a session before an injected record may come back
REPEAT_MARGIN = 0.5  # relevance above all other candidates that brings one back sooner
_CUT = "…\n"


@dataclass(frozen=True)
class Selection:
    injected: list[SearchHit]
    context: str
    reason: str
    skipped: dict[str, str] = field(default_factory=dict)  # record_id -> why
    prompt_relevance: float | None = None  # None: no candidates


def content_key(record: MemoryRecord) -> tuple[str, ...]:
    """Two records with this key equal would read the same to the agent."""
    parts = [record.title, record.summary, *record.facts]
    return tuple(" ".join(p.lower().split()) for p in parts)


def select(
    hits: Sequence[SearchHit],
    min_prompt: float,
    min_relevance: float,
    seen: Collection[str],
    max_bytes: int,
    limit: int = MAX_RECORDS,
) -> Selection:
    if not hits:
        return Selection([], "", "no candidates")
    lexical_only = any(h.evidence is None or h.evidence.cosine is None for h in hits)
    # Decided on the values as the audit shows them (rounded), so a row never says
    # 0.451 against a bar of 0.451 and "none".
    prompt = shown(
        gate.prompt_relevance(
            [h.relevance for h in hits],
            [h.evidence for h in hits],
            lexical_only,
        )
    )
    if prompt < min_prompt:
        reason = f"prompt relevance {prompt:.3f} is below {min_prompt:.3f}"
        return Selection([], "", reason, prompt_relevance=prompt)
    order = sorted(range(len(hits)), key=lambda i: (-hits[i].relevance, i))
    eligible = [hits[i] for i in order if shown(hits[i].relevance) >= min_relevance]
    head = f"prompt relevance {prompt:.3f}; "
    if not eligible:
        best = hits[order[0]].relevance
        reason = f"{head}best relevance {best:.3f} is below {min_relevance:.3f}"
        return Selection([], "", reason, prompt_relevance=prompt)
    runner_up = hits[order[1]].relevance if len(order) > 1 else 0.0
    back = eligible[0].relevance - runner_up >= REPEAT_MARGIN  # the first may come back
    chosen: list[SearchHit] = []
    skipped: dict[str, str] = {}
    keys: set[tuple[str, ...]] = set()
    context = ""
    for n, hit in enumerate(eligible):
        record = hit.record
        if record.record_id in seen and not (n == 0 and back):
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
        reason = f"{head}none of the {len(eligible)} hits at or above {min_relevance:.3f} is new"
        reason += " here (already injected in this session)"
        return Selection([], "", reason, skipped, prompt)
    reason = f"{head}{len(chosen)} of {len(eligible)} hits at or above {min_relevance:.3f} injected"
    return Selection(chosen, context, reason, skipped, prompt)


def _cut(block: str, max_bytes: int) -> str:
    """The block cut at the last line that fits, marked with an ellipsis."""
    room = max_bytes - len(_CUT.encode())
    text = block.encode()[:room].decode("utf-8", errors="ignore")
    if "\n" in text:
        text = text[: text.rindex("\n")]
    return text.rstrip() + _CUT

"""Turn closed turns and notes into memory records; collapse near-duplicates.

Public surface for the jobs layer: ``extract_turn`` (records or why there are none),
``extract``, ``record_from_note``, ``dedupe``, ``subject`` (one current record per
subject) and ``llm_usage``.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from wakemark.shared.config import Settings
from wakemark.shared.extraction import subject
from wakemark.shared.extraction.budget import usage as _usage
from wakemark.shared.extraction.capture import (
    LOOKBACK,
    carries_on,
    follows_up,
    is_ack_answer,
    joined_turns,
    may_join,
    turn_skip_reason,
)
from wakemark.shared.extraction.dedupe import THRESHOLD, dedupe
from wakemark.shared.extraction.deterministic import extract_deterministic
from wakemark.shared.extraction.notes import record_from_note
from wakemark.shared.extraction.text import body_text
from wakemark.shared.models import MemoryRecord
from wakemark.shared.privacy import scrub_record
from wakemark.shared.storage import Turn

__all__ = [
    "LOOKBACK",
    "THRESHOLD",
    "Extracted",
    "dedupe",
    "extract",
    "extract_turn",
    "joined_turns",
    "llm_enabled",
    "llm_usage",
    "may_join",
    "record_from_note",
    "subject",
]

log = logging.getLogger(__name__)


def llm_enabled(settings: Settings) -> bool:
    return bool(settings.llm_base_url and settings.llm_model)


@dataclass(frozen=True)
class Extracted:
    records: list[MemoryRecord] = field(default_factory=list)
    # why there are none: command, meta, trivial, error, unanswered, empty
    skipped: str | None = None
    # the turn goes on with the previous turn of its session (``capture.follows_up``),
    # naming nothing of its own (``capture.carries_on``)
    follows_up: bool = False
    carries_on: bool = False


def extract_turn(turn: Turn, settings: Settings, joined: Sequence[Turn] = ()) -> Extracted:
    """``extract``, and when it gives no record, why: the turn was a command, injected
    context, a trivial exchange, an agent error or a request without answer or outcome
    (``capture.turn_skip_reason``), or held nothing usable. ``joined``: the unanswered
    turns it continues (``joined_turns``)."""
    if not any(e.kind == "note" for e in turn.events):
        reason = turn_skip_reason(turn)
        if reason == "trivial" and joined and not _ack_only(turn):
            reason = None  # "try again" answered: the answer is to the earlier request
        if reason:
            return Extracted(skipped=reason)
    records = extract(turn, settings, screened=True, joined=joined)
    if not records:
        return Extracted(skipped="empty")
    return Extracted(records, None, follows_up(turn), carries_on(turn))


def _ack_only(turn: Turn) -> bool:
    answers = [e for e in turn.events if e.kind == "session_summary"]
    return not answers or is_ack_answer(body_text(answers[-1].body, role="assistant"))


def extract(
    turn: Turn, settings: Settings, screened: bool = False, joined: Sequence[Turn] = ()
) -> list[MemoryRecord]:
    """Records for one closed turn: one per note event, else one for the turn (none for
    a turn with nothing usable or no work, see ``extract_turn``). With an LLM configured
    its record is used; any failure of it gives the deterministic record marked
    ``quality="fallback"``. Every record is scrubbed: its events were, but an LLM's wording
    or a join of two events need not be."""
    return [scrub_record(r) for r in _extract(turn, settings, screened, joined)]


def _extract(
    turn: Turn, settings: Settings, screened: bool, joined: Sequence[Turn]
) -> list[MemoryRecord]:
    notes = [e for e in turn.events if e.kind == "note"]
    if notes:
        return [record_from_note(e) for e in notes]
    if not screened and turn_skip_reason(turn):
        return []
    if llm_enabled(settings):
        from wakemark.shared.extraction.llm import extract_llm

        earlier = [e for t in joined for e in t.events if e.kind in ("prompt", "tool_use")]
        try:
            return [extract_llm(replace(turn, events=[*earlier, *turn.events]), settings)]
        except Exception as exc:  # any failure of the opt-in path must not lose the turn
            log.warning("LLM extraction of turn %s fell back: %s", turn.turn_id, exc)
            record = extract_deterministic(turn, quality="fallback", joined=joined)
            return [record] if record else []
    record = extract_deterministic(turn, joined=joined)
    return [record] if record else []


def llm_usage(settings: Settings) -> dict[str, Any]:
    """Today's LLM usage for ``/health``: tokens used, budget, calls, failures."""
    return _usage(settings)

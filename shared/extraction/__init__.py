"""Turn closed turns and notes into memory records; collapse near-duplicates.

Public surface for the jobs layer: ``extract_turn`` (records or why there are none),
``extract``, ``record_from_note``, ``dedupe``, ``conservative_merge`` (with ``Merge``) and
``llm_usage``.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

from wakemark.shared.config import Settings
from wakemark.shared.extraction.budget import usage as _usage
from wakemark.shared.extraction.capture import turn_skip_reason
from wakemark.shared.extraction.dedupe import THRESHOLD, Merge, conservative_merge, dedupe
from wakemark.shared.extraction.deterministic import extract_deterministic
from wakemark.shared.extraction.notes import record_from_note
from wakemark.shared.models import MemoryRecord
from wakemark.shared.privacy import scrub_record
from wakemark.shared.storage import Turn

__all__ = [
    "THRESHOLD",
    "Extracted",
    "Merge",
    "conservative_merge",
    "dedupe",
    "extract",
    "extract_turn",
    "llm_enabled",
    "llm_usage",
    "record_from_note",
]

log = logging.getLogger(__name__)


def llm_enabled(settings: Settings) -> bool:
    return bool(settings.llm_base_url and settings.llm_model)


@dataclass(frozen=True)
class Extracted:
    records: list[MemoryRecord] = field(default_factory=list)
    skipped: str | None = None  # why there are none: command, meta, trivial, error, empty


def extract_turn(turn: Turn, settings: Settings) -> Extracted:
    """``extract``, and when it gives no record, why: the turn was a command, injected
    context, a trivial exchange or an agent error (``capture.skip_reason``), or held
    nothing usable."""
    if not any(e.kind == "note" for e in turn.events):
        reason = turn_skip_reason(turn)
        if reason:
            return Extracted(skipped=reason)
    records = extract(turn, settings, screened=True)
    return Extracted(records, None if records else "empty")


def extract(turn: Turn, settings: Settings, screened: bool = False) -> list[MemoryRecord]:
    """Records for one closed turn: one per note event, else one for the turn (none for
    a turn with nothing usable or no work, see ``extract_turn``). With an LLM configured
    its record is used; any failure of it gives the deterministic record marked
    ``quality="fallback"``. Every record is scrubbed: its events were, but an LLM's wording
    or a join of two events need not be."""
    return [scrub_record(r) for r in _extract(turn, settings, screened)]


def _extract(turn: Turn, settings: Settings, screened: bool) -> list[MemoryRecord]:
    notes = [e for e in turn.events if e.kind == "note"]
    if notes:
        return [record_from_note(e) for e in notes]
    if not screened and turn_skip_reason(turn):
        return []
    if llm_enabled(settings):
        from wakemark.shared.extraction.llm import extract_llm

        try:
            return [extract_llm(turn, settings)]
        except Exception as exc:  # any failure of the opt-in path must not lose the turn
            log.warning("LLM extraction of turn %s fell back: %s", turn.turn_id, exc)
            record = extract_deterministic(turn, quality="fallback")
            return [record] if record else []
    record = extract_deterministic(turn)
    return [record] if record else []


def llm_usage(settings: Settings) -> dict[str, Any]:
    """Today's LLM usage for ``/health``: tokens used, budget, calls, failures."""
    return _usage(settings)

"""The JSON routes the viewer needs beyond the core API: a record's provenance, bulk
delete (dry run first) and the context preview. Bearer-protected like every ``/v1`` route.
"""

from __future__ import annotations

from typing import Any, Protocol

from flask import Blueprint, Response, jsonify, request
from pydantic import BaseModel, ConfigDict, Field, StrictBool, model_validator

from wakemark.services.api import current, security
from wakemark.services.api.errors import ApiError
from wakemark.services.api.params import json_object, query
from wakemark.services.api.resources import RECORD_ID_RE
from wakemark.services.api.schemas import ContextPreviewQuery, NamespaceOrPrefix
from wakemark.services.ui import handoff
from wakemark.shared.extraction.text import body_text
from wakemark.shared.extraction.tools import parse_tool_use
from wakemark.shared.models import (
    Event,
    IsoDatetime,
    MemoryRecord,
    ObservationType,
    RecordId,
    ShortStr,
    StoredEvent,
    is_namespace_prefix,
    new_ulid,
    utcnow,
)
from wakemark.shared.retrieval.retriever import PROMPT_CANDIDATES
from wakemark.shared.storage import Events, MemoryFilter, Records, Transactions, Turn, Vectors

bp = Blueprint("viewer_api", __name__)

MAX_SOURCE_EVENTS = 200  # a merged record can name many; the page shows the first ones
MAX_SKIPPED = 20
MAX_IDS = 10_000
TEXT_CAP = 20_000  # per prompt, answer or output shown: a page, not a dump


class ViewerStorage(Events, Records, Vectors, Transactions, Protocol):
    """Turns and their events, records (read, found, deleted with their audit entry), which
    of them have vectors."""


def _storage() -> ViewerStorage:
    return current.runtime().storage


def _get_record(record_id: str) -> MemoryRecord:
    record = _storage().get_memory_record(record_id) if RECORD_ID_RE.match(record_id) else None
    return security.owned(record, "memory record")


# --- provenance -------------------------------------------------------------------------


@bp.get("/v1/memories/<record:record_id>/source")
def memory_source(record_id: str) -> Response:
    """The turns the record came from (prompt, tool uses, final answer) and the turns of
    the same session that extraction kept nothing of."""
    storage = _storage()
    record = _get_record(record_id)
    wanted = list(dict.fromkeys(record.source_event_ids))[:MAX_SOURCE_EVENTS]
    events = [e for e in (storage.get_event(i) for i in wanted) if e is not None]
    found = {e.event_id for e in events}
    turn_ids = list(dict.fromkeys(e.turn_id for e in events if e.turn_id))
    turns = storage.get_turns(turn_ids)
    skipped: list[dict[str, Any]] = []
    sessions = list(dict.fromkeys((t.namespace, t.session_id) for t in turns))
    for namespace, session_id in sessions:
        infos = storage.session_turns(namespace, session_id)
        reasons = {t.turn_id: t.skip_reason for t in infos if t.extracted and not t.record_ids}
        for turn in storage.get_turns(list(reasons)[:MAX_SKIPPED]):
            skipped.append(
                {
                    **_turn_json(turn),
                    # command, meta, trivial, error, unanswered, empty (extraction/capture.py)
                    "reason": reasons[turn.turn_id],
                }
            )
    return jsonify(
        record_id=record.record_id,
        source_event_ids=len(record.source_event_ids),
        missing_event_ids=[i for i in wanted if i not in found],
        turns=[_turn_json(t) for t in turns],
        skipped_turns=skipped,
    )


def _turn_json(turn: Turn) -> dict[str, Any]:
    prompt = next((e for e in turn.events if e.kind == "prompt"), None)
    answers = [e for e in turn.events if e.kind == "session_summary"]
    return {
        "turn_id": turn.turn_id,
        "session_id": turn.session_id,
        "closed": turn.closed,
        "extracted": turn.extracted,
        "started_at": turn.events[0].valid_time.isoformat() if turn.events else None,
        "prompt": _text(prompt),
        "tool_uses": [_tool_json(e) for e in turn.events if e.kind == "tool_use"],
        "answer": _text(answers[-1]) if answers else None,
        "notes": [_text(e) for e in turn.events if e.kind == "note"],
    }


def _text(event: StoredEvent | None) -> str | None:
    if event is None:
        return None
    return body_text(event.body, role="assistant")[:TEXT_CAP]


def _tool_json(event: StoredEvent) -> dict[str, Any]:
    use = parse_tool_use(event.body)
    return {
        "event_id": event.event_id,
        "name": use.name,
        "kind": use.kind,
        "command": use.command,
        "exit_code": use.exit_code,
        "failed": use.failed,
        "files": [{"verb": verb, "path": path} for verb, path in use.files],
        "output": use.output[:2000],
    }


# --- bulk delete --------------------------------------------------------------------------


_FILTER_FIELDS = ("namespace", "type", "before", "after", "session_id")


class BulkDelete(BaseModel):
    """``POST /v1/memories/delete``: ``ids``, or a filter that names a ``namespace``."""

    # The published schema says what the validator below enforces: ids, or a namespace.
    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={
            "anyOf": [
                {
                    "required": ["ids"],
                    "properties": {
                        "ids": {"type": "array"},
                        **{k: {"type": "null"} for k in _FILTER_FIELDS},
                    },
                },
                {
                    "required": ["namespace"],
                    "properties": {"namespace": {"type": "string"}, "ids": {"type": "null"}},
                },
            ]
        },
    )

    ids: list[RecordId] | None = Field(default=None, max_length=MAX_IDS)
    namespace: NamespaceOrPrefix | None = None
    type: ObservationType | None = None
    before: IsoDatetime | None = None
    after: IsoDatetime | None = None
    session_id: ShortStr | None = None
    dry_run: StrictBool = False
    with_events: StrictBool = False  # also delete the records' source events

    @model_validator(mode="after")
    def _one_selection(self) -> BulkDelete:
        narrowing = (self.namespace, self.type, self.before, self.after, self.session_id)
        if self.ids is not None:
            if any(v is not None for v in narrowing):
                raise ValueError("give either ids or a filter, not both")
        elif self.namespace is None:
            raise ValueError("a filter needs a namespace (or give ids)")
        elif not is_namespace_prefix(self.namespace):
            raise ValueError(
                "namespace must look like /actor/<actor>/project/<id>/ or /actor/<actor>/"
            )
        return self


@bp.post("/v1/memories/delete")
def bulk_delete() -> Response:
    """Dry run: what the same call would destroy now. Otherwise the records (their
    vectors and full-text entries go with them) and, if asked, their source events, all
    in one transaction; a record selected but already gone is simply not counted."""
    req = BulkDelete.model_validate(json_object())
    storage = _storage()
    records: list[MemoryRecord] | None = None  # fetched only when they are needed
    if req.ids is not None:
        # Unknown ids, and ids outside a scoped token's scope, are simply not selected.
        found = storage.get_memory_records(list(dict.fromkeys(req.ids)))
        records = [r for r in found if security.visible(r.namespace)]
        ids = [r.record_id for r in records]
    else:
        assert req.namespace is not None  # the validator saw to it
        security.require_scope(req.namespace)
        where = MemoryFilter(req.namespace, req.type, req.before, req.after, req.session_id)
        ids = storage.find_memory_ids(where)
        if req.with_events:
            records = storage.get_memory_records(ids)
    event_ids: list[str] = []
    if req.with_events and records is not None:
        event_ids = list(dict.fromkeys(e for r in records for e in r.source_event_ids))
    if req.dry_run:
        namespaces = {r.namespace for r in records} if records is not None else {req.namespace}
        embedded = set().union(*(storage.embedded_ids(ns) for ns in namespaces if ns))
        return jsonify(
            dry_run=True,
            records=len(ids),
            embeddings=sum(1 for i in ids if i in embedded),
            events=storage.count_events(event_ids) if event_ids else 0,
            record_ids=ids[:100],
        )
    with storage.transaction() as tx:
        deleted = tx.delete_memory_records(ids)
        events = tx.delete_events(event_ids) if event_ids else 0
        if deleted:
            security.audit(tx, "bulk_delete", req.namespace, deleted)
    return jsonify(dry_run=False, records=len(deleted), events=events, record_ids=deleted[:100])


# --- context preview ------------------------------------------------------------------------


@bp.get("/v1/context/preview")
def context_preview() -> Response:
    """What the hooks would inject now: the session-start index, and for ``prompt`` the
    prompt-time block with every candidate the search weighed. Nothing is stored."""
    args = query(ContextPreviewQuery)
    namespace, prompt = args.namespace, args.prompt
    rt = current.runtime()
    read_files = current.reads_client_files()  # as the hooks check this client's code
    root = current.project_root(namespace) if read_files else None
    index = rt.retriever.session_index(namespace, read_files=read_files, root=root)
    body: dict[str, Any] = {
        "index": {
            "context": index.context,
            "used_bytes": index.used_bytes,
            "budget_bytes": rt.settings.context_max_bytes,
        },
        "prompt": None,
    }
    if prompt:
        event = _prompt_event(namespace, prompt)
        block = rt.retriever.for_prompt(
            namespace, event, audit=False, read_files=read_files, root=root
        )
        injected = block.records
        why = {c["record_id"]: c for c in block.candidates or []}
        # The same search the gate weighed, with each hit's record and the gate's verdict.
        hits = rt.retriever.search(namespace, event, limit=PROMPT_CANDIDATES).to_json()["items"]
        candidates = [
            {
                **hit,
                "injected": hit["record"]["record_id"] in injected,
                "reason": why.get(hit["record"]["record_id"], {}).get("skipped"),
            }
            for hit in hits
        ]
        context = block.context
        body["prompt"] = {
            "context": context,
            "used_bytes": len(context.encode()),
            "budget_bytes": rt.settings.prompt_max_bytes,  # the prompt hook's, not the index's
            "records": injected,
            "latency_ms": block.latency_ms,
            "candidates": candidates,
        }
    return jsonify(body)


def _prompt_event(namespace: str, prompt: str) -> Event:
    """The event a prompt hook would build (never stored): retrieval sees what it sees."""
    actor = namespace.split("/")[2]
    return Event(
        event_id=new_ulid(),
        session_id="viewer-preview",
        actor_id=actor,
        namespace=namespace,
        kind="prompt",
        body={"type": "text", "content": prompt},  # type: ignore[arg-type]
        valid_time=utcnow(),
        source={"surface": "viewer"},  # type: ignore[arg-type]
    )


# --- the token hand-off ---------------------------------------------------------------------


@bp.post("/ui/token")
def ui_token() -> Response:
    """The token for a one-time code ``wakemark ui`` issued (no bearer token: the page has
    none yet)."""
    # Loopback only: the code is for a browser on the server's machine.
    if request.remote_addr not in ("127.0.0.1", "::1"):
        raise ApiError(403, "codes are exchanged from this machine only", code="forbidden")
    code = json_object().get("code")
    if not isinstance(code, str) or not handoff.redeem(current.runtime().settings, code):
        raise ApiError(
            403, "unknown, used or expired code: run `wakemark ui` again", code="invalid_code"
        )
    return jsonify(token=security.ensure_token(current.runtime().settings))

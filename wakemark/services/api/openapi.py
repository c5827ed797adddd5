"""The OpenAPI 3.1 document, built from one declaration per route and the pydantic models.

``ROUTES`` is the contract: method, Flask rule, request body, query model (the same one
the view parses with ``params.query``), responses and the purpose shown in docs/api.md.
``tests/api/test_openapi.py`` fails when a Flask rule has no declaration (or the other
way round), and the route table of docs/api.md is ``route_table()`` verbatim. Served public at
``GET /openapi.json``: it describes the API, holds no user content, and lets tools
(schemathesis, client generators) discover the API without a token.

``python -m wakemark.services.api.openapi`` prints the document; ``--table`` the table.
"""

from __future__ import annotations

import json
import re
import sys
from dataclasses import dataclass, field
from functools import cache
from typing import Any

from flask import Blueprint, Response, jsonify
from pydantic import BaseModel, TypeAdapter

from wakemark.services import agents
from wakemark.services.api import schemas as s
from wakemark.services.api.ingest import EventBatch
from wakemark.services.api.resources import MoveProject, NewMemory, RecordPatch
from wakemark.services.api.search import Retire
from wakemark.services.api.viewer import BulkDelete
from wakemark.shared import __version__
from wakemark.shared.models import (
    MAX_BATCH,
    MAX_REQUEST_BYTES,
    Event,
    MemoryRecord,
    Retrieval,
    StoredEvent,
)

bp = Blueprint("openapi", __name__)

TEXT = "text"  # a response of Prometheus text instead of JSON
NDJSON = "ndjson"  # a stream of JSON lines
HTML = "html"  # the viewer's page and its static files
ANY_OBJECT: dict[str, Any] = {"type": "object"}
_REF = "#/components/schemas/{model}"
_PARAM = re.compile(r"<(?:[^<>:]+:)?([^<>]+)>")  # <path:name> -> name


@dataclass(frozen=True)
class Route:
    method: str
    rule: str  # as Flask writes it: /v1/memories/<record_id>
    purpose: str  # Markdown, for the spec's description and the docs/api.md table
    responses: dict[int, Any]  # status -> model, type, schema dict, TEXT, or None (no body)
    body: Any = None
    query: type[BaseModel] | None = None
    public: bool = False
    headers: dict[str, str] = field(default_factory=dict)  # optional request headers
    not_found: bool = False  # a 404 besides path parameters (a record named in the query)
    conflict: bool = False  # a 409: the write clashes with what is stored

    @property
    def path(self) -> str:
        return _PARAM.sub(r"{\1}", self.rule)


ROUTES: tuple[Route, ...] = (
    Route(
        "POST", "/v1/events",
        f"one event, or `{{\"events\": [...]}}` (≤ {MAX_BATCH}, all or nothing) → 201 "
        "`{event_id, stored}` (batch: `{results: [{event_id, stored}]}`); an `event_id` "
        "repeated in the same namespace is stored once and answers `stored: false`; a "
        "scoped token's events carry its own `actor_id` (403 otherwise). `retrieve=true` on a "
        "`prompt` adds `retrieval: {context, records, latency_ms, retrieval_id}` (gated; "
        "`min_relevance=` 0–1 overrides `WAKEMARK_MIN_RELEVANCE`; `retrieval_id` names its "
        "audit row)",
        {201: s.EventAck | s.BatchAck},
        body=Event | EventBatch, query=s.IngestQuery,
    ),
    Route(
        "POST", "/v1/hooks/<agent>",
        f"an agent's own hook payload ({', '.join(f'`{a}`' for a in agents.names())}); answers in "
        "that agent's hook-output format (200, or 204 with an empty body for Claude Code "
        "when there is nothing to add). Optional headers `X-Wakemark-Project`, "
        "`X-Wakemark-Actor`; `?event=` names the hook when the payload does not. When the "
        "project is ignored, nothing is stored and the reply carries `X-Wakemark-Ignored` "
        "(why). A payload its hook cannot be mapped from is answered the same way, stored "
        "nowhere, and counted in `wakemark_hook_capture_misses_total{agent,reason}`. "
        "The forwarder's `X-Wakemark-Edited` (`path=sha256;…`: the files a tool use wrote, "
        "hashed just after it; docs/team-server.md) is kept with the tool-use events as "
        "`file_hashes` by a server that does not read the client's files; a malformed one "
        "answers 400 `bad_edited_hashes`",
        {200: ANY_OBJECT, 204: None},
        body=ANY_OBJECT, query=s.HookQuery,
        headers={
            "X-Wakemark-Project": "the project directory (else the payload's `cwd`)",
            "X-Wakemark-Actor": "who is working (else the server's user)",
        },
    ),
    Route(
        "GET", "/v1/search",
        "hybrid search → `{items: [{record, match_source, score, relevance, code?}], latency_ms, "
        "degraded}`; `match_source` is `fts`, `semantic`, `trigram`, `hybrid` or `session` "
        "(next to the best hit in its session); "
        "`relevance` 0–1 is the gate's; `namespace` may be an actor prefix `/actor/<actor>/` "
        "(all projects); "
        "`limit` 1–100 (10); `min_relevance` 0–1 keeps only hits that reach it (unset: all, "
        "ranked); hits are current records: `superseded=true` adds `superseded`, their "
        "older versions",
        {200: s.SearchResult}, query=s.SearchQuery,
    ),
    Route(
        "GET", "/v1/memories/code",
        "each listed record (`ids`, comma-separated, at most 100) checked against the "
        "project's files now → `{checked, note, items: {record_id: {state, paths, "
        "identifiers}}}`; records citing no file, or outside `namespace`, are left out; "
        "`checked` is false (and `items` empty) unless the client is the server's own user",
        {200: s.CodeStates}, query=s.CodeStateQuery,
    ),
    Route(
        "GET", "/v1/memories/anchors",
        "a page of the project's current records with their code anchors, for a client "
        "that checks them against its own files (`wakemark verify` on a team server's "
        "client) → `{items: [{record_id, title, files: [{path, sha256, blob}], "
        "identifiers}], next}`; `namespace` one project; `limit` 1–500 (500); the next "
        "page is `after=<next>`; records citing no project file are not listed",
        {200: s.AnchorPage}, query=s.AnchorsQuery,
    ),
    Route(
        "POST", "/v1/memories/retire",
        f"`{{namespace, ids}}` (1–{s.MAX_RETIRE_IDS} ids): deletes records a client found "
        "gone from its files (`wakemark verify --retire --yes`), all or none: 404 "
        "`not_found` unless each is a current record of that project; one audit entry "
        "`retire` → `{retired}`",
        {200: s.Retired}, body=Retire, not_found=True,
    ),
    Route(
        "GET", "/v1/context",
        "the session-start index (pinned, then recent) within a byte budget (default "
        f"`WAKEMARK_CONTEXT_MAX_BYTES`, at most {s.MAX_CONTEXT_BYTES}) → "
        "`{context, used_bytes}`; for the server's own user, checked against the code as the "
        "hooks' is",
        {200: s.ContextResult}, query=s.ContextQuery,
    ),
    Route(
        "GET", "/v1/memories",
        "records newest first → `{items, total, limit, next}`; `limit` 1–100 (50); the next "
        "page is `after=<next>` (a keyset: a deep page costs what the first does); an "
        "`offset` other than 0 answers 400; only current records (a record superseded by "
        "a newer one about its subject is not listed): `superseded=true` adds `superseded`, "
        "their older versions",
        {200: s.MemoryPage}, query=s.MemoriesQuery,
    ),
    Route(
        "POST", "/v1/memories",
        "write a record directly (MCP `remember`, import): `{namespace, title, summary, "
        "facts?, concepts?, files_touched?, observation_type?, pinned?}` → 201 "
        "`{record_id}`; embedded later like any record",
        {201: s.Created}, body=NewMemory,
    ),
    Route(
        "GET", "/v1/memories/<record:record_id>",
        "one record, with `source_event_ids` (its provenance); a superseded id answers "
        "its version, with `superseded_by`, `current_id` and `superseded_at`",
        {200: s.RecordOrVersion},
    ),
    Route(
        "GET", "/v1/memories/<record:record_id>/history",
        "a record's history: the older versions of its subject, newest first, each with "
        "`superseded_by` and `superseded_at` → `{record_id, current_id, items}`; for a "
        "superseded id, the history of its subject's current record",
        {200: s.History},
    ),
    Route(
        "POST", "/v1/memories/<record:record_id>/split",
        "undo a wrong merge: the superseded version is a current record again, with the "
        "versions it had replaced; the rest of the chain stays → the restored record; 404 "
        "if the id is not a superseded version",
        {200: MemoryRecord},
    ),
    Route(
        "PATCH", "/v1/memories/<record:record_id>",
        "`{pinned?, title?, summary?, facts?}` → the updated record; a corrected text is "
        "re-indexed at once, marked `edited_at` and embedded again",
        {200: MemoryRecord}, body=RecordPatch,
    ),
    Route(
        "DELETE", "/v1/memories/<record:record_id>",
        "deletes the record, its vector and its full-text entry → 204; 404 if unknown",
        {204: None},
    ),
    Route(
        "GET", "/v1/timeline",
        "the records around one, in the order the work happened → `{items}`; "
        "`before`/`after` 0–50 (5)",
        {200: s.RecordList}, query=s.TimelineQuery, not_found=True,
    ),
    Route(
        "GET", "/v1/events",
        "events newest first → `{items}`; `limit` 1–100 (50)",
        {200: s.EventList}, query=s.EventsQuery,
    ),
    Route(
        "GET", "/v1/events/<event_id>",
        "one stored event, with `transaction_time` and `turn_id`",
        {200: StoredEvent},
    ),
    Route(
        "GET", "/v1/projects",
        "`[{namespace, project_id, display_name, project_path, event_count, memory_count, "
        "last_activity}]`; `project_path` is the root its newest event named (or null)",
        {200: list[s.Project]},
    ),
    Route(
        "POST", "/v1/projects/move",
        "`{from, to, project_path?, dry_run?}`: a project whose directory was moved or "
        "renamed (`wakemark move`): every row of the namespace `from` (records with their "
        "vectors, versions and anchors, turns, events, retrieval audit) moves into `to` in "
        "one transaction, merged with what `to` holds; `project_path` becomes the "
        "project's recorded root; the token must cover both; `dry_run: true` counts and "
        "writes nothing; 404 `not_found` if `from` holds nothing, 409 `conflict` (nothing "
        "moved) if `from` is `to` or a session has an open turn in both; one audit "
        "entry `move`, committed with the move → `{moved: {records, versions, anchors, "
        "turns, events, retrievals}, "
        "from, to, dry_run}`",
        {200: s.Moved}, body=MoveProject, not_found=True, conflict=True,
    ),
    Route(
        "GET", "/v1/memories/<record:record_id>/source",
        "a record's provenance: the turns it came from (prompt, tool uses with command, "
        "exit code and files, final answer) and the session's turns that kept no record, "
        "with the reason → `{record_id, source_event_ids, missing_event_ids, turns, "
        "skipped_turns}`",
        {200: ANY_OBJECT},
    ),
    Route(
        "POST", "/v1/memories/delete",
        "bulk delete of `ids`, or of a filter (`namespace` with `type`, `before`, "
        "`after`, `session_id`); `dry_run: true` answers what it would destroy "
        "(`records`, `embeddings`, `events`) and deletes nothing; `with_events` also "
        "deletes the records' source events; one transaction → `{dry_run, records, "
        "events, record_ids}`",
        {200: ANY_OBJECT}, body=BulkDelete,
    ),
    Route(
        "GET", "/v1/context/preview",
        "what the hooks would inject now: the session-start index with its bytes and "
        "budget, and for `prompt` the gated block with every candidate, its relevance and "
        "why it was or was not injected; stores nothing",
        {200: ANY_OBJECT}, query=s.ContextPreviewQuery,
    ),
    Route(
        "GET", "/ui",
        "the [viewer](#viewer)'s page: no token needed (it holds no data; it reads the "
        "token from the URL fragment), loopback `Host` still required",
        {200: HTML}, public=True,
    ),
    Route("GET", "/ui/", "the same page", {200: HTML}, public=True),
    Route(
        "GET", "/ui/static/<path:name>",
        "the viewer's scripts and styles (shipped in the wheel; no CDN)",
        {200: HTML}, public=True,
    ),
    Route(
        "POST", "/ui/token",
        "`{code}` → `{token}`: the viewer trades the one-time code `wakemark ui` put in "
        "its address for the token (loopback clients only; a code works once, within "
        "60 s); 403 `invalid_code` otherwise",
        {200: ANY_OBJECT, 403: None}, body=ANY_OBJECT, public=True,
    ),
    Route(
        "GET", "/v1/retrievals",
        "audit rows of prompt-time retrievals, newest first → `{items: [{retrieval_id, "
        "event_id, namespace, session_id, created_at, decision, reason, mode, "
        "prompt_relevance, min_prompt_relevance, min_relevance, latency_ms, bytes, "
        "injected, candidates: [{record_id, rank, "
        "match_source, score, relevance, evidence, injected, skipped}]}], next}`; `limit` "
        "1–100 (50); the next page is `after=<next>`",
        {200: s.RetrievalList}, query=s.RetrievalsQuery,
    ),
    Route(
        "GET", "/v1/retrievals/sessions",
        "the audit summed per session, most recent prompt first → `{items: [{namespace, "
        "session_id, prompts, injected, records, bytes, mean_latency_ms, first_at, "
        "last_at}], next}`; `limit` 1–100 (20); the next page is `after=<next>`",
        {200: s.RetrievalSessionList}, query=s.RetrievalSessionsQuery,
    ),
    Route(
        "GET", "/v1/retrievals/<retrieval_id>",
        "one audit row; 404 if unknown",
        {200: Retrieval},
    ),
    Route(
        "GET", "/v1/export",
        "the [export file](#export-format), streamed (`application/x-ndjson`); `namespace` "
        "a namespace or actor prefix, absent for all; `events`, `vectors` `true`/`false` "
        "(false). A failure mid-stream ends the body without its `end` line",
        {200: NDJSON}, query=s.ExportQuery,
    ),
    Route(
        "GET", "/v1/stats",
        "`{events, memories, embedded, pending_extraction, pending_embedding}`; the "
        "pipeline has caught up when both `pending_*` are 0",
        {200: s.Stats}, query=s.StatsQuery,
    ),
    Route(
        "GET", "/health",
        "no user content; without a token only `{status, version}`; a scoped token adds "
        "`backend`, `embedder: {state}` and its scope's `pending` and `gate`; the bootstrap "
        "token sees `{status, version, backend, pending: {extraction, "
        "embedding}, skipped: {<reason>: turns}, database: {bytes}, gate: {prompts, "
        "injected, injected_share, mean_records, mean_bytes, mean_latency_ms}, dropped: "
        "{ignored_project}, capture: {stop_without_answer, file_reads_refused}, jobs: {mode, "
        "queue_depth}, embedder: {state, model, reason?, switch?}, search: {p50_ms, p95_ms, "
        "degraded_rate, ..., "
        "prompts: {prompts, injected_share, mean_records, mean_bytes}}, llm: {enabled, "
        "state, tokens_used, budget, ...}}`; `gate` sums the stored audit (all processes, "
        "since it began), `search.prompts`, `dropped` and `capture` count this process "
        "since it started; 503 with `status: degraded` when the database is unreachable",
        {200: s.Health, 503: s.Health}, public=True,
    ),
    Route(
        "GET", "/v1/audit",
        "bootstrap token only: the audit log, newest first → `{items: [{id, at, who, "
        "action, namespace, targets, count}]}`; `limit` 1–1000 (100)",
        {200: ANY_OBJECT}, query=s.AuditQuery,
    ),
    Route(
        "GET", "/metrics",
        "bootstrap token only; Prometheus text: requests by method, route and status, "
        "search counters and latencies, prompts seen, injected, records and bytes "
        "injected, events dropped, `wakemark_hook_file_reads_refused_total` (per process)",
        {200: TEXT},
    ),
    Route(
        "GET", "/openapi.json",
        "public: this API as an OpenAPI 3.1 document, generated from the route "
        "declarations and pydantic models (`services/api/openapi.py`)",
        {200: ANY_OBJECT}, public=True,
    ),
)  # fmt: skip

_ERRORS = {
    400: "a bad query parameter or header, or a body that is not strict JSON (`bad_json`)",
    401: "missing or wrong bearer token",
    403: "`Host` is not loopback, or a cross-origin state-changing request",
    404: "no such record, event or agent",
    409: "the write clashes with what is stored; nothing was written",
    405: "the record id names another route (`/v1/memories/code`) that takes no such method",
    413: f"a request over {MAX_REQUEST_BYTES // (1024 * 1024)} MiB",
    415: "a body that is not `application/json` (UTF-8)",
    422: "a body that fails validation (nothing is stored)",
    503: "the database is unreachable; `Retry-After: 1`",
    507: "SQLite: the disk is full, nothing was written; `Retry-After: 5`",
}


def _siblings() -> list[str]:
    """The names of the routes beside ``/v1/memories/<record_id>``."""
    rules = {route.rule for route in ROUTES}
    return sorted(r.rsplit("/", 1)[1] for r in rules if re.fullmatch(r"/v1/memories/\w+", r))


def _error_statuses(route: Route) -> list[int]:
    statuses = [403]
    if not route.public:
        statuses.append(401)
    if route.query is not None or route.body is not None:
        statuses.append(400)
    if "<" in route.rule or route.not_found:
        statuses.append(404)
    if route.conflict:
        statuses.append(409)
    if "<record:" in route.rule:  # a sibling route answers for its own name
        statuses += [400, 405]
    if route.body is not None:
        statuses += [413, 415, 422]
    if route.rule.startswith("/v1/"):
        statuses.append(503)
        if route.method != "GET":
            statuses.append(507)
    return sorted(set(statuses))


class _Components:
    """Collects every model's schema under ``#/components/schemas``."""

    def __init__(self) -> None:
        self.schemas: dict[str, Any] = {}

    def schema(self, kind: Any, mode: str) -> dict[str, Any]:
        if isinstance(kind, dict):
            return kind
        found = TypeAdapter(kind).json_schema(mode=mode, ref_template=_REF)  # type: ignore[arg-type]
        for name, sub in found.pop("$defs", {}).items():
            self._add(name, sub)
        if isinstance(kind, type) and issubclass(kind, BaseModel):
            self._add(kind.__name__, found)
            return {"$ref": _REF.format(model=kind.__name__)}
        return found

    def _add(self, name: str, sub: dict[str, Any]) -> None:
        # One model, two modes: the same schema unless a default or alias differs.
        if self.schemas.setdefault(name, sub) != sub:
            raise ValueError(f"model {name} has different request and response schemas")


def _parameters(route: Route, components: _Components) -> list[dict[str, Any]]:
    params: list[dict[str, Any]] = []
    for name in _PARAM.findall(route.rule):
        schema: dict[str, Any] = {"type": "string", "maxLength": 64}
        if name == "agent":
            schema = {"type": "string", "enum": list(agents.names())}
        elif "<record:" in route.rule:
            # A sibling route's name (``/v1/memories/anchors``) is no record id.
            schema = {**schema, "not": {"enum": _siblings()}}
        params.append({"name": name, "in": "path", "required": True, "schema": schema})
    if route.query is not None:
        schema = route.query.model_json_schema(ref_template=_REF)
        for name, sub in schema.pop("$defs", {}).items():
            components._add(name, sub)
        for name, prop in schema["properties"].items():
            prop = {k: v for k, v in prop.items() if k not in ("title", "description")}
            if prop.get("default", 0) is None:
                del prop["default"]
            # An optional parameter is left out, never sent as null.
            options = [o for o in prop.pop("anyOf", []) if o != {"type": "null"}]
            if options:
                prop.update(options[0] if len(options) == 1 else {"anyOf": options})
            param = {"name": name, "in": "query", "required": name in schema.get("required", [])}
            param.update(schema=prop, description=route.query.model_fields[name].description)
            params.append(param)
    for name, description in route.headers.items():
        header = {"type": "string"}
        params.append({"name": name, "in": "header", "description": description, "schema": header})
    return params


def _operation(route: Route, components: _Components) -> dict[str, Any]:
    slug = re.sub(r"[^a-z0-9]+", "_", route.path).strip("_")
    op: dict[str, Any] = {
        "operationId": f"{route.method.lower()}_{slug}",
        "description": route.purpose,
    }
    params = _parameters(route, components)
    if params:
        op["parameters"] = params
    if route.body is not None:
        body = components.schema(route.body, "validation")
        op["requestBody"] = {"required": True, "content": {"application/json": {"schema": body}}}
    responses: dict[str, Any] = {}
    for status, kind in route.responses.items():
        if kind is None:
            responses[str(status)] = {"description": "no content"}
        elif kind == TEXT:
            content = {"text/plain": {"schema": {"type": "string"}}}
            responses[str(status)] = {"description": "Prometheus text format", "content": content}
        elif kind == HTML:
            content = {"text/html": {"schema": {"type": "string"}}}
            responses[str(status)] = {"description": "the viewer", "content": content}
        elif kind == NDJSON:
            content = {"application/x-ndjson": {"schema": {"type": "string"}}}
            responses[str(status)] = {"description": "one JSON object a line", "content": content}
        else:
            schema = components.schema(kind, "serialization")
            content = {"application/json": {"schema": schema}}
            responses[str(status)] = {"description": "success", "content": content}
    for status in _error_statuses(route):
        responses.setdefault(str(status), {"$ref": f"#/components/responses/Error{status}"})
    op["responses"] = responses
    if route.public:
        op["security"] = []
    return op


@cache
def build_spec() -> dict[str, Any]:
    components = _Components()
    error_ref = components.schema(s.ErrorBody, "serialization")
    paths: dict[str, dict[str, Any]] = {}
    for route in ROUTES:
        paths.setdefault(route.path, {})[route.method.lower()] = _operation(route, components)
    content = {"application/json": {"schema": error_ref}}
    responses = {
        f"Error{status}": {"description": why, "content": content}
        for status, why in _ERRORS.items()
    }
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "wakemark",
            "version": __version__,
            "description": "Local-first persistent memory for AI coding agents. Errors are "
            '`{"error": code, "message": ..., "details"?: [...]}`; nothing a client '
            "sends yields a 500.",
        },
        "servers": [{"url": "http://127.0.0.1:37800"}],
        "security": [{"bearer": []}],
        "paths": paths,
        "components": {
            "schemas": dict(sorted(components.schemas.items())),
            "responses": responses,
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
        },
    }


def route_table(spec: dict[str, Any]) -> str:
    """The route table of docs/api.md: one row per operation, in declaration order."""
    rows = ["| route | purpose |", "|---|---|"]
    for path, item in spec["paths"].items():
        flask_path = re.sub(r"\{([^}]+)\}", r"<\1>", path)
        for method, op in item.items():
            names = [p["name"] for p in op.get("parameters", []) if p["in"] == "query"]
            query = ("?" + "&".join(f"{n}=" for n in names)) if names else ""
            purpose = op["description"].replace("|", "\\|")
            rows.append(f"| `{method.upper()} {flask_path}{query}` | {purpose} |")
    return "\n".join(rows) + "\n"


@bp.get("/openapi.json")
def openapi_json() -> Response:
    return jsonify(build_spec())


def main(argv: list[str]) -> int:
    spec = build_spec()
    sys.stdout.write(route_table(spec) if "--table" in argv else json.dumps(spec, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

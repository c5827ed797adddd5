"""The API's wire shapes that are not storage models: query parameters and responses.

Query models are what the views parse ``request.args`` into (``params.query``) and what
``openapi`` documents, so a bound lives in one place. Response models only describe:
views build their JSON directly, and the schemathesis test checks it against them.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field

from wakemark.shared.models import (
    NAMESPACE_MAX,
    NAMESPACE_PATTERN,
    NAMESPACE_PREFIX_RE,
    RECORD_ID_PATTERN,
    MemoryRecord,
    ObservationType,
    Retrieval,
    StoredEvent,
)

MAX_CONTEXT_BYTES = 9500  # the agents' hook output limit, with headroom
MAX_QUERY_CHARS = 4000
_DIGITS = re.compile(r"[0-9]{1,10}")
_FLAGS = {"1": True, "true": True, "yes": True, "0": False, "false": False, "no": False}
# Postgres text cannot hold U+0000, so no string parameter may carry one (``%00``).
NO_NUL = r"^[^\x00]*$"
NAMESPACE_OR_PREFIX = "^" + NAMESPACE_PREFIX_RE.pattern.replace("[^/]", "[^/\\x00]") + "$"


def _whole_number(value: Any) -> Any:
    # Plain ASCII digits only: int() would also take "+5", " 5", "1_0" and "１".
    if isinstance(value, str) and not _DIGITS.fullmatch(value):
        raise ValueError("must be a whole number (digits only)")
    return value


def _flag(value: Any) -> Any:
    if isinstance(value, str):
        if value.lower() not in _FLAGS:
            raise ValueError("must be true or false")
        return _FLAGS[value.lower()]
    return value


_digits = BeforeValidator(_whole_number)
# Bounds go before the validator in an optional parameter's Annotated, or pydantic writes
# them into its JSON schema as "ge"/"le" instead of minimum/maximum.
QueryInt = Annotated[int, _digits]
_ORIGIN = datetime.min.replace(tzinfo=UTC)
_MICROSECOND = timedelta(microseconds=1)
_LAST = (datetime.max.replace(tzinfo=UTC) - _ORIGIN) // _MICROSECOND


def cursor(at: datetime, key: str) -> str:
    """A keyset page's ``next``: where the page ended, ``<µs since 0001-01-01 UTC>,<id>``.

    Every string the published pattern admits names a time (a count past the last one
    means "after everything"), so no schema-valid cursor is one the server must refuse.
    """
    return f"{(at - _ORIGIN) // _MICROSECOND},{key}"


def parse_cursor(value: str) -> tuple[datetime, str]:
    at, _, key = value.partition(",")
    return _ORIGIN + min(int(at), _LAST) * _MICROSECOND, key


_CURSOR = r"^[0-9]{1,18},[^\x00]{1,200}$"
Cursor = Annotated[str, Field(max_length=300, pattern=_CURSOR)]
QueryBool = Annotated[bool, BeforeValidator(_flag)]
NamespaceOrPrefix = Annotated[str, Field(max_length=NAMESPACE_MAX, pattern=NAMESPACE_OR_PREFIX)]
# One project's namespace as a query parameter: ``Namespace`` without NUL (a body's NUL is
# replaced when it is parsed, a query string's is not).
ProjectNamespace = Annotated[
    str, Field(max_length=NAMESPACE_MAX, pattern=NAMESPACE_PATTERN.replace("[^/]", "[^/\\x00]"))
]
_NS_DOC = "a namespace `/actor/<actor>/project/<id>/`, or an actor prefix `/actor/<actor>/`"


class Query(BaseModel):
    """Unknown parameters are ignored (a client may add cache-busters and the like)."""

    model_config = ConfigDict(extra="ignore", frozen=True)


Relevance = Annotated[float, Field(ge=0.0, le=1.0, allow_inf_nan=False)]


class IngestQuery(Query):
    retrieve: QueryBool = Field(False, description="on a `prompt`: add retrieval context")
    min_relevance: Relevance | None = Field(
        None,
        description="with `retrieve`: inject only hits this relevant (default "
        "`WAKEMARK_MIN_RELEVANCE`)",
    )


class HookQuery(Query):
    event: Annotated[str, Field(max_length=100, pattern=NO_NUL)] | None = Field(
        None, description="hook name, for agents whose payload lacks one"
    )


MAX_CODE_IDS = 100  # a page of the viewer's list
_RECORD_ID = RECORD_ID_PATTERN.strip("^$")


class CodeStateQuery(Query):
    namespace: NamespaceOrPrefix = Field(description=_NS_DOC)
    ids: str = Field(
        pattern=rf"^(?:{_RECORD_ID}(?:,{_RECORD_ID}){{0,{MAX_CODE_IDS - 1}}})?$",
        description=f"record ids, comma-separated (at most {MAX_CODE_IDS})",
    )


MAX_ANCHORS_PAGE = 500  # records a page of ``GET /v1/memories/anchors`` holds
MAX_RETIRE_IDS = 1000  # ids one ``POST /v1/memories/retire`` takes


class AnchorsQuery(Query):
    namespace: ProjectNamespace = Field(description="the project `/actor/<actor>/project/<id>/`")
    limit: QueryInt = Field(MAX_ANCHORS_PAGE, ge=1, le=MAX_ANCHORS_PAGE, description="page size")
    after: Annotated[str, Field(pattern=RECORD_ID_PATTERN)] | None = Field(
        None, description="the previous page's `next`"
    )


class SearchQuery(Query):
    namespace: NamespaceOrPrefix = Field(description=_NS_DOC)
    q: str = Field(
        min_length=1, max_length=MAX_QUERY_CHARS, pattern=NO_NUL, description="search text"
    )
    limit: QueryInt = Field(10, ge=1, le=100, description="most hits returned")
    type: ObservationType | None = Field(None, description="only records of this type")
    days: Annotated[int, Field(ge=1, le=36_500), _digits] | None = Field(
        None, description="only the last N days"
    )
    min_relevance: Relevance | None = Field(
        None, description="only hits whose relevance (0-1) reaches this"
    )
    superseded: QueryBool = Field(
        False, description="with `superseded`: the older versions of the hits' records"
    )


class ContextQuery(Query):
    namespace: NamespaceOrPrefix = Field(description=_NS_DOC)
    max_bytes: Annotated[int, Field(ge=1, le=MAX_CONTEXT_BYTES), _digits] | None = Field(
        None, description="byte budget (default `WAKEMARK_CONTEXT_MAX_BYTES`)"
    )


class MemoriesQuery(Query):
    namespace: NamespaceOrPrefix = Field(description=_NS_DOC)
    limit: QueryInt = Field(50, ge=1, le=100, description="page size")
    after: Cursor | None = Field(None, description="the `next` of the previous page")
    # Declared so a client still paging by offset gets a 400, not the first page forever.
    offset: QueryInt = Field(0, ge=0, le=0, description="gone: page with `after`")
    count: QueryBool = Field(True, description="false: no `total` (cheaper on a large project)")
    superseded: QueryBool = Field(
        False, description="with `superseded`: the older versions of the page's records"
    )


class EventsQuery(Query):
    namespace: NamespaceOrPrefix | None = Field(None, description=_NS_DOC)
    session_id: Annotated[str, Field(min_length=1, max_length=200, pattern=NO_NUL)] | None = Field(
        None, description="one session"
    )
    limit: QueryInt = Field(50, ge=1, le=100, description="most events returned")


class TimelineQuery(Query):
    record_id: str = Field(
        min_length=1, max_length=64, pattern=NO_NUL, description="the record in the middle"
    )
    before: QueryInt = Field(5, ge=0, le=50, description="records before it")
    after: QueryInt = Field(5, ge=0, le=50, description="records after it")


class RetrievalsQuery(Query):
    namespace: NamespaceOrPrefix | None = Field(None, description=_NS_DOC)
    session_id: Annotated[str, Field(min_length=1, max_length=200, pattern=NO_NUL)] | None = Field(
        None, description="one session"
    )
    limit: QueryInt = Field(50, ge=1, le=100, description="most rows returned")
    after: Cursor | None = Field(None, description="the `next` of the previous page")


class RetrievalSessionsQuery(Query):
    namespace: ProjectNamespace = Field(description="one namespace `/actor/<actor>/project/<id>/`")
    limit: QueryInt = Field(20, ge=1, le=100, description="most sessions returned")
    after: Cursor | None = Field(None, description="the `next` of the previous page")


class ExportQuery(Query):
    namespace: NamespaceOrPrefix | None = Field(None, description=_NS_DOC + "; absent: all")
    events: QueryBool = Field(False, description="with the turns and their events")
    vectors: QueryBool = Field(False, description="with each record's vector")


class ContextPreviewQuery(Query):
    namespace: ProjectNamespace = Field(description="a namespace `/actor/<actor>/project/<id>/`")
    prompt: str | None = Field(
        None, max_length=MAX_QUERY_CHARS, pattern=NO_NUL, description="a prompt to preview"
    )


class AuditQuery(Query):
    limit: QueryInt = Field(100, ge=1, le=1000, description="most entries returned")


class StatsQuery(Query):
    namespace: NamespaceOrPrefix | None = Field(None, description=_NS_DOC)


# --- responses -----------------------------------------------------------------------


class ErrorBody(BaseModel):
    error: str = Field(description="machine-readable code, e.g. `bad_json`")
    message: str
    details: list[dict[str, Any]] | None = Field(
        None, description="pydantic's `{loc, msg, type}` per problem (never the input)"
    )


class PromptContext(BaseModel):
    context: str
    records: list[str]
    latency_ms: float
    retrieval_id: str | None = Field(None, description="its audit row: `/v1/retrievals/<id>`")


class EventAck(BaseModel):
    event_id: str
    stored: bool = Field(description="false: an event with this id was already stored")
    retrieval: PromptContext | None = Field(None, description="with `retrieve=true` on a prompt")


class StoredAck(BaseModel):
    event_id: str
    stored: bool


class BatchAck(BaseModel):
    results: list[StoredAck]


class EventList(BaseModel):
    items: list[StoredEvent]


class RecordList(BaseModel):
    items: list[MemoryRecord]


class Version(BaseModel):
    """An older version of a record: a newer record about its subject replaced it."""

    record: MemoryRecord
    current_id: str = Field(description="the current record of its subject")
    superseded_by: str = Field(description="the record that replaced it")
    superseded_at: datetime


class RecordOrVersion(MemoryRecord):
    """A record as ``GET /v1/memories/<id>`` answers it: a superseded id answers its
    version, marked with what replaced it."""

    superseded_by: str | None = Field(None, description="set on a superseded version")
    current_id: str | None = Field(None, description="a version's current record")
    superseded_at: datetime | None = None


class MemoryPage(BaseModel):
    items: list[MemoryRecord]
    total: int | None = Field(description="null with `count=false`")
    limit: int
    next: str | None = Field(description="`after` for the next page; null after the last")
    superseded: list[Version] | None = Field(
        None, description="with `superseded=true`: the versions of `items`, newest first"
    )


class History(BaseModel):
    record_id: str
    current_id: str = Field(description="the current record of the subject")
    items: list[Version] = Field(description="the older versions, newest first")


class Created(BaseModel):
    record_id: str


class CodeState(BaseModel):
    state: Literal["current", "changed", "gone", "unchecked"]
    paths: list[str] = Field(description="the cited files changed or gone since capture")
    identifiers: list[str] = Field(description="cited names no cited file holds any more")


class SearchHit(BaseModel):
    record: MemoryRecord
    match_source: Literal["fts", "semantic", "trigram", "hybrid", "session"]
    score: float
    relevance: float = Field(ge=0.0, le=1.0, description="the relevance gate's estimate")
    code: CodeState | None = Field(
        default=None,
        description="the record checked against the project's files now (the local "
        "client only, records citing files)",
    )


class CodeStates(BaseModel):
    checked: bool = Field(description="false: this server does not read the client's files")
    note: str
    items: dict[str, CodeState] = Field(description="by record id; records citing files")


class FileAnchorJson(BaseModel):
    path: str = Field(description="relative to the project root")
    sha256: str | None = Field(description="the content's hash at capture; null: not known")
    blob: str | None = Field(description="the git blob id at capture, when known")


class RecordAnchors(BaseModel):
    record_id: str
    title: str
    files: list[FileAnchorJson]
    identifiers: list[str] = Field(description="names a cited file defined at capture")


class AnchorPage(BaseModel):
    items: list[RecordAnchors]
    next: str | None = Field(description="`after` for the next page; null: the last page")


class Moved(BaseModel):
    moved: dict[str, int] = Field(
        description="rows moved (or, in a dry run, that would move) by kind: records, "
        "versions, anchors, turns, events, retrievals"
    )
    from_: str = Field(alias="from")
    to: str
    dry_run: bool


class Retired(BaseModel):
    retired: list[str] = Field(description="the ids deleted (one gone meanwhile is left out)")


class SearchResult(BaseModel):
    items: list[SearchHit]
    latency_ms: float
    degraded: bool = Field(description="true: lexical only (embedder off or failing)")
    superseded: list[Version] | None = Field(
        None, description="with `superseded=true`: the versions of the hits' records"
    )


class RetrievalList(BaseModel):
    items: list[Retrieval]
    next: str | None = Field(description="`after` for the next page; null after the last")


class RetrievalSessionSummary(BaseModel):
    namespace: str
    session_id: str
    prompts: int
    injected: int = Field(description="prompts that got a block")
    records: int = Field(description="records injected over the session")
    bytes: int = Field(description="bytes injected over the session")
    mean_latency_ms: float
    first_at: datetime
    last_at: datetime


class RetrievalSessionList(BaseModel):
    items: list[RetrievalSessionSummary]
    next: str | None = Field(description="`after` for the next page; null after the last")


class ContextResult(BaseModel):
    context: str
    used_bytes: int


class Project(BaseModel):
    namespace: Annotated[str, Field(pattern=NAMESPACE_PATTERN)]
    project_id: str
    display_name: str
    project_path: str | None = Field(
        description="the project's root as its newest event named it; null if none did"
    )
    event_count: int
    memory_count: int
    last_activity: datetime | None


class Stats(BaseModel):
    model_config = ConfigDict(extra="allow")

    events: int
    memories: int
    embedded: int
    pending_extraction: int = Field(description="events in turns not yet extracted")
    pending_embedding: int = Field(description="records without an embedding yet")


class Health(BaseModel):
    """Only ``status`` and ``version`` without a token; a scoped token adds ``backend``,
    ``pending``, ``gate`` (its scope's) and ``embedder``; the bootstrap token all."""

    model_config = ConfigDict(extra="allow")

    status: Literal["ok", "degraded"]
    version: str
    backend: Literal["sqlite", "postgres"] | None = None
    pending: dict[str, int] | None = None
    database: dict[str, int] | None = Field(None, description="`{bytes}` the database takes")
    gate: dict[str, Any] | None = Field(None, description="totals of the stored retrieval audit")
    capture: dict[str, int] | None = None
    jobs: dict[str, Any] | None = None
    embedder: dict[str, Any] | None = None
    search: dict[str, Any] | None = None
    llm: dict[str, Any] | None = None

"""The two things wakemark stores: events (what an agent did) and memory records.

Events are the wire format posted by hooks; unknown fields are rejected so a typo in a
client is an error, not silently lost data. Records are what extraction produces and
retrieval returns; their embedding lives beside them in storage, never on the wire.
"""

from __future__ import annotations

import json
import re
from datetime import UTC, date, datetime
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    AwareDatetime,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    TypeAdapter,
    WithJsonSchema,
    field_validator,
)
from ulid import ULID

NAMESPACE_PATTERN = r"^/actor/[^/]+/project/[^/]+/$"
NAMESPACE_RE = re.compile(NAMESPACE_PATTERN)
NAMESPACE_PREFIX_RE = re.compile(r"/actor/[^/]+/(?:project/[^/]+/)?")
NAMESPACE_MAX = 500
ULID_PATTERN = r"^[0-9A-HJKMNP-TV-Z]{26}$"
RECORD_ID_PATTERN = r"^mr_[0-9A-HJKMNP-TV-Z]{26}$"
MAX_BODY_BYTES = 1024 * 1024
MAX_REQUEST_BYTES = 2 * 1024 * 1024
MAX_BATCH = 500
EMBEDDING_DIM = 384

EventKind = Literal["prompt", "tool_use", "session_summary", "note"]
ObservationType = Literal[
    "decision", "bugfix", "feature", "refactor", "discovery", "change", "note", "session_summary"
]
OBSERVATION_TYPES: tuple[str, ...] = ObservationType.__args__  # type: ignore[attr-defined]
Strategy = Literal["deterministic", "llm", "manual", "merged"]
Quality = Literal["full", "fallback"]

Namespace = Annotated[str, Field(max_length=NAMESPACE_MAX, pattern=NAMESPACE_PATTERN)]
UlidStr = Annotated[str, Field(pattern=ULID_PATTERN)]
RecordId = Annotated[str, Field(pattern=RECORD_ID_PATTERN)]
ShortStr = Annotated[str, Field(min_length=1, max_length=200)]
# A memory record's text fields, with their limits: shared by the record and the API's
# direct-write input so the two can never disagree.
Title = Annotated[str, Field(min_length=1, max_length=200)]
Summary = Annotated[str, Field(max_length=4000)]
Facts = Annotated[list[Annotated[str, Field(max_length=2000)]], Field(max_length=100)]
Concepts = Annotated[list[Annotated[str, Field(max_length=100)]], Field(max_length=50)]
Files = Annotated[list[Annotated[str, Field(max_length=1000)]], Field(max_length=200)]


_ISO_DATETIME = re.compile(r"\d{4}-\d{2}-\d{2}[Tt ]")


def _iso_datetime(value: Any) -> Any:
    # pydantic would also read 1700000000 or "1700000000" as a Unix time; the wire format
    # (and the schema the API publishes) is an ISO-8601 date-time string.
    if isinstance(value, datetime) or (isinstance(value, str) and _ISO_DATETIME.match(value)):
        return value
    raise ValueError("must be an ISO-8601 date-time with a UTC offset")


def _in_utc_range(value: datetime) -> datetime:
    # 0001-01-01T00:00+03:04 is a valid aware datetime whose UTC instant is before year 1:
    # storage writes times in UTC, so such a time must fail here, as input, not there. The
    # first and last representable days are refused whole, since only on them can an
    # offset leave that range, and the published schema can say "not that day" (its
    # pattern below) where it cannot say "not before this instant".
    if value.date() in (date.min, date.max):
        raise ValueError("must fall between 0001-01-02 and 9999-12-30")
    try:
        value.astimezone(UTC)
    except OverflowError:
        raise ValueError("must fall within years 1-9999 in UTC") from None
    return value


IsoDatetime = Annotated[
    AwareDatetime,
    BeforeValidator(_iso_datetime),
    AfterValidator(_in_utc_range),
    WithJsonSchema(
        {"type": "string", "format": "date-time", "pattern": r"^(?!0001-01-01|9999-12-31)"}
    ),
]


def new_ulid() -> str:
    return str(ULID())


def new_record_id() -> str:
    return "mr_" + new_ulid()


def utcnow() -> datetime:
    return datetime.now(UTC)


def is_namespace_prefix(value: str) -> bool:
    """A full namespace or an actor prefix (``/actor/x/``) usable for prefix matching."""
    return len(value) <= NAMESPACE_MAX and NAMESPACE_PREFIX_RE.fullmatch(value) is not None


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class TextBody(_Strict):
    type: Literal["text"]
    content: str


class MessageTurn(_Strict):
    role: str = Field(min_length=1, max_length=50)
    content: str


class MessageBody(_Strict):
    type: Literal["message"]
    turns: list[MessageTurn] = Field(min_length=1)


# A tool use's ``data`` key for the files it wrote, as the client hashed them just after
# the edit: project-relative path -> SHA-256 (None: not there). A server that does not
# read its clients' files anchors the turn's records to them (shared/retrieval/staleness).
FILE_HASHES = "file_hashes"
MAX_FILE_HASHES = 32
_SHA256 = re.compile(r"[0-9a-f]{64}")


def check_file_hashes(value: Any) -> dict[str, str | None]:
    """``value`` when it is a valid ``FILE_HASHES`` map; else ValueError, one line."""
    if not isinstance(value, dict):
        raise ValueError(f"{FILE_HASHES}: expected an object of path -> sha256")
    if len(value) > MAX_FILE_HASHES:
        raise ValueError(f"{FILE_HASHES}: more than {MAX_FILE_HASHES} files")
    for path, digest in value.items():
        parts = path.split("/")
        if not path or len(path) > 1000 or path.startswith("/") or ".." in parts or "\0" in path:
            raise ValueError(f"{FILE_HASHES}: {path[:100]!r} is not a project-relative path")
        if digest is not None and not (isinstance(digest, str) and _SHA256.fullmatch(digest)):
            raise ValueError(f"{FILE_HASHES}: {path[:100]!r}: expected a SHA-256 in hex or null")
    return value


class JsonBody(_Strict):
    type: Literal["json"]
    data: dict[str, Any]

    @field_validator("data")
    @classmethod
    def _file_hashes(cls, data: dict[str, Any]) -> dict[str, Any]:
        if FILE_HASHES in data:
            check_file_hashes(data[FILE_HASHES])
        return data


Body = Annotated[TextBody | MessageBody | JsonBody, Field(discriminator="type")]


class Source(_Strict):
    surface: str = Field(min_length=1, max_length=100)
    version: str | None = Field(default=None, max_length=100)
    project_path: str | None = Field(default=None, max_length=4096)


class Event(_Strict):
    event_id: UlidStr
    parent_event_id: UlidStr | None = None
    session_id: ShortStr
    actor_id: ShortStr
    namespace: Namespace
    kind: EventKind
    body: Body
    valid_time: IsoDatetime
    source: Source
    schema_version: Literal[1] = 1

    @field_validator("body")
    @classmethod
    def _body_size(cls, body: BaseModel) -> BaseModel:
        if len(body.model_dump_json().encode()) > MAX_BODY_BYTES:
            raise ValueError(f"serialized body exceeds {MAX_BODY_BYTES} bytes")
        return body

    def body_json(self) -> str:
        # model_copy(update=...) skips validation, so a body can arrive as a plain dict.
        body: Any = self.body
        return body.model_dump_json() if isinstance(body, BaseModel) else json.dumps(body)


class StoredEvent(Event):
    """An event as read back from storage."""

    transaction_time: datetime
    turn_id: str | None = None


_BODY_ADAPTER: TypeAdapter[TextBody | MessageBody | JsonBody] = TypeAdapter(Body)


def body_from_json(raw: str | bytes) -> TextBody | MessageBody | JsonBody:
    return _BODY_ADAPTER.validate_json(raw)


class MemoryRecord(_Strict):
    record_id: RecordId = Field(default_factory=new_record_id)
    namespace: Namespace
    title: Title
    summary: Summary = ""
    facts: Facts = Field(default_factory=list)
    concepts: Concepts = Field(default_factory=list)
    files_touched: Files = Field(default_factory=list)
    observation_type: ObservationType = "note"
    source_event_ids: list[UlidStr] = Field(default_factory=list, max_length=1000)
    strategy: Strategy = "deterministic"
    quality: Quality = "full"
    pinned: bool = False
    created_at: AwareDatetime = Field(default_factory=utcnow)
    edited_at: AwareDatetime | None = None  # set when a person corrected the text

    def embedding_text(self, cap: int = 10_000) -> str:
        """What gets embedded: title, summary, facts, concepts — capped."""
        parts = [self.title, self.summary, *self.facts, " ".join(self.concepts)]
        return "\n".join(p for p in parts if p)[:cap]

    @classmethod
    def stored(cls, **fields: Any) -> MemoryRecord:
        """A record read back from storage: every field given, each validated when it was
        written. What ``model_construct`` builds from them, without its per-field search
        for aliases and defaults (a search builds dozens of records)."""
        if fields.keys() != _RECORD_FIELDS:
            raise TypeError(f"a stored record has every field: {sorted(fields)}")
        record = cls.__new__(cls)
        object.__setattr__(record, "__dict__", fields)
        object.__setattr__(record, "__pydantic_fields_set__", set(_RECORD_FIELDS))
        object.__setattr__(record, "__pydantic_extra__", None)
        object.__setattr__(record, "__pydantic_private__", None)
        return record


_RECORD_FIELDS = frozenset(MemoryRecord.model_fields)


class RetrievalCandidate(_Strict):
    """One hit a prompt-time retrieval considered, as the audit keeps it (no text)."""

    record_id: str
    rank: int  # 0-based position in the search's ranking
    match_source: str
    score: float
    relevance: float
    evidence: dict[str, Any] | None = None
    injected: bool = False
    # Why a hit at or above the threshold was left out: seen | duplicate | budget | limit
    skipped: str | None = None


class Retrieval(_Strict):
    """The audit row of one prompt-time retrieval: what the relevance gate saw and did."""

    retrieval_id: UlidStr = Field(default_factory=new_ulid)
    event_id: UlidStr  # the prompt event
    namespace: Namespace
    session_id: ShortStr
    created_at: AwareDatetime = Field(default_factory=utcnow)
    decision: Literal["inject", "none"]
    reason: str
    mode: Literal["hybrid", "lexical"]  # lexical: the vector leg did not run
    prompt_relevance: float | None = None  # None: no candidates
    min_prompt_relevance: float | None = None  # None: a row written before the prompt gate
    min_relevance: float
    latency_ms: float
    bytes: int  # UTF-8 bytes of the injected block
    injected: list[str] = Field(default_factory=list)
    candidates: list[RetrievalCandidate] = Field(default_factory=list)

    def body_json(self) -> str:
        return self.model_dump_json(exclude=set(ROW_COLUMNS))

    def row(self) -> dict[str, Any]:
        """The audit table's columns (the rest is ``body``); ``created_at`` as a datetime,
        for each backend to encode."""
        return {c: getattr(self, c) for c in ROW_COLUMNS} | {"body": self.body_json()}


ROW_COLUMNS = ("retrieval_id", "event_id", "namespace", "session_id", "created_at")

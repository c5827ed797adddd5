"""Export and import: wakemark's data as versioned JSON Lines (format documented in
docs/data.md, "Export format").

Line 1 is a header; then every record (``record_id`` order), then every superseded version
of a record (``record_id`` order, after the records: each names its current one), then with
events every turn
(``turn_id`` order), each followed by its events ((valid_time, event_id) order); the
last line is an ``end`` trailer with the counts, so a cut-off file is detected. Every
value is written the same way on both backends (times in UTC with microseconds,
vectors as base64 little-endian float32), and the header holds no timestamp: export,
import anywhere, export again gives the same bytes.

Both directions stream: export reads keyset pages, import commits every
``IMPORT_BATCH`` lines, so memory stays flat however large the file.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Annotated, Any

import numpy as np
from pydantic import AfterValidator, AwareDatetime, BaseModel, ConfigDict, Field, ValidationError

from wakemark.shared.models import (
    EMBEDDING_DIM,
    MemoryRecord,
    Namespace,
    RecordId,
    ShortStr,
    StoredEvent,
    UlidStr,
    is_namespace_prefix,
)
from wakemark.shared.retrieval.staleness import MAX_FILES, MAX_IDENTIFIERS
from wakemark.shared.storage import (
    CodeAnchors,
    ImportBatch,
    ImportCounts,
    NotFoundError,
    Storage,
    TurnRow,
    Version,
)
from wakemark.shared.storage.anchors_codec import from_body, to_body
from wakemark.shared.storage.fields import event_fields, record_fields
from wakemark.shared.storage.ports.upkeep import kept_model

FORMAT = "wakemark-export"
VERSION = 1
MODEL = "all-MiniLM-L6-v2"
PAGE = 500  # rows per keyset page read by export
IMPORT_BATCH = 500  # lines per import transaction (a turn and its events never split)


def _relative(path: str) -> str:
    if path.startswith(("/", "../")):
        raise ValueError("an anchored path is relative to the project root")
    return path


_RelPath = Annotated[str, Field(min_length=1, max_length=1024), AfterValidator(_relative)]
_Hex = Annotated[str, Field(pattern=r"^[0-9a-f]{40,64}$")]
Progress = Callable[[int, int], None]
_F32_LE = np.dtype("<f4")


# --- writing ------------------------------------------------------------------------------


def _ts(value: datetime | None) -> str | None:
    if value is None:
        return None
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    return value.astimezone(UTC).isoformat(timespec="microseconds")


def dumps(obj: dict[str, Any]) -> bytes:
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":")).encode() + b"\n"


def header(
    namespace: str | None, events: bool, vectors: bool, model_id: str | None = None
) -> dict[str, Any]:
    """``model_id``: the identity of the model that made the vectors (``EmbeddingModels``),
    with ``vectors``."""
    return {
        "format": FORMAT,
        "version": VERSION,
        "model": MODEL,
        "dimensions": EMBEDDING_DIM,
        "namespace": namespace,
        "events": events,
        "vectors": vectors,
        **({"model_id": model_id} if vectors else {}),
    }


def record_line(
    record: MemoryRecord,
    vector: np.ndarray | None,
    vectors: bool,
    anchors: CodeAnchors | None = None,
) -> dict:
    line: dict[str, Any] = {
        "type": "record",
        **record_fields(record),
        "created_at": _ts(record.created_at),
    }
    if anchors is not None:
        line["anchors"] = to_body(anchors)
    if vectors:
        raw = None if vector is None else np.asarray(vector).astype(_F32_LE).tobytes()
        line["vector"] = None if raw is None else base64.b64encode(raw).decode()
    return line


def version_line(version: Version) -> dict[str, Any]:
    record = record_line(version.record, None, vectors=False)
    del record["type"]
    anchors = version.anchors
    return {
        "type": "version",
        "record": record,
        "current_id": version.current_id,
        "superseded_by": version.superseded_by,
        "superseded_at": _ts(version.superseded_at),
        "anchors": None if anchors is None else to_body(anchors),
    }


def turn_line(turn: TurnRow) -> dict[str, Any]:
    return {
        "type": "turn",
        "turn_id": turn.turn_id,
        "namespace": turn.namespace,
        "session_id": turn.session_id,
        "opened_at": _ts(turn.opened_at),
        "last_event_at": _ts(turn.last_event_at),
        "closed_at": _ts(turn.closed_at),
        "extracted_at": _ts(turn.extracted_at),
        "record_ids": list(turn.record_ids),
        "skip_reason": turn.skip_reason,
        "repeat_of": turn.repeat_of,
    }


def event_line(event: StoredEvent) -> dict[str, Any]:
    return {
        "type": "event",
        **event_fields(event),
        "body": json.loads(event.body_json()),
        "valid_time": _ts(event.valid_time),
        "source": event.source.model_dump(mode="json"),
        "schema_version": event.schema_version,
        "transaction_time": _ts(event.transaction_time),
        "turn_id": event.turn_id,
    }


def export_lines(
    storage: Storage,
    namespace: str | None = None,
    events: bool = False,
    vectors: bool = False,
    progress: Progress | None = None,
) -> Iterator[bytes]:
    """The export, one encoded line at a time; ``progress(rows, total)`` after each page."""
    stats = storage.stats(namespace)
    total = stats["memories"] + (stats["events"] if events else 0)
    done = 0
    model_id = storage.embedding_models().model if vectors else None
    yield dumps(header(namespace, events, vectors, model_id))
    n_records = n_turns = n_events = 0
    after: str | None = None
    while True:
        page = storage.export_records(namespace, after, PAGE, vectors)
        anchors = storage.get_anchors([record.record_id for record, _ in page])
        for record, vector in page:
            yield dumps(record_line(record, vector, vectors, anchors.get(record.record_id)))
        n_records += len(page)
        done += len(page)
        if progress:
            progress(done, max(total, done))
        if len(page) < PAGE:
            break
        after = page[-1][0].record_id
    n_versions = 0
    after = None
    while True:
        versions = storage.list_versions(namespace or "/", PAGE, after)
        for version in versions:
            yield dumps(version_line(version))
        n_versions += len(versions)
        if len(versions) < PAGE:
            break
        after = versions[-1].record.record_id
    after = None
    while events:
        turns = storage.export_turns(namespace, after, PAGE)
        for turn, turn_events in turns:
            yield dumps(turn_line(turn))
            for event in turn_events:
                yield dumps(event_line(event))
            n_events += len(turn_events)
            done += len(turn_events)
        n_turns += len(turns)
        if progress:
            progress(done, max(total, done))
        if len(turns) < PAGE:
            break
        after = turns[-1][0].turn_id
    end = {"type": "end", "records": n_records, "turns": n_turns, "events": n_events}
    if n_versions:  # an export without history reads as before this line type existed
        end["versions"] = n_versions
    yield dumps(end)


# --- reading ------------------------------------------------------------------------------


class ImportFormatError(ValueError):
    """A line of the file cannot be imported; ``line`` is its 1-based number."""

    def __init__(self, line: int, message: str) -> None:
        super().__init__(f"line {line}: {message}")
        self.line = line
        self.report: ImportReport | None = None  # what was committed before it


class _AnchorsLine(BaseModel):
    """A record's code anchors as ``anchors_codec.to_body`` writes them."""

    model_config = ConfigDict(extra="forbid")

    root: str | None = Field(max_length=4096)
    files: list[tuple[_RelPath, _Hex | None, _Hex | None, int | None, int | None]] = Field(
        max_length=MAX_FILES
    )
    identifiers: list[ShortStr] = Field(max_length=MAX_IDENTIFIERS)
    hashed: bool
    edited: list[_RelPath] = Field(default_factory=list, max_length=MAX_FILES)

    def anchors(self, record: MemoryRecord) -> CodeAnchors:
        return from_body(record.record_id, record.namespace, self.model_dump())


class _TurnLine(BaseModel):
    model_config = ConfigDict(extra="forbid")

    turn_id: UlidStr
    namespace: Namespace
    session_id: ShortStr
    opened_at: AwareDatetime
    last_event_at: AwareDatetime
    closed_at: AwareDatetime | None
    extracted_at: AwareDatetime | None
    record_ids: list[RecordId] = Field(default_factory=list)
    skip_reason: ShortStr | None = None
    repeat_of: RecordId | None = None


@dataclass
class ImportReport:
    """What an import read (``lines`` by type) and wrote (``written``: new rows only)."""

    dry_run: bool
    lines: dict[str, int] = field(default_factory=lambda: {"record": 0, "turn": 0, "event": 0})
    written: ImportCounts = field(default_factory=ImportCounts)
    vectors_dropped: int = 0  # vectors of another model: left for the backfill
    versions: int = 0  # superseded versions read (and, unless a dry run, written)

    def add(self, counts: ImportCounts) -> None:
        w = self.written
        self.written = ImportCounts(
            w.records + counts.records,
            w.vectors + counts.vectors,
            w.turns + counts.turns,
            w.events + counts.events,
        )


def parse_namespace_map(pairs: Iterable[str]) -> list[tuple[str, str]]:
    """``OLD=NEW`` pairs (namespaces or actor prefixes, ending in ``/``)."""
    out = []
    for pair in pairs:
        old, sep, new = pair.partition("=")
        if not sep or not is_namespace_prefix(old) or not is_namespace_prefix(new):
            raise ValueError(
                f"--namespace-map {pair!r}: expected OLD=NEW, each /actor/<a>/project/<p>/"
                " or /actor/<a>/"
            )
        out.append((old, new))
    return out


def _remap(namespace: Any, mapping: list[tuple[str, str]]) -> Any:
    if isinstance(namespace, str):
        for old, new in mapping:
            if namespace.startswith(old):
                return new + namespace[len(old) :]
    return namespace


def _vector(raw: Any) -> np.ndarray | None:
    if raw is None:
        return None
    if not isinstance(raw, str):
        raise ValueError("vector must be base64 text or null")
    try:
        data = base64.b64decode(raw, validate=True)
    except (binascii.Error, ValueError):
        raise ValueError("vector is not valid base64") from None
    if len(data) != EMBEDDING_DIM * 4:
        raise ValueError(f"vector must hold {EMBEDDING_DIM} float32 values")
    vector = np.frombuffer(data, dtype=_F32_LE).astype(np.float32)
    if not np.isfinite(vector).all():
        raise ValueError("vector holds NaN or infinity")
    return vector


def _anchors(raw: Any, record: MemoryRecord) -> CodeAnchors:
    try:
        return _AnchorsLine.model_validate(raw).anchors(record)
    except ValidationError as exc:
        raise ValueError(f"anchors.{_error_text(exc)}") from None


def _check_header(obj: Any) -> bool:
    """True when the header's vectors are of our model (else they are dropped)."""
    if not isinstance(obj, dict) or obj.get("format") != FORMAT:
        raise ValueError(f'not a wakemark export (the first line must be {{"format": "{FORMAT}"')
    version = obj.get("version")
    if not isinstance(version, int) or version < 1:
        raise ValueError("header: version must be a positive integer")
    if version > VERSION:
        raise ValueError(f"format version {version} is newer than this wakemark reads ({VERSION})")
    return obj.get("model") == MODEL and obj.get("dimensions") == EMBEDDING_DIM


def _same_model(storage: Storage, header: dict[str, Any], dry_run: bool) -> bool:
    """Whether the export's vectors are of the model of the database's vectors. One of
    them from before models were recorded is taken as the other's (the names match); a
    database that records none takes the export's."""
    exported = header.get("model_id")
    if not isinstance(exported, str):
        return True
    stored = storage.embedding_models().model
    if stored is None and not dry_run:
        stored = storage.claim_model(exported).model
    return kept_model(stored, exported)


def _error_text(exc: Exception) -> str:
    if isinstance(exc, ValidationError):
        first = exc.errors()[0]
        loc = ".".join(str(p) for p in first["loc"])
        return f"{loc}: {first['msg']}" if loc else str(first["msg"])
    return str(exc)


def import_lines(
    storage: Storage,
    lines: Iterable[bytes],
    namespace_map: list[tuple[str, str]] | None = None,
    dry_run: bool = False,
    batch_size: int = IMPORT_BATCH,
    progress: Callable[[int], None] | None = None,
) -> ImportReport:
    """Import an export. Every ``batch_size`` lines commit together (a turn is never split
    from its events); a bad line raises ``ImportFormatError`` and nothing of its batch is
    written, while earlier batches stay (importing the fixed file again completes it).
    ``progress(bytes_read)`` after each batch."""
    report = ImportReport(dry_run=dry_run)
    try:
        _import(storage, lines, namespace_map or [], report, batch_size, progress)
    except ImportFormatError as exc:
        exc.report = report
        raise
    return report


def _import(
    storage: Storage,
    lines: Iterable[bytes],
    mapping: list[tuple[str, str]],
    report: ImportReport,
    batch_size: int,
    progress: Callable[[int], None] | None,
) -> None:
    dry_run = report.dry_run
    model_id: str | None = None  # the header's: the model that made the vectors
    batch = ImportBatch()
    read = 0
    keep_vectors = True
    turn: str | None = None  # the turn the following events belong to
    ended: dict[str, Any] | None = None
    number = 0
    headed = False

    versions: list[Version] = []

    def flush() -> None:
        nonlocal batch
        if len(batch):
            report.add(storage.import_batch(batch, commit=not dry_run))
            batch = ImportBatch(model=model_id)
        if versions and not dry_run:  # after the records: each names its current one
            try:
                with storage.transaction() as tx:
                    for version in versions:
                        tx.put_version(version)
            except NotFoundError:
                raise ImportFormatError(number, "a version's current record is missing") from None
        versions.clear()
        if progress:
            progress(read)

    for number, raw in enumerate(lines, start=1):  # noqa: B007 - used after the loop
        read += len(raw)
        if not raw.strip():
            continue
        try:
            obj = json.loads(raw)
        except (ValueError, UnicodeDecodeError) as exc:
            raise ImportFormatError(number, f"not JSON ({exc.__class__.__name__})") from None
        try:
            if not headed:
                keep_vectors, headed = (
                    _check_header(obj) and _same_model(storage, obj, dry_run),
                    True,
                )
                if isinstance(obj, dict) and isinstance(obj.get("model_id"), str):
                    model_id = obj["model_id"]
                    batch = ImportBatch(model=model_id)
                continue
            if ended is not None:
                raise ValueError("line after the end trailer")
            if not isinstance(obj, dict):
                raise ValueError("expected a JSON object")
            kind = obj.pop("type", None)
            if kind == "end":
                ended = obj
                continue
            if kind == "version":
                versions.append(_version(obj, mapping))
                report.versions += 1
                if len(versions) >= batch_size:
                    flush()
                continue
            if kind not in ("record", "turn", "event"):
                raise ValueError(f"unknown type {kind!r}")
            if "namespace" in obj:
                obj["namespace"] = _remap(obj["namespace"], mapping)
            if kind == "event":
                event = StoredEvent.model_validate(obj)
                if turn is None or event.turn_id != turn:
                    raise ValueError("an event must follow the line of its turn")
                batch.events.append(event)
            else:
                if len(batch) >= batch_size:
                    flush()
                if kind == "record":
                    raw_vector = obj.pop("vector", None)
                    vector = _vector(raw_vector)
                    raw_anchors = obj.pop("anchors", None)
                    record = MemoryRecord.model_validate(obj)
                    if raw_anchors is not None:
                        batch.anchors[record.record_id] = _anchors(raw_anchors, record)
                    if vector is not None and not keep_vectors:
                        report.vectors_dropped += 1
                        vector = None
                    batch.records.append((record, vector))
                    report.lines[kind] += 1
                    if len(batch) >= batch_size:
                        flush()  # a full batch of good lines commits before the next is read
                    continue
                else:
                    parsed = _TurnLine.model_validate(obj)
                    batch.turns.append(TurnRow(**parsed.model_dump()))
                    turn = parsed.turn_id
            report.lines[kind] += 1
        except (ValueError, ValidationError) as exc:
            raise ImportFormatError(number, _error_text(exc)) from None
    if not headed:
        raise ImportFormatError(max(number, 1), "empty file")
    flush()
    if ended is None:
        raise ImportFormatError(number, "no end trailer: the file is cut off")
    expected = {"record": ended.get("records"), "turn": ended.get("turns")}
    expected["event"] = ended.get("events")
    if expected != report.lines:
        raise ImportFormatError(number, f"the trailer counts {expected}, the file {report.lines}")
    if ended.get("versions", 0) != report.versions:
        found = f"{report.versions} versions"
        raise ImportFormatError(
            number, f"the trailer counts {ended.get('versions')}, the file {found}"
        )


class _VersionLine(BaseModel):
    model_config = ConfigDict(extra="forbid")

    record: dict[str, Any]
    current_id: RecordId
    superseded_by: RecordId
    superseded_at: AwareDatetime
    anchors: dict[str, Any] | None = None


def _version(obj: dict[str, Any], mapping: list[tuple[str, str]]) -> Version:
    line = _VersionLine.model_validate(obj)
    body = {**line.record, "namespace": _remap(line.record.get("namespace"), mapping)}
    record = MemoryRecord.model_validate(body)
    anchors = None if line.anchors is None else _anchors(line.anchors, record)
    return Version(record, line.current_id, line.superseded_by, line.superseded_at, anchors)

"""Export and import (``wakemark.shared.transfer``) on both backends, round trips across them."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import pytest

from tests.storage.conftest import event, record, vec
from wakemark.shared.config import Settings, prepare_home
from wakemark.shared.models import MemoryRecord
from wakemark.shared.storage import (
    CodeAnchors,
    FileAnchor,
    ImportBatch,
    Storage,
    migrate,
    open_storage,
)
from wakemark.shared.transfer import ImportFormatError, export_lines, import_lines

NS = "/actor/a/project/a/"
NS2 = "/actor/a/project/b/"
T0 = datetime(2024, 5, 1, 12, 0, tzinfo=UTC)


def populate(storage: Storage) -> dict[str, list[str]]:
    """Two namespaces: an extracted turn with its record and vector, a manual pinned
    record without a vector, a closed turn still pending, and an open turn."""
    prompt = event("prompt", "fix the login cookie", session="s1", at=T0)
    tool = event("tool_use", "edit auth.py", session="s1", at=T0 + timedelta(seconds=1))
    done = event("session_summary", "fixed: SameSite=Lax", session="s1",
                 at=T0 + timedelta(seconds=2))  # fmt: skip
    pending = event("note", "remember the é unicode", session="s2", at=T0 + timedelta(minutes=1))
    other = event("prompt", "open turn elsewhere", session="s3", ns=NS2, at=T0)
    results = storage.put_events([prompt, tool, done, pending, other])
    extracted_turn = results[0].turn_id
    assert extracted_turn is not None
    sources = [prompt.event_id, tool.event_id, done.event_id]
    extracted = record(
        "cookie fix", facts=["SameSite=Lax"], files_touched=["auth.py"], source_event_ids=sources
    )
    manual = record("a pinned note", minutes=5, pinned=True, strategy="manual")
    far = record("other project", ns=NS2, minutes=9, concepts=["x"])
    with storage.transaction() as tx:
        assert tx.mark_turn_extracted(extracted_turn, [extracted.record_id])
        tx.put_memory_record(extracted)
        tx.put_embedding(extracted.record_id, vec(1))
        tx.put_memory_record(manual)
        tx.put_memory_record(far)
        tx.put_embedding(far.record_id, vec(2))
    return {
        "records": [extracted.record_id, manual.record_id, far.record_id],
        "pending": storage.pending_turns(),
    }


def export(storage: Storage, namespace: str | None = None, **kw: bool) -> bytes:
    return b"".join(export_lines(storage, namespace, **kw))


def lines_of(data: bytes) -> list[bytes]:
    return data.splitlines(keepends=True)


@pytest.fixture
def other(storage: Storage, request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Storage]:
    """An empty, migrated database of the other backend."""
    if storage.backend == "sqlite":
        settings = Settings(home=tmp_path / "other", database_url=request.getfixturevalue("pg_url"))
    else:
        settings = Settings(home=tmp_path / "other")
        prepare_home(settings)
    migrate(settings)
    store = open_storage(settings)
    yield store
    store.close()


@pytest.mark.postgres
def test_round_trip_to_the_other_backend_is_byte_identical(
    storage: Storage, other: Storage
) -> None:
    ids = populate(storage)
    first = export(storage, events=True, vectors=True)
    report = import_lines(other, lines_of(first))
    assert report.written.records == 3 and report.written.vectors == 2
    assert report.written.turns == 3 and report.written.events == 5
    assert export(other, events=True, vectors=True) == first
    # The parts the byte comparison relies on, checked directly too.
    for rid in ids["records"]:
        assert other.get_memory_record(rid) == storage.get_memory_record(rid)
    a = storage.export_records(None, None, 10, True)
    b = other.export_records(None, None, 10, True)
    for (_, va), (_, vb) in zip(a, b, strict=True):
        assert (va is None and vb is None) or np.array_equal(va, vb)
    # Provenance: the events keep their turn and times; only the source's pending turn
    # is pending in the copy, so extraction writes no duplicate of the extracted one.
    assert other.pending_turns() == ids["pending"]
    src_event = storage.list_events(NS, limit=1)[0]
    copy = other.get_event(src_event.event_id)
    assert copy is not None and copy == src_event
    header = json.loads(first.splitlines()[0])
    assert header == {
        "format": "wakemark-export", "version": 1, "model": "all-MiniLM-L6-v2",
        "dimensions": 384, "namespace": None, "events": True, "vectors": True,
        "model_id": None,
    }  # fmt: skip


@pytest.mark.postgres
def test_why_a_turn_gave_no_record_crosses_backends(storage: Storage, other: Storage) -> None:
    # A turn of repeats stands for the record it repeated (consolidation's session lineage).
    ids = populate(storage)
    turn, repeated = ids["pending"][0], ids["records"][0]
    with storage.transaction() as tx:
        assert tx.mark_turn_extracted(turn, [], "repeat", repeat_of=repeated)
    first = export(storage, events=True)
    line = next(r for r in map(json.loads, lines_of(first)) if r.get("turn_id") == turn)
    assert line["type"] == "turn" and line["record_ids"] == []
    assert (line["skip_reason"], line["repeat_of"]) == ("repeat", repeated)
    import_lines(other, lines_of(first))
    assert export(other, events=True) == first
    row = next(t for t, _ in other.export_turns(None, None, 10) if t.turn_id == turn)
    assert (row.skip_reason, row.repeat_of) == ("repeat", repeated)


def test_the_line_order_is_header_records_turns_with_their_events_then_end(
    storage: Storage,
) -> None:
    populate(storage)
    data = export(storage, events=True)
    kinds = [json.loads(line).get("type", "header") for line in lines_of(data)]
    assert kinds[0] == "header" and kinds[-1] == "end"
    assert kinds[1:4] == ["record"] * 3
    body = kinds[4:-1]
    assert body.count("turn") == 3 and body.count("event") == 5 and body[0] == "turn"
    records = [json.loads(line) for line in lines_of(export(storage))[1:-1]]
    assert [r["record_id"] for r in records] == sorted(r["record_id"] for r in records)
    assert all("vector" not in r for r in records)
    end = json.loads(lines_of(export(storage, events=True))[-1])
    assert end == {"type": "end", "records": 3, "turns": 3, "events": 5}


def test_importing_twice_changes_nothing(storage: Storage, tmp_path: Path) -> None:
    populate(storage)
    data = export(storage, events=True, vectors=True)
    target = _sqlite(tmp_path)
    import_lines(target, lines_of(data))
    counted = {p["namespace"]: p["event_count"] for p in target.projects()}
    again = import_lines(target, lines_of(data))
    assert again.written.records == again.written.turns == again.written.events == 0
    assert sum(counted.values()) == 5  # the events skipped are not counted again
    assert {p["namespace"]: p["event_count"] for p in target.projects()} == counted
    assert again.lines == {"record": 3, "turn": 3, "event": 5}
    assert export(target, events=True, vectors=True) == data
    # And into the database it came from: everything is there already.
    assert import_lines(storage, lines_of(data)).written.records == 0


def test_without_vectors_the_records_wait_for_the_backfill(
    storage: Storage, tmp_path: Path
) -> None:
    ids = populate(storage)
    target = _sqlite(tmp_path)
    import_lines(target, lines_of(export(storage)))
    missing = {r.record_id for r in target.records_missing_embedding(10)}
    assert missing == set(ids["records"])
    assert target.stats()["events"] == 0


def test_a_corrupt_line_is_reported_and_its_batch_is_not_written(
    storage: Storage, tmp_path: Path
) -> None:
    for i in range(10):
        storage.put_memory_record(record(f"memory {i}", minutes=i))
    lines = lines_of(export(storage))
    lines[7] = lines[7][:20] + b"\n"  # line 8; record batches of 3: lines 2-4, 5-7, 8-10
    target = _sqlite(tmp_path)
    with pytest.raises(ImportFormatError) as failed:
        import_lines(target, lines, batch_size=3)
    assert failed.value.line == 8 and "line 8" in str(failed.value)
    assert failed.value.report is not None and failed.value.report.written.records == 6
    written = {r.title for r in target.list_memory_records(NS, limit=50).items}
    assert written == {f"memory {i}" for i in range(6)}  # lines 2-7; line 8's batch: none


def test_a_cut_off_file_and_bad_records_are_errors(storage: Storage, tmp_path: Path) -> None:
    populate(storage)
    lines = lines_of(export(storage, events=True))
    target = _sqlite(tmp_path)
    with pytest.raises(ImportFormatError, match="cut off"):
        import_lines(target, lines[:-1], dry_run=True)
    bad = json.loads(lines[1])
    bad["namespace"] = "not a namespace"
    with pytest.raises(ImportFormatError, match="line 2: namespace"):
        import_lines(target, [lines[0], json.dumps(bad).encode()])
    with pytest.raises(ImportFormatError, match="line 1: not a wakemark export"):
        import_lines(target, lines[1:])
    event_first = [lines[0], *(line for line in lines if b'"type":"event"' in line)]
    with pytest.raises(ImportFormatError, match="follow the line of its turn"):
        import_lines(target, event_first)
    assert target.stats()["memories"] == 0


def test_dry_run_writes_nothing_and_counts(storage: Storage, tmp_path: Path) -> None:
    populate(storage)
    data = export(storage, events=True, vectors=True)
    target = _sqlite(tmp_path)
    report = import_lines(target, lines_of(data), dry_run=True)
    assert report.dry_run and report.lines == {"record": 3, "turn": 3, "event": 5}
    assert (report.written.records, report.written.turns, report.written.events) == (3, 3, 5)
    assert target.stats() == {k: 0 for k in target.stats()}
    assert import_lines(storage, lines_of(data), dry_run=True).written.records == 0


def test_namespace_map_moves_records_turns_and_events(storage: Storage, tmp_path: Path) -> None:
    populate(storage)
    data = export(storage, NS, events=True)
    target = _sqlite(tmp_path)
    moved = "/actor/b/project/z/"
    import_lines(target, lines_of(data), namespace_map=[(NS, moved)])
    assert target.stats(NS)["memories"] == 0
    assert target.stats(moved) | {"embedded": 0} == {
        "events": 4, "memories": 2, "embedded": 0, "pending_extraction": 1,
        "pending_embedding": 2,
    }  # fmt: skip
    assert {e.namespace for e in target.list_events(moved)} == {moved}
    copied: list[MemoryRecord] = target.list_memory_records(moved).items
    assert {r.title for r in copied} == {"cookie fix", "a pinned note"}
    pinned = [r for r in copied if r.pinned]
    assert [r.title for r in pinned] == ["a pinned note"]


def test_an_export_of_one_namespace_holds_only_it(storage: Storage) -> None:
    populate(storage)
    rows = [json.loads(line) for line in lines_of(export(storage, NS2, events=True))[1:-1]]
    assert {r["namespace"] for r in rows} == {NS2}
    assert [r["type"] for r in rows] == ["record", "turn", "event"]


def test_vectors_of_another_model_are_dropped_those_of_the_same_kept(
    storage: Storage, tmp_path: Path
) -> None:
    storage.claim_model("sha256:00000000000000aa")
    populate(storage)
    data = export(storage, vectors=True)
    assert json.loads(data.splitlines()[0])["model_id"] == "sha256:00000000000000aa"
    other_model = _sqlite(tmp_path / "b")
    other_model.claim_model("sha256:00000000000000bb")
    report = import_lines(other_model, lines_of(data))
    assert report.vectors_dropped == 2 and other_model.stats()["embedded"] == 0
    fresh = _sqlite(tmp_path / "c")  # records no model: takes the export's
    assert import_lines(fresh, lines_of(data)).vectors_dropped == 0
    assert fresh.stats()["embedded"] == 2
    assert fresh.embedding_models().model == "sha256:00000000000000aa"


def test_a_batch_writes_its_vectors_only_while_their_model_is_the_stored_one(
    storage: Storage,
) -> None:
    """Checked in the batch's own transaction: a rebuild's swap committing after the
    header was read leaves the records without vectors, for the backfill."""
    storage.claim_model("sha256:00000000000000aa")
    batches = {
        "sha256:00000000000000bb": record("another model's"),
        "sha256:00000000000000aa": record("the stored model's"),
        None: record("a model not recorded"),
    }
    for i, (model, rec) in enumerate(batches.items()):
        counts = storage.import_batch(ImportBatch(model=model, records=[(rec, vec(i))]))
        assert counts.records == 1 and counts.vectors == (model != "sha256:00000000000000bb")
    embedded = {r.title for r in storage.get_memory_records([r.record_id for r in batches.values()])
                if storage.has_embedding(r.record_id)}  # fmt: skip
    assert embedded == {"the stored model's", "a model not recorded"}


def _sqlite(tmp_path: Path) -> Storage:
    settings = Settings(home=tmp_path / "target")
    prepare_home(settings)
    migrate(settings)
    return open_storage(settings)


def test_imported_vectors_reach_an_incremental_vector_cache(
    storage: Storage, tmp_path: Path
) -> None:
    source = _sqlite(tmp_path)
    populate(source)
    data = export(source, vectors=True)
    source.close()
    before = storage.list_embeddings(NS)
    import_lines(storage, lines_of(data))
    delta = storage.list_embeddings(NS, since=before.watermark)
    assert len(delta) == 1 and delta.total == 1
    assert np.array_equal(delta.vectors[0], vec(1))


def test_an_open_turn_of_a_session_open_here_too_arrives_closed(
    storage: Storage, tmp_path: Path
) -> None:
    source = _sqlite(tmp_path)
    first = event("prompt", "started elsewhere", session="s9")
    source.put_events([first])
    data = export(source, events=True)
    source.close()
    storage.put_events([event("prompt", "open here", session="s9")])
    report = import_lines(storage, lines_of(data))
    assert report.written.turns == 1 and report.written.events == 1
    copied = storage.get_event(first.event_id)
    assert copied is not None and copied.turn_id is not None
    turn = storage.get_turn(copied.turn_id)
    assert (
        turn is not None and turn.closed and [e.event_id for e in turn.events] == [first.event_id]
    )


def _anchors(rec: MemoryRecord, sha: str = "a" * 64) -> CodeAnchors:
    files = (FileAnchor("auth.py", sha, "b" * 40, 1_700_000_000_000_000_000, 812),
             FileAnchor("gone.py", None))  # fmt: skip
    # auth.py's hash as a team server's client sent it with the turn's edit
    return CodeAnchors(rec.record_id, rec.namespace, "/home/u/proj", files, ("login",), True,
                       ("auth.py",))  # fmt: skip


@pytest.mark.postgres
def test_code_anchors_travel_with_their_records_to_the_other_backend(
    storage: Storage, other: Storage
) -> None:
    ids = populate(storage)
    rec = storage.get_memory_record(ids["records"][0])
    assert rec is not None
    with storage.transaction() as tx:
        tx.put_anchors(_anchors(rec))
    first = export(storage, events=True, vectors=True)
    import_lines(other, lines_of(first))
    assert other.get_anchors(ids["records"]) == {rec.record_id: _anchors(rec)}
    assert export(other, events=True, vectors=True) == first
    # A record already there keeps the anchors it was captured with.
    with other.transaction() as tx:
        tx.put_anchors(_anchors(rec, sha="c" * 64))
    import_lines(other, lines_of(first))
    assert other.get_anchors([rec.record_id])[rec.record_id] == _anchors(rec, sha="c" * 64)


def test_bad_anchors_are_refused_with_their_line(storage: Storage, tmp_path: Path) -> None:
    rec = record("cookie fix", files_touched=["auth.py"])
    storage.put_memory_record(rec)
    with storage.transaction() as tx:
        tx.put_anchors(_anchors(rec))
    lines = lines_of(export(storage))
    target = _sqlite(tmp_path)
    for path in ("/etc/passwd", "../outside.py"):
        line = json.loads(lines[1])
        line["anchors"]["files"][0][0] = path
        with pytest.raises(ImportFormatError, match="line 2: anchors.files"):
            import_lines(target, [lines[0], json.dumps(line).encode(), lines[2]])
    assert target.stats()["memories"] == 0
    import_lines(target, lines)
    assert target.get_anchors([rec.record_id]) == {rec.record_id: _anchors(rec)}


def test_a_versions_bad_anchors_are_refused_as_a_records_are(
    storage: Storage, tmp_path: Path
) -> None:
    old, new = record("cookie fix", files_touched=["auth.py"]), record("cookie", minutes=1)
    storage.put_memory_record(old)
    with storage.transaction() as tx:
        tx.put_anchors(_anchors(old))
    with storage.transaction() as tx:
        tx.put_memory_record(new)
        assert tx.supersede(old.record_id, new.record_id, T0)
    lines = lines_of(export(storage))
    assert json.loads(lines[2])["type"] == "version"
    target = _sqlite(tmp_path)
    for files in ([["/etc/passwd", None, None, None, None]], [["../outside.py"]], "nope"):
        line = json.loads(lines[2])
        line["anchors"]["files"] = files
        with pytest.raises(ImportFormatError, match="line 3: anchors.files"):
            import_lines(target, [*lines[:2], json.dumps(line).encode(), lines[3]])
    assert target.get_version(old.record_id) is None
    import_lines(target, lines)
    assert target.get_version(old.record_id) is not None


@pytest.mark.postgres
def test_the_history_chain_crosses_backends_and_splits_after_import(
    storage: Storage, other: Storage
) -> None:
    from tests.storage.test_anchors import anchors

    v1, v2, v3 = (record(t, minutes=i) for i, t in enumerate(["font path", "font embed", "cache"]))
    storage.put_memory_record(v1)
    with storage.transaction() as tx:
        tx.put_anchors(anchors(v1.record_id, ns=NS))
    for old, new in ((v1, v2), (v2, v3)):
        with storage.transaction() as tx:
            tx.put_memory_record(new)
            assert tx.supersede(old.record_id, new.record_id, T0)
    first = export(storage)
    kinds = [json.loads(line).get("type") for line in lines_of(first)[1:]]
    assert kinds == ["record", "version", "version", "end"]
    assert json.loads(first.splitlines()[-1])["versions"] == 2
    report = import_lines(other, lines_of(first))
    assert report.versions == 2 and report.written.records == 1
    assert export(other) == first
    assert other.get_history(v3.record_id) == storage.get_history(v3.record_id)
    assert other.split_version(v2.record_id) == v2
    assert [v.record.record_id for v in other.get_history(v2.record_id)] == [v1.record_id]
    assert other.split_version(v1.record_id) == v1
    assert other.get_anchors([v1.record_id]) == {v1.record_id: anchors(v1.record_id, ns=NS)}


def test_a_version_line_needs_its_current_record_and_counts(
    storage: Storage, tmp_path: Path
) -> None:
    old, new = record("old"), record("new", minutes=1)
    storage.put_memory_record(old)
    with storage.transaction() as tx:
        tx.put_memory_record(new)
        tx.supersede(old.record_id, new.record_id, T0)
    lines = lines_of(export(storage))
    without_record = [lines[0], *lines[2:]]
    end = json.loads(lines[-1])
    without_record[-1] = (json.dumps({**end, "records": 0}) + "\n").encode()
    target = _sqlite(tmp_path)
    with pytest.raises(ImportFormatError, match="current record is missing"):
        import_lines(target, without_record)
    with pytest.raises(ImportFormatError, match="versions"):
        import_lines(target, [*lines[:2], lines[-1]])
    assert import_lines(target, lines, dry_run=True).versions == 1
    assert target.get_version(old.record_id) is None

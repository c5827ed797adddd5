"""Event retention and compaction (``wakemark.shared.retention``, ``Storage.compact``)."""

from __future__ import annotations

import base64
import json
import random
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

from tests.storage.conftest import event, record, retrieval
from wakemark.shared.config import Settings
from wakemark.shared.jobs.inprocess import InProcessDispatcher
from wakemark.shared.jobs.tasks import RETENTION
from wakemark.shared.models import Event, StoredEvent, new_ulid
from wakemark.shared.retention import STUB_KEY, expire, trim_expired
from wakemark.shared.retrieval.lexical import search_lexical
from wakemark.shared.runtime import Runtime
from wakemark.shared.storage import ImportBatch, Storage, TurnRow

NS = "/actor/a/project/a/"
# ~11 kB that neither backend can compress much (Postgres compresses large values).
BIG = base64.b64encode(random.Random(7).randbytes(8000)).decode()


def _tool(command: str, exit_code: int, path: str) -> dict:
    return {
        "type": "json",
        "data": {
            "tool_name": "Edit",
            "tool_input": {"command": command, "file_path": path},
            "tool_response": {"stdout": BIG, "exit_code": exit_code},
        },
    }


def tool_event(session: str, body: dict, at: datetime | None = None) -> Event:
    e = event("tool_use", session=session, at=at)
    return e.model_validate({**e.model_dump(), "body": body})


def extracted_turn(storage: Storage, session: str) -> tuple[str, list[str], str]:
    """A turn of a short prompt, a big tool use and a big answer, extracted: (turn id,
    event ids, record id)."""
    evs = [
        event("prompt", "run the tests", session=session),
        tool_event(session, _tool("pytest -q", 1, "src/app.py")),
        event("session_summary", BIG, session=session),
    ]
    results = storage.put_events(evs)
    turn_id = results[0].turn_id
    assert turn_id is not None
    rec = record("tests fail", source_event_ids=[e.event_id for e in evs])
    with storage.transaction() as tx:
        assert tx.mark_turn_extracted(turn_id, [rec.record_id])
        tx.put_memory_record(rec)
    return turn_id, [e.event_id for e in evs], rec.record_id


def test_events_past_the_window_are_trimmed_to_stubs(storage: Storage) -> None:
    turn_id, ids, rid = extracted_turn(storage, "s1")
    pending = storage.put_events([event("tool_use", BIG, session="s2")])[0]
    before = {i: storage.get_event(i) for i in ids}
    record_before = storage.get_memory_record(rid)
    now = datetime.now(UTC)
    assert trim_expired(storage, 30, now=now + timedelta(days=29))["turns"] == 0
    done = trim_expired(storage, 30, now=now + timedelta(days=31))
    assert done["turns"] == 1 and done["events"] == 2
    # A trimmed body is a delete and a re-insert of its row: still counted once.
    assert storage.stats(NS)["events"] == 4
    assert done["bytes_before"] > 20_000 and done["bytes_after"] < 400
    after = {i: storage.get_event(i) for i in ids}
    prompt, tool, answer = (after[i] for i in ids)
    assert prompt == before[ids[0]]  # small: kept as it was
    for new, old in ((tool, before[ids[1]]), (answer, before[ids[2]])):
        assert isinstance(new, StoredEvent) and isinstance(old, StoredEvent)
        # Provenance stays: the same row, only the body changed.
        assert new.model_dump(exclude={"body"}) == old.model_dump(exclude={"body"})
        assert new.turn_id == turn_id
    assert tool is not None and answer is not None
    stub = tool.body.model_dump()["data"]
    assert stub["tool_name"] == "Edit" and stub["exit_code"] == 1
    assert stub["file_paths"] == ["src/app.py"] and stub[STUB_KEY]["bytes"] > 10_000
    old_answer = before[ids[2]]
    assert old_answer is not None
    size = len(old_answer.body_json().encode())
    assert answer.body.model_dump()["data"] == {STUB_KEY: {"bytes": size}}
    assert storage.get_memory_record(rid) == record_before
    # The turn is done; the open turn (never extracted) is never trimmed.
    assert trim_expired(storage, 30, now=now + timedelta(days=400))["turns"] == 0
    kept = storage.get_event(pending.event_id)
    assert kept is not None and kept.body.model_dump()["content"] == BIG


def test_zero_days_keeps_everything(storage: Storage) -> None:
    extracted_turn(storage, "s1")
    later = datetime.now(UTC) + timedelta(days=10_000)
    assert trim_expired(storage, 0, now=later)["turns"] == 0
    assert storage.trimmable_turns(later, 10) != []


def test_expiry_deletes_trimmed_turns_and_old_audit_rows_never_records(
    storage: Storage,
) -> None:
    turn_id, ids, rid = extracted_turn(storage, "s1")
    now = datetime.now(UTC)
    prompt = storage.get_event(ids[0])
    assert prompt is not None
    storage.put_retrieval(audit := retrieval(prompt, created_at=now))
    record_before = storage.get_memory_record(rid)
    # Inside the window: nothing goes. Past it: bodies trimmed, the audit row deleted.
    assert expire(storage, 30, 90, now=now + timedelta(days=29))["retrievals"] == 0
    assert storage.get_retrieval(audit.retrieval_id) is not None
    done = expire(storage, 30, 90, now=now + timedelta(days=31))
    assert (done["turns"], done["retrievals"], done["expired_turns"]) == (1, 1, 0)
    assert storage.get_retrieval(audit.retrieval_id) is None
    assert all(storage.get_event(i) is not None for i in ids)  # stubs stay until expiry
    assert expire(storage, 30, 0, now=now + timedelta(days=400))["expired_turns"] == 0
    done = expire(storage, 30, 90, now=now + timedelta(days=91))
    assert (done["expired_turns"], done["expired_events"]) == (1, 3)
    assert [storage.get_event(i) for i in ids] == [None] * 3
    assert storage.get_turn(turn_id) is None
    # The record, its provenance ids and its search entries are untouched.
    assert storage.get_memory_record(rid) == record_before
    assert storage.list_memory_records(NS).total == 1
    assert expire(storage, 30, 90, now=now + timedelta(days=200))["expired_turns"] == 0


def test_record_retention_deletes_old_unpinned_records_only(storage: Storage) -> None:
    old = record("old", minutes=0)
    pinned = record("old but pinned", minutes=1, pinned=True)
    young = record("young", minutes=0).model_copy(update={"created_at": datetime.now(UTC)})
    for r in (old, pinned, young):
        storage.put_memory_record(r)
    now = datetime.now(UTC)
    assert expire(storage, 30, 0, 0, now=now)["records"] == 0  # off by default
    done = expire(storage, 30, 0, 365, now=now)
    assert done["records"] == 1
    assert storage.get_memory_record(old.record_id) is None
    assert {r.record_id for r in storage.list_memory_records(NS).items} == {
        pinned.record_id, young.record_id,
    }  # fmt: skip
    assert search_lexical(storage, NS, "old", 10)[0].record.record_id == pinned.record_id
    [entry] = [a for a in storage.list_audit() if a.action == "record_retention"]
    assert (entry.who, entry.targets, entry.count) == ("retention", (old.record_id,), 1)


def test_an_untrimmed_turn_never_expires(storage: Storage) -> None:
    extracted_turn(storage, "s1")
    later = datetime.now(UTC) + timedelta(days=400)
    assert expire(storage, 0, 30, now=later)["expired_turns"] == 0  # retention off: no stubs


def old_turns(storage: Storage, n: int, days_ago: int = 40) -> None:
    """Turns extracted ``days_ago`` days ago, written as an import would."""
    at = datetime.now(UTC) - timedelta(days=days_ago)
    batch = ImportBatch()
    for i in range(n):
        turn_id = new_ulid()
        e = tool_event(f"s{i}", _tool(f"make {i}", 0, f"f{i}.py"), at)
        batch.turns.append(TurnRow(turn_id, NS, f"s{i}", at, at, at, at, []))
        batch.events.append(StoredEvent(**e.model_dump(), transaction_time=at, turn_id=turn_id))
    storage.import_batch(batch)


def test_compaction_shrinks_the_sqlite_file(storage: Storage) -> None:
    old_turns(storage, 300)
    usage = storage.disk_usage()
    assert usage.tables["events"] > 300 * 8_000
    assert usage.projects[0]["namespace"] == NS and usage.projects[0]["events"] == 300
    assert trim_expired(storage, 30)["events"] == 300
    lines = storage.compact()
    assert lines
    after = storage.disk_usage()
    assert after.projects[0]["event_bytes"] < usage.projects[0]["event_bytes"] / 10
    if storage.backend == "sqlite":
        assert after.tables["events"] < usage.tables["events"] / 10
        assert after.total < usage.total / 5
        assert Path(getattr(storage, "path")).stat().st_size == after.total  # noqa: B009
        assert lines[0].startswith("VACUUM: ")
    else:  # plain VACUUM keeps the files' size: the space is reused for new rows
        assert "VACUUM (ANALYZE) events" in lines


def test_the_sweep_thread_runs_retention(backend_settings: Settings) -> None:
    runtime = Runtime.build(backend_settings.replace(event_retention_days=30))
    try:
        old_turns(runtime.storage, 3)
        recent = datetime.now(UTC)
        dispatcher = InProcessDispatcher(runtime.tasks, sweep_interval_s=0.05)
        dispatcher.start()
        try:
            deadline = time.monotonic() + 20
            while runtime.storage.trimmable_turns(recent, 10) and time.monotonic() < deadline:
                time.sleep(0.05)
        finally:
            dispatcher.close()
        assert runtime.storage.trimmable_turns(recent, 10) == []
        bodies = [json.loads(e.body_json()) for e in runtime.storage.list_events(NS)]
        assert len(bodies) == 3 and all(STUB_KEY in b["data"] for b in bodies)
        # Nothing is left to trim: a run now changes nothing.
        assert RETENTION.run(runtime.tasks) == {
            "turns": 0, "events": 0, "bytes_before": 0, "bytes_after": 0,
            "retrievals": 0, "expired_turns": 0, "expired_events": 0, "records": 0,
        }  # fmt: skip
    finally:
        runtime.close()


def test_celery_beat_schedules_the_retention_task(settings: Settings) -> None:
    from wakemark.services.worker import create_celery
    from wakemark.shared.jobs.celery_dispatch import celery_config
    from wakemark.shared.jobs.job import QUEUE_BACKFILL

    deploy = settings.replace(redis_url="redis://127.0.0.1:6379/7")
    app = create_celery(deploy)
    entry = app.conf.beat_schedule[RETENTION.name]
    assert entry["task"] == RETENTION.name and entry["schedule"] == RETENTION.every_s == 3600
    routes = celery_config(deploy)["task_routes"]
    assert RETENTION.name in app.tasks and routes[RETENTION.name]["queue"] == QUEUE_BACKFILL


def test_merging_the_indexes_drops_deleted_records_entries(storage: Storage) -> None:
    rng = random.Random(3)
    recs = [
        record(f"r{i}", summary=" ".join(f"w{rng.randrange(10**6)}" for _ in range(40)))
        for i in range(400)
    ]
    for r in recs:
        storage.put_memory_record(r)
    with storage.transaction() as tx:
        tx.delete_memory_records([r.record_id for r in recs[:300]])
    before = storage.disk_usage().tables
    for _ in range(5):
        storage.merge_indexes()
    after = storage.disk_usage().tables
    if storage.backend == "sqlite":
        assert after["memory_trgm_data"] < before["memory_trgm_data"] * 0.6
        assert after["memory_fts"] < before["memory_fts"]
    # Search still finds what is left, and only that.
    word = recs[350].summary.split()[0]
    assert [h.record.record_id for h in search_lexical(storage, NS, word, 10)] == [
        recs[350].record_id
    ]

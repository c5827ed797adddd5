"""Audit (retrieval log, audit log, API tokens), the storage contract, on each backend."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from tests.storage.conftest import NS, T0, event, retrieval
from wakemark.shared.models import MemoryRecord, new_ulid
from wakemark.shared.storage import NotFoundError, Storage


def _delete_event(storage: Storage, event_id: str) -> None:
    """Raw SQL: no API deletes events yet, and the audit's retention hangs on them."""
    if storage.backend == "sqlite":
        with storage._conns.write() as conn:  # type: ignore[attr-defined]
            conn.execute("DELETE FROM events WHERE event_id = ?", (event_id,))
    else:
        with storage._db.connection() as conn:  # type: ignore[attr-defined]
            conn.execute("DELETE FROM events WHERE event_id = %s", (event_id,))


def test_retrieval_round_trips(storage: Storage) -> None:
    prompt = event()
    storage.put_event(prompt)
    row = retrieval(prompt)
    storage.put_retrieval(row)
    assert storage.get_retrieval(row.retrieval_id) == row
    assert storage.get_retrieval(new_ulid()) is None


def test_retrieval_needs_its_prompt_event(storage: Storage) -> None:
    with pytest.raises(NotFoundError):
        storage.put_retrieval(retrieval(event()))
    assert storage.list_retrievals() == []


def test_list_retrievals_filters_and_orders_newest_first(storage: Storage) -> None:
    other_ns = "/actor/a/project/ab/"
    prompts = [event(session="s1"), event(session="s2"), event(session="s1", ns=other_ns)]
    storage.put_events(prompts)
    rows = [retrieval(p, minutes=i) for i, p in enumerate(prompts)]
    for row in rows:
        storage.put_retrieval(row)
    ids = lambda items: [r.retrieval_id for r in items]  # noqa: E731
    assert ids(storage.list_retrievals(NS)) == [rows[1].retrieval_id, rows[0].retrieval_id]
    assert ids(storage.list_retrievals(NS, session_id="s1")) == [rows[0].retrieval_id]
    assert ids(storage.list_retrievals("/actor/a/", limit=2)) == ids(rows[::-1][:2])
    assert ids(storage.list_retrievals(other_ns)) == [rows[2].retrieval_id]
    assert storage.list_retrievals("/actor/b/") == []


def test_session_injections_read_what_each_row_injected_newest_first(storage: Storage) -> None:
    other_ns = "/actor/a/project/ab/"
    prompts = [event(session="s1"), event(session="s2"), event(session="s1")]
    prompts.append(event(session="s1", ns=other_ns))
    storage.put_events(prompts)
    rows = [retrieval(p, minutes=i) for i, p in enumerate(prompts)]
    rows[2] = rows[2].model_copy(update={"injected": [], "decision": "none"})
    for row in rows:
        storage.put_retrieval(row)
    assert storage.session_injections(NS, "s1", 5) == [
        (prompts[2].event_id, []),
        (prompts[0].event_id, rows[0].injected),
    ]
    assert storage.session_injections(NS, "s1", 1) == [(prompts[2].event_id, [])]
    assert storage.session_injections(other_ns, "s1", 5) == [
        (prompts[3].event_id, rows[3].injected)
    ]
    assert storage.session_injections(NS, "s9", 5) == []


def test_retrievals_go_with_their_prompt_event(storage: Storage) -> None:
    kept, dropped = event(), event()
    storage.put_events([kept, dropped])
    keep, drop = retrieval(kept), retrieval(dropped, minutes=1)
    storage.put_retrieval(keep)
    storage.put_retrieval(drop)
    _delete_event(storage, dropped.event_id)
    assert storage.get_retrieval(drop.retrieval_id) is None
    assert [r.retrieval_id for r in storage.list_retrievals(NS)] == [keep.retrieval_id]


def test_retrieval_sessions_sum_their_rows_and_page_by_key(storage: Storage) -> None:
    prompts = [event(session="s1"), event(session="s2"), event(session="s1"), event(session="s3")]
    storage.put_events(prompts)
    rows = [
        retrieval(prompts[0], minutes=0),
        retrieval(prompts[1], minutes=1, decision="none", injected=[], bytes=0, latency_ms=2.0),
        retrieval(prompts[2], minutes=2, latency_ms=6.0),
        retrieval(prompts[3], minutes=3),
    ]
    for row in rows:
        storage.put_retrieval(row)
    first = storage.retrieval_sessions(NS, limit=2)
    assert [s.session_id for s in first] == ["s3", "s1"]
    s1 = first[1]
    assert (s1.prompts, s1.injected, s1.records, s1.bytes) == (2, 2, 2, 642)
    assert s1.latency_ms == pytest.approx(10.2)
    assert (s1.first_at, s1.last_at) == (rows[0].created_at, rows[2].created_at)
    rest = storage.retrieval_sessions(NS, limit=2, after=(s1.last_at, s1.session_id))
    assert [(s.session_id, s.prompts, s.injected) for s in rest] == [("s2", 1, 0)]
    # A session's prompts page by key too.
    page = storage.list_retrievals(NS, "s1", limit=1)
    more = storage.list_retrievals(NS, "s1", 1, after=(page[0].created_at, page[0].retrieval_id))
    assert [r.retrieval_id for r in page + more] == [rows[2].retrieval_id, rows[0].retrieval_id]
    totals = storage.retrieval_totals()
    assert (totals["prompts"], totals["injected"], totals["records"]) == (4, 3, 3)
    assert totals["bytes"] == 963 and storage.retrieval_totals("/actor/b/")["prompts"] == 0
    # Deleting the prompt events takes their rows out of the sums, and empty sessions go.
    _delete_event(storage, prompts[1].event_id)
    _delete_event(storage, prompts[2].event_id)
    assert [(s.session_id, s.prompts, s.bytes) for s in storage.retrieval_sessions(NS)] == [
        ("s3", 1, 321),
        ("s1", 1, 321),
    ]


def test_token_round_trip_revoke_and_touch(storage: Storage) -> None:
    from wakemark.shared import tokens

    token, secret = tokens.create(
        storage, actor="bob", project="p1", read_only=True, expires=timedelta(days=1),
        name="ci", who="cli:test",
    )  # fmt: skip
    found = storage.token_by_hash(tokens.hash_secret(secret))
    assert found == token
    assert found.expires_at - found.created_at == timedelta(days=1)
    assert storage.token_by_hash(tokens.hash_secret(secret + "x")) is None
    assert storage.list_tokens() == [token]

    storage.touch_token(token.token_id, T0)
    assert storage.list_tokens()[0].last_used_at == T0

    assert tokens.revoke(storage, token.token_id, "cli:test") is True
    assert tokens.revoke(storage, token.token_id, "cli:test") is False  # already revoked
    assert tokens.revoke(storage, "tok_unknown", "cli:test") is False
    revoked = storage.token_by_hash(tokens.hash_secret(secret))
    assert revoked is not None and revoked.revoked_at is not None
    assert not tokens.usable(revoked, datetime.now(UTC))

    audit = storage.list_audit()
    assert [(a.action, a.who, a.targets, a.count) for a in audit] == [
        ("token_revoke", "cli:test", (token.token_id,), 1),
        ("token_create", "cli:test", (token.token_id,), 1),
    ]
    assert audit[1].namespace == "/actor/bob/project/p1/"
    assert storage.list_audit(limit=1) == audit[:1]


def test_token_secret_is_not_stored(storage: Storage, backend_settings: Any) -> None:
    from wakemark.shared import tokens

    _, secret = tokens.create(
        storage, actor="bob", project=None, read_only=False, expires=None, name="n", who="t"
    )
    dump = _dump(backend_settings)
    assert tokens.hash_secret(secret) in dump
    assert secret not in dump and secret[4:] not in dump


def _dump(settings: Any) -> str:
    """Every value of every table, as text."""
    if settings.backend == "sqlite":
        import sqlite3

        conn = sqlite3.connect(settings.sqlite_path)
        try:
            tables = "SELECT name FROM sqlite_master WHERE type = 'table'"
            names = [r[0] for r in conn.execute(tables)]
            return "\n".join(repr(conn.execute(f'SELECT * FROM "{n}"').fetchall()) for n in names)
        finally:
            conn.close()
    import psycopg

    with psycopg.connect(settings.database_url) as conn:
        names = [
            r[0]
            for r in conn.execute(
                "SELECT table_name FROM information_schema.tables"
                " WHERE table_schema = current_schema()"
            )
        ]
        return "\n".join(repr(conn.execute(f'SELECT * FROM "{n}"').fetchall()) for n in names)


def test_audit_commits_with_the_action_or_not_at_all(storage: Storage) -> None:
    from wakemark.shared.storage import AuditEntry

    record = MemoryRecord(namespace=NS, title="doomed")
    storage.put_memory_record(record)
    entry = AuditEntry("bootstrap", "delete", NS, (record.record_id,), 1, T0)
    with pytest.raises(RuntimeError), storage.transaction() as tx:
        tx.delete_memory_records([record.record_id])
        tx.audit(entry)
        raise RuntimeError("abort")
    assert storage.get_memory_record(record.record_id) is not None
    assert storage.list_audit() == []
    with storage.transaction() as tx:
        tx.audit(entry)
        tx.delete_memory_records([record.record_id])
    assert storage.get_memory_record(record.record_id) is None
    [row] = storage.list_audit()
    assert row.id is not None and (row.at, row.who, row.targets) == (T0, "bootstrap", entry.targets)

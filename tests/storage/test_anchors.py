"""Code anchors, the storage contract: each test runs on each backend (``storage``)."""

from __future__ import annotations

import pytest

from tests.storage.conftest import NS, record
from wakemark.shared.models import new_record_id
from wakemark.shared.storage import CodeAnchors, FileAnchor, NotFoundError, Storage


def anchors(record_id: str, ns: str = NS, **extra: object) -> CodeAnchors:
    values: dict[str, object] = {
        "record_id": record_id,
        "namespace": ns,
        "root": "/home/u/invoicer",
        "files": (FileAnchor("billing/address.py", "ab" * 32, "c" * 40),
                  FileAnchor("gone.py", None)),
        "identifiers": ("format_address", "Request.host"),
        "hashed": True,
    }  # fmt: skip
    return CodeAnchors(**{**values, **extra})  # type: ignore[arg-type]


def test_anchors_round_trip_and_are_replaced(storage: Storage) -> None:
    rec = record("format_address falls back")
    storage.put_memory_record(rec)
    first = anchors(rec.record_id)
    with storage.transaction() as tx:
        tx.put_anchors(first)
    assert storage.get_anchors([rec.record_id, new_record_id()]) == {rec.record_id: first}
    second = anchors(rec.record_id, files=(), identifiers=(), hashed=False, root=None)
    with storage.transaction() as tx:
        tx.put_anchors(second)
    assert storage.get_anchors([rec.record_id]) == {rec.record_id: second}


def test_anchors_need_their_record_and_go_with_it(storage: Storage) -> None:
    with pytest.raises(NotFoundError), storage.transaction() as tx:
        tx.put_anchors(anchors(new_record_id()))
    rec = record("kept")
    storage.put_memory_record(rec)
    with storage.transaction() as tx:
        tx.put_anchors(anchors(rec.record_id))
    assert storage.delete_memory_records([rec.record_id]) == [rec.record_id]
    assert storage.get_anchors([rec.record_id]) == {}


def test_a_failed_anchor_write_leaves_the_rest_of_the_transaction(storage: Storage) -> None:
    rec = record("written")
    with storage.transaction() as tx:
        tx.put_memory_record(rec)
        with pytest.raises(NotFoundError):
            tx.put_anchors(anchors(new_record_id()))
        tx.put_anchors(anchors(rec.record_id))
    assert list(storage.get_anchors([rec.record_id])) == [rec.record_id]


def test_list_anchors_pages_one_project(storage: Storage) -> None:
    other = "/actor/a/project/ab/"
    ids = []
    for ns in (NS, NS, NS, other):
        rec = record("r", ns=ns)
        storage.put_memory_record(rec)
        with storage.transaction() as tx:
            tx.put_anchors(anchors(rec.record_id, ns=ns))
        ids.append((ns, rec.record_id))
    mine = sorted(rid for ns, rid in ids if ns == NS)
    page = storage.list_anchors(NS, limit=2)
    assert [a.record_id for a in page] == mine[:2]
    rest = storage.list_anchors(NS, limit=2, after=page[-1].record_id)
    assert [a.record_id for a in rest] == mine[2:]
    assert len(storage.list_anchors("/actor/a/")) == 4

"""``POST /v1/projects/move`` through the real app on each backend: a dry run counts, the
move is made, searched and audited; bad bodies, scopes and clashes are refused with
nothing moved."""

from __future__ import annotations

from typing import Any

import pytest

from tests.api.test_scopes import mint
from tests.storage.test_move import refuse_audit
from wakemark.shared.runtime import Runtime

from .conftest import Api, make_event

OLD = "/actor/alice/project/p1/"
NEW = "/actor/alice/project/p2/"
ROUTE = "/v1/projects/move"


def _project(api: Api, ns: str, word: str, session: str) -> str:
    """A record about ``word`` and a prompt that opens a turn of ``session``."""
    res = api.post("/v1/memories", json={"namespace": ns, "title": f"{word} notes", "summary": ""})
    assert res.status_code == 201
    event = make_event("prompt", namespace=ns, session_id=session)
    assert api.post("/v1/events", json=event).status_code == 201
    record_id: str = res.json["record_id"]
    return record_id


def _titles(api: Api, ns: str, q: str) -> list[str]:
    res = api.get("/v1/search", query_string={"namespace": ns, "q": q})
    assert res.status_code == 200
    return [item["record"]["title"] for item in res.json["items"]]


def _where(api: Api) -> dict[str, Any]:
    return {p["namespace"]: p for p in api.get("/v1/projects").json}


def test_a_dry_run_counts_then_the_move_is_searched_and_audited(api: Api, runtime: Runtime) -> None:
    record_id = _project(api, OLD, "zanzibar", "s1")
    _project(api, NEW, "quokka", "s2")
    assert _titles(api, OLD, "zanzibar") == ["zanzibar notes"]  # searched before: warm
    body = {"from": OLD, "to": NEW, "project_path": "/home/a/p2"}

    dry = api.post(ROUTE, json=body | {"dry_run": True})
    assert dry.status_code == 200
    counts = {"records": 1, "versions": 0, "anchors": 0, "turns": 1, "events": 1, "retrievals": 0}
    assert dry.json == {"moved": counts, "from": OLD, "to": NEW, "dry_run": True}
    assert set(_where(api)) == {OLD, NEW}
    assert runtime.storage.list_audit() == []

    done = api.post(ROUTE, json=body)
    assert done.status_code == 200 and done.json["moved"] == counts
    assert done.json["dry_run"] is False
    assert _titles(api, NEW, "zanzibar") == ["zanzibar notes"]
    assert _titles(api, OLD, "zanzibar") == []
    assert api.get(f"/v1/memories/{record_id}").json["namespace"] == NEW
    (project,) = _where(api).values()
    assert project["project_path"] == "/home/a/p2"
    assert (project["event_count"], project["memory_count"]) == (2, 2)
    assert api.get("/v1/stats", query_string={"namespace": NEW}).json["memories"] == 2
    (entry,) = runtime.storage.list_audit()
    assert (entry.action, entry.namespace, entry.targets) == ("move", OLD, (NEW,))

    again = api.post(ROUTE, json=body)
    assert (again.status_code, again.json["error"]) == (404, "not_found")


def test_a_session_open_in_both_is_a_conflict(api: Api, runtime: Runtime) -> None:
    _project(api, OLD, "zanzibar", "s1")
    _project(api, NEW, "quokka", "s1")
    res = api.post(ROUTE, json={"from": OLD, "to": NEW})
    assert (res.status_code, res.json["error"]) == (409, "conflict")
    assert "s1" in res.json["message"]
    assert set(_where(api)) == {OLD, NEW}
    assert runtime.storage.list_audit() == []


def test_a_move_that_cannot_be_audited_is_not_made(api: Api, runtime: Runtime) -> None:
    record_id = _project(api, OLD, "zanzibar", "s1")
    before = _where(api)
    refuse_audit(runtime.storage)
    res = api.post(ROUTE, json={"from": OLD, "to": NEW, "project_path": "/home/a/p2"})
    assert res.status_code == 500
    assert api.get(f"/v1/memories/{record_id}").json["namespace"] == OLD
    assert _titles(api, OLD, "zanzibar") == ["zanzibar notes"]
    assert _where(api) == before
    assert runtime.storage.list_audit() == []


@pytest.mark.parametrize(
    ("body", "status"),
    [
        ({"to": NEW}, 422),
        ({"from": OLD}, 422),
        ({"from": "", "to": NEW}, 422),
        ({"from": OLD, "to": "/actor/alice/"}, 422),
        ({"from": "p1", "to": NEW}, 422),
        ({"from": OLD, "to": NEW, "project_path": ""}, 422),
        ({"from": OLD, "to": NEW, "dry_run": "yes"}, 422),
        ({"from_": OLD, "to": NEW}, 422),
        ({"from": OLD, "to": OLD}, 409),
        ([OLD, NEW], 422),
    ],
)
def test_bad_bodies_are_refused(api: Api, body: Any, status: int) -> None:
    """A body the schema refuses is a 422, as on every route; one it admits but that names
    one project twice is a conflict (a schema-valid body is never a 400)."""
    _project(api, OLD, "zanzibar", "s1")
    res = api.post(ROUTE, json=body)
    assert res.status_code == status, res.json
    assert list(_where(api)) == [OLD]


def test_a_token_must_cover_both_projects(api: Api, runtime: Runtime) -> None:
    _project(api, OLD, "zanzibar", "s1")
    p1 = Api(api.client, mint(runtime.storage, "alice", project="p1"))
    res = p1.post(ROUTE, json={"from": OLD, "to": NEW})
    assert (res.status_code, res.json["error"]) == (403, "forbidden_scope")
    alice = Api(api.client, mint(runtime.storage, "alice"))
    assert alice.post(ROUTE, json={"from": OLD, "to": NEW}).status_code == 200
    assert list(_where(api)) == [NEW]

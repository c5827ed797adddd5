"""Read and manage routes on both backends."""

from __future__ import annotations

from urllib.parse import quote

from wakemark.services.api.schemas import Project

from .conftest import NS, Api, make_event

OTHER = "/actor/alice/project/p2/"


def _memory(api: Api, namespace: str = NS, **over: object) -> str:
    body = {"namespace": namespace, "title": "Use uv", "summary": "uv is fast", **over}
    res = api.post("/v1/memories", json=body)
    assert res.status_code == 201, res.json
    return res.json["record_id"]


def test_events_list_newest_first_filtered_and_limited(api: Api) -> None:
    ids = []
    for i in range(3):
        ev = make_event("tool_use", session_id="a" if i < 2 else "b")
        ids.append(ev["event_id"])
        assert api.post("/v1/events", json=ev).status_code == 201
    api.post("/v1/events", json=make_event(namespace=OTHER))
    items = api.get(f"/v1/events?namespace={NS}").json["items"]
    assert [e["event_id"] for e in items] == ids[::-1]
    assert len(api.get("/v1/events?namespace=/actor/alice/").json["items"]) == 4
    assert len(api.get(f"/v1/events?namespace={NS}&session_id=a").json["items"]) == 2
    assert len(api.get(f"/v1/events?namespace={NS}&limit=1").json["items"]) == 1
    assert api.get(f"/v1/events/{make_event()['event_id']}").status_code == 404


def test_memory_create_read_pin_delete(api: Api) -> None:
    rid = _memory(api, facts=["a <private>tok</private>"], concepts=["uv"], pinned=True)
    rec = api.get(f"/v1/memories/{rid}").json
    assert rec["record_id"] == rid and rec["strategy"] == "manual" and rec["pinned"] is True
    assert rec["facts"] == ["a [REDACTED]"]
    assert "embedding" not in rec and rec["source_event_ids"] == []
    res = api.patch(f"/v1/memories/{rid}", json={"pinned": False})
    assert res.status_code == 200 and res.json["pinned"] is False
    assert api.get(f"/v1/memories/{rid}").json["pinned"] is False
    assert api.patch(f"/v1/memories/{rid}", json={"pinned": "yes"}).status_code == 422
    assert api.patch(f"/v1/memories/{rid}", json={"colour": "x"}).status_code == 422
    assert api.patch(f"/v1/memories/{rid}", json={}).status_code == 422
    assert api.delete(f"/v1/memories/{rid}").status_code == 204
    assert api.get(f"/v1/memories/{rid}").status_code == 404
    assert api.delete(f"/v1/memories/{rid}").status_code == 404


def test_memory_validation(api: Api) -> None:
    bad = [
        {"namespace": NS, "title": "", "summary": "s"},
        {"namespace": "/nope/", "title": "t", "summary": "s"},
        {"namespace": NS, "title": "t"},
        {"namespace": NS, "title": "t", "summary": "s", "strategy": "llm"},
        {"namespace": NS, "title": "t", "summary": "s", "observation_type": "gossip"},
        {"namespace": NS, "title": "t" * 201, "summary": "s"},
        ["not", "an", "object"],
    ]
    for body in bad:
        assert api.post("/v1/memories", json=body).status_code == 422, body
    assert api.get(f"/v1/memories?namespace={NS}").json["total"] == 0


def test_memories_list_pages_newest_first(api: Api) -> None:
    ids = [_memory(api, title=f"m{i}") for i in range(5)]
    _memory(api, namespace=OTHER)
    seen: list[str] = []
    after = ""
    while True:
        page = api.get(f"/v1/memories?namespace={NS}&limit=2{after}").json
        assert page["total"] == 5 and page["limit"] == 2
        seen += [r["record_id"] for r in page["items"]]
        if page["next"] is None:
            break
        after = "&after=" + quote(page["next"])
    assert seen == ids[::-1]
    assert api.get("/v1/memories?namespace=/actor/alice/").json["total"] == 6


def test_timeline_around_a_record(api: Api) -> None:
    ids = [_memory(api, title=f"m{i}") for i in range(5)]
    items = api.get(f"/v1/timeline?record_id={ids[2]}&before=1&after=1").json["items"]
    assert [r["record_id"] for r in items] == ids[1:4]
    assert api.get("/v1/timeline").status_code == 400
    assert api.get(f"/v1/timeline?record_id={ids[2]}&before=-1").status_code == 400


def test_projects_and_stats(api: Api) -> None:
    api.post("/v1/events", json=make_event())
    api.post("/v1/events", json=make_event(namespace=OTHER))
    _memory(api)
    projects = api.get("/v1/projects").json
    assert isinstance(projects, list)
    by_ns = {p["namespace"]: p for p in projects}
    assert set(by_ns) == {NS, OTHER}
    assert by_ns[NS]["event_count"] == 1 and by_ns[NS]["memory_count"] == 1
    assert by_ns[NS]["display_name"] == "p1"
    # The spec (and the route table in docs/api.md) lists every field the reply has.
    assert set(by_ns[NS]) == set(Project.model_fields)
    stats = api.get(f"/v1/stats?namespace={NS}").json
    assert stats["events"] == 1 and stats["memories"] == 1
    for key in ("pending_extraction", "pending_embedding", "embedded"):
        assert key in stats
    assert api.get("/v1/stats").json["events"] == 2

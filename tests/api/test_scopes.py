"""Scoped tokens through the real app on each backend: every route keeps bob out of
alice's data; read-only, project scope, expiry, revocation, rate limit, audit."""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from flask import Flask

from wakemark.services.api import create_app, security
from wakemark.services.api.security import ensure_token
from wakemark.shared import project, tokens
from wakemark.shared.config import Settings
from wakemark.shared.runtime import Runtime
from wakemark.shared.storage import Storage

from .conftest import Api, make_event

ALICE = "/actor/alice/project/p1/"
ALICE2 = "/actor/alice/project/p2/"
BOB = "/actor/bob/project/b1/"
WORD = "zanzibar"  # in every record and event, so a search that crossed scopes would hit


def mint(storage: Storage, actor: str, **kw: Any) -> str:
    kw.setdefault("project", None)
    kw.setdefault("read_only", False)
    kw.setdefault("expires", None)
    kw.setdefault("name", "test")
    return tokens.create(storage, actor=actor, who="test", **kw)[1]


@dataclass
class World:
    admin: Api  # the bootstrap token
    storage: Storage
    records: dict[str, str]  # namespace -> record id
    events: dict[str, str]  # namespace -> event id

    def client(self, secret: str) -> Api:
        return Api(self.admin.client, secret)


@pytest.fixture
def world(api: Api, runtime: Runtime) -> World:
    records, events = {}, {}
    for ns in (ALICE, ALICE2, BOB):
        owner = ns.split("/")[2]
        res = api.post("/v1/memories", json={"namespace": ns, "title": f"{WORD} plan of {owner}",
                                             "summary": f"{owner} {WORD}"})  # fmt: skip
        assert res.status_code == 201
        records[ns] = res.json["record_id"]
        # A prompt opens a turn that stays open (no extraction adds records meanwhile).
        body = {"type": "text", "content": f"{WORD} question by {owner}"}
        event = make_event("prompt", namespace=ns, actor_id=owner, body=body)
        assert api.post("/v1/events", json=event).status_code == 201
        events[ns] = event["event_id"]
    return World(api, runtime.storage, records, events)


def _hook_payload(cwd: str = "/home/bob/shop") -> dict[str, Any]:
    return {
        "session_id": "s-hook",
        "cwd": cwd,
        "hook_event_name": "UserPromptSubmit",
        "prompt": f"what about {WORD}?",
    }


# --- every route, for bob's token (/actor/bob/) against alice's data --------------------
# Each case makes its requests and checks their status and what they did (or did not
# do); the test then checks that no response mentions alice. A route missing from this
# table fails test_every_route_has_a_scope_case.

Case = Callable[[World, Api], list[Any]]


def _refused_then_served(
    bob: Api, path: str, alice: dict[str, str], own: dict[str, str] | None = None
) -> list[Any]:
    """bob GETs ``path`` for alice's namespace (403) and for his own (200)."""
    other = bob.get(path, query_string=alice)
    mine = bob.get(path, query_string=own or {})
    assert (other.status_code, mine.status_code) == (403, 200)
    return [other, mine]


def _by_id(kind: str, suffix: str = "") -> Case:
    """bob GETs alice's record or event by its id (404: as if it did not exist) and his
    own (200)."""

    def case(w: World, bob: Api) -> list[Any]:
        ids = w.records if kind == "memories" else w.events
        other = bob.get(f"/v1/{kind}/{ids[ALICE]}{suffix}")
        mine = bob.get(f"/v1/{kind}/{ids[BOB]}{suffix}")
        assert (other.status_code, mine.status_code) == (404, 200)
        return [other, mine]

    return case


def _health(w: World, bob: Api) -> list[Any]:
    res = bob.get("/health")
    assert res.status_code == 200  # public, and holds no user content
    return [res]


def _static(w: World, bob: Api) -> list[Any]:
    res = bob.get("/static/nothing.js")  # Flask's static files: none ship, none hold data
    assert res.status_code == 404
    return [res]


def _metrics(w: World, bob: Api) -> list[Any]:
    res = bob.get("/metrics")
    assert (res.status_code, res.json["error"]) == (403, "forbidden")
    return [res]


def _audit(w: World, bob: Api) -> list[Any]:
    res = bob.get("/v1/audit")
    assert res.status_code == 403
    return [res]


def _post_events(w: World, bob: Api) -> list[Any]:
    alice = make_event("note", namespace=ALICE)
    mine = make_event("note", namespace=BOB, actor_id="bob")
    one = bob.post("/v1/events", json=alice)
    batch = bob.post("/v1/events", json={"events": [mine, alice]})
    assert (one.status_code, one.json["error"]) == (403, "forbidden_scope")
    assert batch.status_code == 403
    assert w.storage.get_event(alice["event_id"]) is None
    assert w.storage.get_event(mine["event_id"]) is None  # all or nothing
    return [one, batch]


def _post_hook(w: World, bob: Api) -> list[Any]:
    posing = bob.post("/v1/hooks/claude-code", json=_hook_payload(),
                      headers={"X-Wakemark-Actor": "alice"})  # fmt: skip
    assert (posing.status_code, posing.json["error"]) == (403, "forbidden_scope")
    assert w.storage.list_events(namespace="/actor/alice/", limit=100)[0].session_id != "s-hook"
    own = bob.post("/v1/hooks/claude-code", json=_hook_payload())
    assert own.status_code in (200, 204)  # 204: Claude Code's "nothing to add"
    [event] = w.storage.list_events(session_id="s-hook")
    assert event.namespace.startswith("/actor/bob/")  # as bob, not as the server's user
    return [posing, own]


def _search(w: World, bob: Api) -> list[Any]:
    other = bob.get("/v1/search", query_string={"namespace": ALICE, "q": WORD})
    prefix = bob.get("/v1/search", query_string={"namespace": "/actor/alice/", "q": WORD})
    mine = bob.get("/v1/search", query_string={"q": WORD})  # defaults to /actor/bob/
    assert (other.status_code, prefix.status_code, mine.status_code) == (403, 403, 200)
    assert [i["record"]["record_id"] for i in mine.json["items"]] == [w.records[BOB]]
    return [other, prefix, mine]


def _context(w: World, bob: Api) -> list[Any]:
    other, mine = _refused_then_served(bob, "/v1/context", {"namespace": ALICE})
    assert f"{WORD} plan of bob" in mine.json["context"]
    return [other, mine]


def _list_memories(w: World, bob: Api) -> list[Any]:
    other, mine = _refused_then_served(bob, "/v1/memories", {"namespace": ALICE})
    assert [r["record_id"] for r in mine.json["items"]] == [w.records[BOB]]
    return [other, mine]


def _create_memory(w: World, bob: Api) -> list[Any]:
    res = bob.post("/v1/memories", json={"namespace": ALICE, "title": "planted", "summary": ""})
    assert res.status_code == 403
    assert [r.title for r in w.storage.list_memory_records(ALICE).items] == [
        f"{WORD} plan of alice"
    ]
    return [res]


def _patch_memory(w: World, bob: Api) -> list[Any]:
    res = bob.patch(f"/v1/memories/{w.records[ALICE]}", json={"pinned": True})
    assert res.status_code == 404
    assert w.storage.get_memory_record(w.records[ALICE]).pinned is False  # type: ignore[union-attr]
    return [res]


def _delete_memory(w: World, bob: Api) -> list[Any]:
    res = bob.delete(f"/v1/memories/{w.records[ALICE]}")
    assert res.status_code == 404
    assert w.storage.get_memory_record(w.records[ALICE]) is not None
    assert [a.action for a in w.storage.list_audit()] == ["token_create"]
    return [res]


def _timeline(w: World, bob: Api) -> list[Any]:
    res = bob.get("/v1/timeline", query_string={"record_id": w.records[ALICE]})
    assert res.status_code == 404
    return [res]


def _list_events(w: World, bob: Api) -> list[Any]:
    other, mine = _refused_then_served(bob, "/v1/events", {"namespace": "/actor/alice/"})
    assert [e["event_id"] for e in mine.json["items"]] == [w.events[BOB]]
    return [other, mine]


def _projects(w: World, bob: Api) -> list[Any]:
    res = bob.get("/v1/projects")
    assert res.status_code == 200
    assert [p["namespace"] for p in res.json] == [BOB]
    return [res]


def _stats(w: World, bob: Api) -> list[Any]:
    other, mine = _refused_then_served(bob, "/v1/stats", {"namespace": ALICE})
    assert (mine.json["memories"], mine.json["events"]) == (1, 1)
    return [other, mine]


def _retrievals(w: World, bob: Api) -> list[Any]:
    prompt = make_event("prompt", namespace=ALICE, body={"type": "text", "content": WORD})
    made = w.admin.post("/v1/events?retrieve=true", json=prompt)
    assert made.status_code == 201 and made.json["retrieval"]["retrieval_id"]
    # bob's own defaults to /actor/bob/: none of alice's rows
    other, mine = _refused_then_served(bob, "/v1/retrievals", {"namespace": ALICE})
    assert mine.json["items"] == []
    return [other, mine]


def _retrieval_sessions(w: World, bob: Api) -> list[Any]:
    prompt = make_event("prompt", namespace=ALICE, body={"type": "text", "content": WORD})
    assert w.admin.post("/v1/events?retrieve=true", json=prompt).status_code == 201
    path = "/v1/retrievals/sessions"
    other, mine = _refused_then_served(bob, path, {"namespace": ALICE}, {"namespace": BOB})
    assert mine.json["items"] == []
    seen = w.admin.get("/v1/retrievals/sessions", query_string={"namespace": ALICE})
    assert [s["prompts"] for s in seen.json["items"]] == [1]
    return [other, mine]


def _get_retrieval(w: World, bob: Api) -> list[Any]:
    prompt = make_event("prompt", namespace=ALICE, body={"type": "text", "content": WORD})
    made = w.admin.post("/v1/events?retrieve=true", json=prompt)
    rid = made.json["retrieval"]["retrieval_id"]
    other = bob.get(f"/v1/retrievals/{rid}")
    assert other.status_code == 404  # as if it did not exist
    assert w.admin.get(f"/v1/retrievals/{rid}").status_code == 200
    return [other]


def _export(w: World, bob: Api) -> list[Any]:
    # bob's own defaults to /actor/bob/
    other, mine = _refused_then_served(bob, "/v1/export", {"namespace": ALICE})
    assert w.records[BOB] in mine.get_data(as_text=True)
    return [other, mine]


def _openapi(w: World, bob: Api) -> list[Any]:
    res = bob.get("/openapi.json")  # public: the contract, no user content
    assert res.status_code == 200 and res.json["openapi"].startswith("3.1")
    return [res]


def _split_memory(w: World, bob: Api) -> list[Any]:
    res = bob.post(f"/v1/memories/{w.records[ALICE]}/split", json={})
    assert res.status_code == 404
    assert w.storage.get_memory_record(w.records[ALICE]) is not None
    return [res]


def _code_state(w: World, bob: Api) -> list[Any]:
    other = bob.get("/v1/memories/code", query_string={"namespace": ALICE, "ids": w.records[ALICE]})
    wide = bob.get("/v1/memories/code", query_string={"namespace": BOB, "ids": w.records[ALICE]})
    assert other.status_code == 403
    assert wide.status_code == 200 and wide.json["items"] == {}
    return [other, wide]


def _anchors(w: World, bob: Api) -> list[Any]:
    # An actor prefix is no project: bob names his own.
    return _refused_then_served(bob, "/v1/memories/anchors", {"namespace": ALICE},
                                {"namespace": BOB})  # fmt: skip


def _retire(w: World, bob: Api) -> list[Any]:
    other = bob.post("/v1/memories/retire", json={"namespace": ALICE, "ids": [w.records[ALICE]]})
    mine = bob.post("/v1/memories/retire", json={"namespace": BOB, "ids": [w.records[ALICE]]})
    assert (other.status_code, other.json["error"]) == (403, "forbidden_scope")
    assert mine.status_code == 404  # as if it did not exist
    assert w.storage.get_memory_record(w.records[ALICE]) is not None
    return [other, mine]


def _move_project(w: World, bob: Api) -> list[Any]:
    away = bob.post("/v1/projects/move", json={"from": ALICE, "to": BOB})
    into = bob.post("/v1/projects/move", json={"from": BOB, "to": ALICE, "dry_run": True})
    for res in (away, into):
        assert (res.status_code, res.json["error"]) == (403, "forbidden_scope")
    assert w.storage.get_memory_record(w.records[ALICE]).namespace == ALICE  # type: ignore[union-attr]
    assert w.storage.get_memory_record(w.records[BOB]).namespace == BOB  # type: ignore[union-attr]
    return [away, into]


def _bulk_delete(w: World, bob: Api) -> list[Any]:
    by_filter = bob.post("/v1/memories/delete", json={"namespace": ALICE, "dry_run": True})
    by_ids = bob.post("/v1/memories/delete", json={"ids": [w.records[ALICE]]})
    assert by_filter.status_code == 403
    assert by_ids.status_code == 200 and by_ids.json["records"] == 0  # not selectable
    assert w.storage.get_memory_record(w.records[ALICE]) is not None
    return [by_filter, by_ids]


def _context_preview(w: World, bob: Api) -> list[Any]:
    alice, own = {"namespace": ALICE, "prompt": WORD}, {"namespace": BOB, "prompt": WORD}
    return _refused_then_served(bob, "/v1/context/preview", alice, own)


def _ui(w: World, bob: Api) -> list[Any]:
    page = bob.get("/ui")  # the page holds no data: it loads without asking
    assert page.status_code == 200
    return [page]


def _ui_token(w: World, bob: Api) -> list[Any]:
    # A token is no way to a code's token: only a code wakemark ui issued is.
    res = bob.post("/ui/token", json={"code": "x" * 32})
    assert res.status_code == 403 and res.json["error"] == "invalid_code"
    return [res]


CASES: dict[tuple[str, str], Case] = {
    ("GET", "/v1/memories/<record:record_id>/source"): _by_id("memories", "/source"),
    ("POST", "/v1/memories/delete"): _bulk_delete,
    ("GET", "/v1/memories/<record:record_id>/history"): _by_id("memories", "/history"),
    ("POST", "/v1/memories/<record:record_id>/split"): _split_memory,
    ("GET", "/v1/memories/code"): _code_state,
    ("GET", "/v1/memories/anchors"): _anchors,
    ("POST", "/v1/memories/retire"): _retire,
    ("GET", "/v1/context/preview"): _context_preview,
    ("GET", "/ui"): _ui,
    ("GET", "/ui/"): _ui,
    ("GET", "/ui/static/<path:name>"): lambda w, bob: [bob.get("/ui/static/nope.js")],
    ("POST", "/ui/token"): _ui_token,
    ("GET", "/openapi.json"): _openapi,
    ("GET", "/v1/retrievals"): _retrievals,
    ("GET", "/v1/retrievals/sessions"): _retrieval_sessions,
    ("GET", "/v1/retrievals/<retrieval_id>"): _get_retrieval,
    ("GET", "/v1/export"): _export,
    ("GET", "/health"): _health,
    ("GET", "/metrics"): _metrics,
    ("GET", "/static/<path:filename>"): _static,
    ("GET", "/v1/audit"): _audit,
    ("POST", "/v1/events"): _post_events,
    ("POST", "/v1/hooks/<agent>"): _post_hook,
    ("GET", "/v1/search"): _search,
    ("GET", "/v1/context"): _context,
    ("GET", "/v1/memories"): _list_memories,
    ("POST", "/v1/memories"): _create_memory,
    ("GET", "/v1/memories/<record:record_id>"): _by_id("memories"),
    ("PATCH", "/v1/memories/<record:record_id>"): _patch_memory,
    ("DELETE", "/v1/memories/<record:record_id>"): _delete_memory,
    ("GET", "/v1/timeline"): _timeline,
    ("GET", "/v1/events"): _list_events,
    ("GET", "/v1/events/<event_id>"): _by_id("events"),
    ("GET", "/v1/projects"): _projects,
    ("POST", "/v1/projects/move"): _move_project,
    ("GET", "/v1/stats"): _stats,
}


def app_routes(app: Flask) -> set[tuple[str, str]]:
    return {
        (method, rule.rule)
        for rule in app.url_map.iter_rules()
        for method in rule.methods or ()
        if method not in ("HEAD", "OPTIONS")
    }


def test_every_route_has_a_scope_case(tmp_path: Path) -> None:
    app = create_app(Settings(home=tmp_path / "home", embedder="off"))
    routes = app_routes(app)
    assert sorted(routes - set(CASES)) == [], "add each new route to CASES with its scope rule"
    assert sorted(set(CASES) - routes) == []


@pytest.mark.parametrize("route", list(CASES), ids=" ".join)
def test_bobs_token_gets_no_alice_data(world: World, route: tuple[str, str]) -> None:
    bob = world.client(mint(world.storage, "bob"))
    for res in CASES[route](world, bob):
        assert "alice" not in res.get_data(as_text=True), route


# --- read-only, project scope, expiry, revocation ---------------------------------------

_URL_VALUES = {"agent": "claude-code"}


def _concrete(rule: str, w: World) -> str:
    values = {**_URL_VALUES, "record_id": w.records[ALICE], "event_id": w.events[ALICE]}

    def fill(match: re.Match[str]) -> str:
        name = match.group(1).split(":")[-1]
        assert name in values, f"give <{name}> a value in test_read_only_token_refuses_writes"
        return values[name]

    return re.sub(r"<([^>]+)>", fill, rule)


def test_read_only_token_refuses_every_write_and_reads(world: World, app: Flask) -> None:
    alice = world.client(mint(world.storage, "alice", read_only=True))
    # The viewer's code exchange takes no token (the page has none yet) and writes nothing.
    writes = sorted(
        r
        for r in app_routes(app)
        if r[0] in ("POST", "PUT", "PATCH", "DELETE") and r[1] != "/ui/token"
    )
    assert len(writes) >= 5
    before = world.storage.stats()
    event = make_event("note", namespace=ALICE)
    for method, rule in writes:
        body = event if rule == "/v1/events" else {"pinned": True}
        res = alice.request(method, _concrete(rule, world), json=body)
        assert (res.status_code, res.json["error"]) == (403, "read_only_token"), rule
    assert world.storage.stats() == before
    assert world.storage.get_event(event["event_id"]) is None
    assert world.storage.get_memory_record(world.records[ALICE]).pinned is False  # type: ignore[union-attr]
    res = alice.get("/v1/memories", query_string={"namespace": ALICE})
    assert [r["record_id"] for r in res.json["items"]] == [world.records[ALICE]]


def test_project_token_is_limited_to_its_project(world: World) -> None:
    p1 = world.client(mint(world.storage, "alice", project="p1"))
    assert p1.get("/v1/memories", query_string={"namespace": ALICE2}).status_code == 403
    wider = p1.get("/v1/memories", query_string={"namespace": "/actor/alice/"})
    assert (wider.status_code, wider.json["error"]) == (403, "forbidden_scope")
    mine = p1.get("/v1/memories")
    assert [r["record_id"] for r in mine.json["items"]] == [world.records[ALICE]]
    assert p1.get(f"/v1/memories/{world.records[ALICE2]}").status_code == 404
    assert [p["namespace"] for p in p1.get("/v1/projects").json] == [ALICE]
    assert (
        p1.get("/v1/search", query_string={"q": WORD}).json["items"][0]["record"]["namespace"]
        == ALICE
    )
    ok = p1.post("/v1/memories", json={"namespace": ALICE, "title": "fine", "summary": ""})
    assert ok.status_code == 201
    assert (
        p1.post(
            "/v1/memories", json={"namespace": ALICE2, "title": "no", "summary": ""}
        ).status_code
        == 403
    )


def test_project_token_hooks_only_for_its_project(world: World) -> None:
    root = "/home/alice/shop"
    shop = world.client(mint(world.storage, "alice", project=project.project_id(root)))
    other = shop.post("/v1/hooks/claude-code", json=_hook_payload("/home/alice/elsewhere"))
    assert (other.status_code, other.json["error"]) == (403, "forbidden_scope")
    ok = shop.post("/v1/hooks/claude-code", json=_hook_payload(root))
    assert ok.status_code in (200, 204)
    [event] = world.storage.list_events(session_id="s-hook")
    assert event.namespace == f"/actor/alice/project/{project.project_id(root)}/"


def test_expired_revoked_and_unknown_tokens_are_401(world: World) -> None:
    expired = world.client(mint(world.storage, "bob", expires=timedelta(seconds=-1)))
    assert expired.get("/v1/stats").status_code == 401
    brief = world.client(mint(world.storage, "bob", expires=timedelta(seconds=1)))
    assert brief.get("/v1/stats").status_code == 200
    time.sleep(1.1)
    res = brief.get("/v1/stats")  # cached, but expiry is checked on every request
    assert (res.status_code, res.json["error"]) == (401, "unauthorized")
    assert world.client("wmk_" + "x" * 43).get("/v1/stats").status_code == 401
    assert world.client("wmk_" + "x" * 5000).get("/v1/stats").status_code == 401
    assert world.admin.get("/v1/stats").status_code == 200


def test_revocation_takes_effect_within_the_cache_ttl(
    runtime: Runtime, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(security, "TOKEN_CACHE_TTL_S", 0.5)
    app = create_app(runtime=runtime)
    token, secret = tokens.create(runtime.storage, actor="bob", project=None, read_only=False,
                                  expires=None, name="x", who="test")  # fmt: skip
    bob = Api(app.test_client(), secret)
    assert bob.get("/v1/stats").status_code == 200
    assert tokens.revoke(runtime.storage, token.token_id, "test")
    time.sleep(0.6)
    assert bob.get("/v1/stats").status_code == 401
    assert security.TokenCache()._ttl == 0.5  # the default TTL is read from the module


def test_last_used_is_recorded(world: World) -> None:
    secret = mint(world.storage, "bob")
    [before] = [t for t in world.storage.list_tokens() if t.name == "test"]
    assert before.last_used_at is None
    assert world.client(secret).get("/v1/stats").status_code == 200
    [after] = world.storage.list_tokens()
    assert after.last_used_at is not None and after.last_used_at >= after.created_at


# --- rate limit and audit -------------------------------------------------------------


def test_rate_limit_429_with_retry_after(sqlite_settings: Settings) -> None:
    rt = Runtime.build(sqlite_settings.replace(rate_limit_per_min=3))
    try:
        app = create_app(runtime=rt)
        client = app.test_client()
        first, second = mint(rt.storage, "bob"), mint(rt.storage, "bob")
        bob = Api(client, first)
        assert [bob.get("/v1/stats").status_code for _ in range(3)] == [200, 200, 200]
        res = bob.get("/v1/stats")
        assert (res.status_code, res.json["error"]) == (429, "rate_limited")
        assert 1 <= int(res.headers["Retry-After"]) <= 20  # one request refills in 20 s
        assert Api(client, second).get("/v1/stats").status_code == 200  # per token
        admin = Api(client, ensure_token(sqlite_settings))
        assert {admin.get("/v1/stats").status_code for _ in range(10)} == {200}
    finally:
        rt.close()


def test_rate_limit_zero_is_off(sqlite_settings: Settings) -> None:
    rt = Runtime.build(sqlite_settings.replace(rate_limit_per_min=0))
    try:
        bob = Api(create_app(runtime=rt).test_client(), mint(rt.storage, "bob"))
        assert {bob.get("/v1/stats").status_code for _ in range(20)} == {200}
    finally:
        rt.close()


def test_delete_is_audited_with_the_token(world: World) -> None:
    token, secret = tokens.create(world.storage, actor="bob", project=None, read_only=False,
                                  expires=None, name="ci", who="test")  # fmt: skip
    bob = world.client(secret)
    assert bob.delete(f"/v1/memories/{world.records[BOB]}").status_code == 204
    assert world.admin.delete(f"/v1/memories/{world.records[ALICE]}").status_code == 204
    res = world.admin.get("/v1/audit", query_string={"limit": 10})
    assert res.status_code == 200
    items = [{k: i[k] for k in ("who", "action", "namespace", "targets", "count")}
             for i in res.json["items"]]  # fmt: skip
    assert items == [
        {"who": "bootstrap", "action": "delete", "namespace": ALICE,
         "targets": [world.records[ALICE]], "count": 1},
        {"who": f"{token.token_id} (ci)", "action": "delete", "namespace": BOB,
         "targets": [world.records[BOB]], "count": 1},
        {"who": "test", "action": "token_create", "namespace": "/actor/bob/",
         "targets": [token.token_id], "count": 1},
    ]  # fmt: skip
    assert "T" in res.json["items"][0]["at"]  # ISO-8601
    assert world.admin.get("/v1/audit", query_string={"limit": 0}).status_code == 400


def test_scoped_events_carry_the_tokens_own_actor(world: World) -> None:
    bob = world.client(mint(world.storage, "bob"))
    posing = make_event("note", namespace=BOB, actor_id="alice")
    res = bob.post("/v1/events", json=posing)
    assert (res.status_code, res.json["error"]) == (403, "forbidden_scope")
    fine = make_event("note", namespace=BOB, actor_id="bob")
    batch = bob.post("/v1/events", json={"events": [fine, posing]})
    assert batch.status_code == 403
    stored = world.storage.list_events(namespace=BOB, limit=10)
    assert [e.event_id for e in stored] == [world.events[BOB]]  # neither one nor the batch
    own = make_event("note", namespace=BOB, actor_id="bob")
    assert bob.post("/v1/events", json=own).status_code == 201
    assert world.storage.get_event(own["event_id"]).actor_id == "bob"  # type: ignore[union-attr]
    # The bootstrap token writes for anyone, as before.
    other = make_event("note", namespace=BOB, actor_id="carol")
    assert world.admin.post("/v1/events", json=other).status_code == 201


def test_an_event_id_taken_in_another_namespace_is_no_duplicate(world: World) -> None:
    """Bob reusing the id of alice's event learns nothing and keeps nothing of hers out."""
    bob = world.client(mint(world.storage, "bob"))
    alices = world.events[ALICE]
    mine = make_event("note", namespace=BOB, actor_id="bob", event_id=alices)
    first = bob.post("/v1/events", json=mine)
    assert (first.status_code, first.json) == (201, {"event_id": alices, "stored": True})
    again = bob.post("/v1/events", json=mine)
    assert (again.status_code, again.json) == (201, {"event_id": alices, "stored": False})
    assert world.storage.get_event(alices).namespace == ALICE  # type: ignore[union-attr]
    listed = bob.get("/v1/events", query_string={"namespace": BOB})
    assert sorted(e["kind"] for e in listed.json["items"]) == ["note", "prompt"]
    assert WORD not in str([e for e in listed.json["items"] if e["kind"] == "note"])
    # Alice's own redelivery is still her duplicate.
    alice = world.client(mint(world.storage, "alice"))
    resent = make_event("prompt", namespace=ALICE, actor_id="alice", event_id=alices)
    redelivery = alice.post("/v1/events", json=resent)
    assert (redelivery.status_code, redelivery.json["stored"]) == (201, False)

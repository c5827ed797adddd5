"""The viewer's HTTP surface on both backends: pages and their headers, provenance, record
corrections, bulk delete (dry run = what is then deleted) and the context preview."""

from __future__ import annotations

import os
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np

from tests.storage.test_curation import fulltext_docs
from wakemark.services.ui.pages import CSP
from wakemark.shared.models import Event, MemoryRecord
from wakemark.shared.runtime import Runtime

from .conftest import NS, Api, make_event

OTHER = "/actor/alice/project/p2/"
T0 = datetime(2025, 1, 1, tzinfo=UTC)


def _put(runtime: Runtime, title: str, ns: str = NS, minutes: int = 0, **kw: Any) -> MemoryRecord:
    record = MemoryRecord(
        namespace=ns, title=title, created_at=T0 + timedelta(minutes=minutes), **kw
    )
    runtime.storage.put_memory_record(record)
    runtime.storage.put_embedding(record.record_id, np.ones(384, dtype=np.float32))
    return record


def _ids(api: Api, q: str, ns: str = NS) -> list[str]:
    res = api.get("/v1/search", query_string={"namespace": ns, "q": q})
    assert res.status_code == 200, res.json
    return [hit["record"]["record_id"] for hit in res.json["items"]]


# --- pages and their guards ----------------------------------------------------------------


def test_pages_load_without_the_token_and_carry_the_csp(sqlite_api: Api) -> None:
    for path in (
        "/ui",
        "/ui/",
        "/ui/static/app.js",
        "/ui/static/pages/feed.js",
        "/ui/static/style.css",
    ):
        res = sqlite_api.get(path, token=None)
        assert res.status_code == 200, path
        assert res.headers["Content-Security-Policy"] == CSP
        assert res.headers["X-Content-Type-Options"] == "nosniff"
        assert res.headers["Referrer-Policy"] == "no-referrer"
        assert res.headers["X-Frame-Options"] == "DENY"
        assert res.headers["Cross-Origin-Resource-Policy"] == "same-origin"
    assert sqlite_api.get("/ui/static/app.js", token=None).mimetype == "text/javascript"
    page = sqlite_api.get("/ui", token=None).get_data(as_text=True)
    assert '<script type="module" src="/ui/static/app.js">' in page
    assert "style=" not in page and "<script>" not in page  # nothing inline for the CSP to allow
    for path in ("/ui/static/../pages.py", "/ui/static/nope.js", "/ui/other"):
        res = sqlite_api.get(path, token=None)
        assert res.status_code == 404 and res.headers["Content-Security-Policy"] == CSP


def test_data_calls_need_the_token_loopback_host_and_same_origin(sqlite_api: Api) -> None:
    assert sqlite_api.get("/v1/projects", token=None).status_code == 401
    assert sqlite_api.get(f"/v1/context/preview?namespace={NS}", token=None).status_code == 401
    evil = {"Host": "evil.example:37800"}
    res = sqlite_api.get("/ui", token=None, headers=evil)
    assert res.status_code == 403 and res.headers["Content-Security-Policy"] == CSP
    assert sqlite_api.get("/v1/projects", headers=evil).status_code == 403
    created = sqlite_api.post(
        "/v1/memories", json={"namespace": NS, "title": "keep", "summary": ""}
    )
    assert created.status_code == 201, created.json
    rid = created.json["record_id"]
    cross = {"Origin": "http://evil.example"}
    assert sqlite_api.delete(f"/v1/memories/{rid}", headers=cross).status_code == 403
    assert (
        sqlite_api.patch(f"/v1/memories/{rid}", json={"pinned": True}, headers=cross).status_code
        == 403
    )
    res = sqlite_api.post("/v1/memories/delete", json={"ids": [rid]}, headers=cross)
    assert res.status_code == 403
    assert sqlite_api.get(f"/v1/memories/{rid}").status_code == 200
    same = {"Origin": "http://127.0.0.1:37800"}
    assert sqlite_api.delete(f"/v1/memories/{rid}", headers=same).status_code == 204


# --- provenance -------------------------------------------------------------------------------


def test_source_shows_the_turn_and_the_skipped_turns_of_its_session(
    api: Api, runtime: Runtime
) -> None:
    skipped = make_event(body={"type": "text", "content": "just saying thanks"})
    prompt = make_event(body={"type": "text", "content": "why does the build fail?"})
    tool = make_event(
        "tool_use",
        body={
            "type": "json",
            "data": {
                "tool_name": "Bash",
                "tool_input": {"command": "make build"},
                "tool_response": {"stdout": "error: missing <img src=x>", "exit_code": 2},
            },
        },
    )
    edit = make_event(
        "tool_use",
        body={
            "type": "json",
            "data": {"tool_name": "Edit", "tool_input": {"file_path": "/home/a/p1/Makefile"}},
        },
    )
    answer = make_event("session_summary", body={"type": "text", "content": "Fixed the target."})
    storage = runtime.storage
    # Stored directly, not posted: posting would queue extraction, which races this test.
    storage.put_events([Event.model_validate(e) for e in (skipped, prompt, tool, edit, answer)])
    skipped_turn = storage.get_event(skipped["event_id"]).turn_id  # type: ignore[union-attr]
    turn = storage.get_event(prompt["event_id"]).turn_id  # type: ignore[union-attr]
    sources = [e["event_id"] for e in (prompt, tool, edit, answer)]
    record = MemoryRecord(namespace=NS, title="build fix", source_event_ids=sources)
    with storage.transaction() as tx:
        tx.put_memory_record(record)
        tx.mark_turn_extracted(turn or "", [record.record_id])
        tx.mark_turn_extracted(skipped_turn or "", [], skip_reason="trivial")
    res = api.get(f"/v1/memories/{record.record_id}/source")
    assert res.status_code == 200, res.json
    (source_turn,) = res.json["turns"]
    assert source_turn["turn_id"] == turn and source_turn["session_id"] == "s1"
    assert source_turn["prompt"] == "why does the build fail?"
    assert source_turn["answer"] == "Fixed the target."
    bash, edit_use = source_turn["tool_uses"]
    assert (bash["command"], bash["exit_code"]) == ("make build", 2)
    assert edit_use["files"] == [{"verb": "edited", "path": "/home/a/p1/Makefile"}]
    assert res.json["missing_event_ids"] == []
    (gap,) = res.json["skipped_turns"]
    assert gap["turn_id"] == skipped_turn and gap["prompt"] == "just saying thanks"
    assert gap["reason"] == "trivial"  # as extraction recorded it
    assert api.get("/v1/memories/mr_00000000000000000000000000/source").status_code == 404
    assert api.get(f"/v1/memories/{'x' * 100}/source").status_code == 404


# --- corrections ------------------------------------------------------------------------------


def test_correcting_a_record_reindexes_it_and_queues_a_new_embedding(
    api: Api, runtime: Runtime
) -> None:
    record = _put(runtime, "flaky quokka test", summary="old", facts=["old fact"])
    assert _ids(api, "quokka") == [record.record_id]
    res = api.patch(
        f"/v1/memories/{record.record_id}",
        json={"title": "flaky wombat test", "facts": ["retry the <b>fixture</b>"]},
    )
    assert res.status_code == 200, res.json
    assert res.json["title"] == "flaky wombat test" and res.json["summary"] == "old"
    assert res.json["facts"] == ["retry the <b>fixture</b>"] and res.json["edited_at"]
    assert _ids(api, "quokka") == [] and _ids(api, "wombat") == [record.record_id]
    assert fulltext_docs(runtime.storage, "quokka") == 0
    # The embed job redoes it (embedder off here: it stays pending, visibly).
    assert not runtime.storage.has_embedding(record.record_id)
    assert api.get(f"/v1/stats?namespace={NS}").json["pending_embedding"] == 1
    both = api.patch(f"/v1/memories/{record.record_id}", json={"pinned": True, "summary": "new"})
    assert both.json["pinned"] is True and both.json["summary"] == "new"
    for bad in ({"title": ""}, {"title": "x" * 201}, {"facts": "one"}, {"summary": 3}, {}):
        assert api.patch(f"/v1/memories/{record.record_id}", json=bad).status_code == 422, bad
    assert (
        api.patch("/v1/memories/mr_00000000000000000000000000", json={"title": "x"}).status_code
        == 404
    )


# --- bulk delete ------------------------------------------------------------------------------


def test_bulk_delete_by_filter_deletes_what_the_dry_run_counted(api: Api, runtime: Runtime) -> None:
    first = api.post("/v1/events", json=make_event(session_id="gone")).json["event_id"]
    doomed = [
        _put(runtime, f"zyzzyva doomed {i}", minutes=10 + i, observation_type="bugfix",
             source_event_ids=[first])
        for i in range(3)
    ]  # fmt: skip
    kept = [
        _put(runtime, "zyzzyva early", minutes=0, observation_type="bugfix"),
        _put(runtime, "zyzzyva other type", minutes=12, observation_type="note"),
        _put(runtime, "zyzzyva late", minutes=30, observation_type="bugfix"),
        _put(runtime, "zyzzyva elsewhere", ns=OTHER, minutes=12, observation_type="bugfix"),
    ]
    where = {
        "namespace": NS,
        "type": "bugfix",
        "after": (T0 + timedelta(minutes=10)).isoformat(),
        "before": (T0 + timedelta(minutes=30)).isoformat(),
    }
    dry = api.post("/v1/memories/delete", json={**where, "dry_run": True, "with_events": True})
    assert dry.status_code == 200, dry.json
    assert (dry.json["records"], dry.json["embeddings"], dry.json["events"]) == (3, 3, 1)
    assert sorted(dry.json["record_ids"]) == sorted(r.record_id for r in doomed)
    assert all(runtime.storage.get_memory_record(r.record_id) for r in doomed)  # dry: nothing gone
    done = api.post("/v1/memories/delete", json={**where, "with_events": True})
    assert done.status_code == 200, done.json
    assert (done.json["records"], done.json["events"]) == (dry.json["records"], 1)
    assert all(runtime.storage.get_memory_record(r.record_id) is None for r in doomed)
    assert all(runtime.storage.get_memory_record(r.record_id) for r in kept)
    assert runtime.storage.get_event(first) is None
    assert sorted(_ids(api, "zyzzyva")) == sorted(r.record_id for r in kept[:3])
    assert fulltext_docs(runtime.storage, "doom") + fulltext_docs(runtime.storage, "doomed") == 0
    embedded = set(runtime.storage.embedded_ids("/actor/alice/"))
    assert embedded == {r.record_id for r in kept}
    again = api.post("/v1/memories/delete", json={**where, "dry_run": True})
    assert again.json["records"] == 0


def test_bulk_delete_by_ids_and_by_session(api: Api, runtime: Runtime) -> None:
    ev = api.post("/v1/events", json=make_event(session_id="s9")).json["event_id"]
    a = _put(runtime, "by id", source_event_ids=[ev])
    b = _put(runtime, "from session s9", source_event_ids=[ev], minutes=1)
    c = _put(runtime, "unrelated", minutes=2)
    unknown = "mr_00000000000000000000000000"
    dry = api.post("/v1/memories/delete", json={"ids": [a.record_id, unknown], "dry_run": True})
    assert (dry.json["records"], dry.json["events"]) == (1, 0)
    done = api.post("/v1/memories/delete", json={"ids": [a.record_id, unknown]})
    assert done.json == {"dry_run": False, "records": 1, "events": 0, "record_ids": [a.record_id]}
    assert runtime.storage.get_event(ev) is not None  # not asked: events stay
    by_session = {"namespace": NS, "session_id": "s9"}
    assert (
        api.post("/v1/memories/delete", json={**by_session, "dry_run": True}).json["records"] == 1
    )
    assert api.post("/v1/memories/delete", json=by_session).json["records"] == 1
    assert runtime.storage.get_memory_record(b.record_id) is None
    assert runtime.storage.get_memory_record(c.record_id) is not None


def test_bulk_delete_refuses_what_it_cannot_bound(sqlite_api: Api) -> None:
    bad = [
        {},
        {"type": "bugfix"},
        {"ids": ["mr_00000000000000000000000000"], "namespace": NS},
        {"namespace": "/nope/"},
        {"namespace": NS, "dry_run": "yes"},
        {"namespace": NS, "type": "nonsense"},
        {"namespace": NS, "before": "yesterday"},
        {"namespace": NS, "before": "2025-01-01T00:00:00"},  # no time zone
        {"ids": ["not-an-id"]},
        {"ids": "mr_00000000000000000000000000"},
        {"namespace": NS, "colour": "red"},
    ]
    for body in bad:
        assert sqlite_api.post("/v1/memories/delete", json=body).status_code == 422, body
    assert (
        sqlite_api.post(
            "/v1/memories/delete", data="[", content_type="application/json"
        ).status_code
        == 400
    )


# --- context preview --------------------------------------------------------------------------


def test_preview_is_what_the_hooks_would_inject(api: Api, runtime: Runtime) -> None:
    pinned = _put(runtime, "Always run make lint", summary="ruff and mypy", pinned=True)
    other = _put(runtime, "Deploys go through the staging cluster", minutes=5)
    res = api.get("/v1/context/preview", query_string={"namespace": NS})
    assert res.status_code == 200, res.json
    index = res.json["index"]
    expected = api.get(f"/v1/context?namespace={NS}").json
    assert index["context"] == expected["context"] and index["used_bytes"] == expected["used_bytes"]
    assert index["budget_bytes"] == runtime.settings.context_max_bytes
    assert index["context"].index(pinned.title) < index["context"].index(other.title)
    assert res.json["prompt"] is None

    prompt = "how do I lint before a commit"
    res = api.get("/v1/context/preview", query_string={"namespace": NS, "prompt": prompt})
    block = res.json["prompt"]
    hook = api.post(
        "/v1/events?retrieve=true", json=make_event(body={"type": "text", "content": prompt})
    ).json["retrieval"]
    # The same gate decides both: the preview is exactly what the hook got.
    assert block["context"] == hook["context"] and block["records"] == hook["records"]
    assert block["used_bytes"] == len(block["context"].encode())
    # The prompt hook's own budget, not the session index's.
    assert block["budget_bytes"] == runtime.settings.prompt_max_bytes
    assert runtime.settings.prompt_max_bytes != runtime.settings.context_max_bytes
    candidates = {c["record"]["record_id"]: c for c in block["candidates"]}
    assert candidates[pinned.record_id]["match_source"] in ("fts", "hybrid", "semantic")
    assert 0.0 <= candidates[pinned.record_id]["relevance"] <= 1.0
    assert all(c["injected"] == (rid in block["records"]) for rid, c in candidates.items())
    # Nothing stored: the preview is not an event.
    assert api.get(f"/v1/stats?namespace={NS}").json["events"] == 1

    assert api.get("/v1/context/preview").status_code == 400
    assert api.get("/v1/context/preview?namespace=/actor/alice/").status_code == 400
    long = {"namespace": NS, "prompt": "x" * 5000}
    assert api.get("/v1/context/preview", query_string=long).status_code == 400


def test_feed_pages_without_counting_and_projects_name_their_path(api: Api) -> None:
    for i in range(3):
        api.post("/v1/memories", json={"namespace": NS, "title": f"m{i}", "summary": ""})
    api.post("/v1/events", json=make_event())
    page = api.get(f"/v1/memories?namespace={NS}&limit=2&count=false").json
    assert page["total"] is None and [r["title"] for r in page["items"]] == ["m2", "m1"]
    assert api.get(f"/v1/memories?namespace={NS}&count=maybe").status_code == 400
    (project,) = api.get("/v1/projects").json
    assert project["project_path"] == "/home/a/p1" and project["display_name"] == "p1"


def test_nul_characters_are_never_a_500(api: Api) -> None:
    """A body's NUL is stored as U+FFFD (Postgres text cannot hold U+0000; the body parser
    replaces it for every route); a query string's is a 400, a path's a 404."""
    created = api.post("/v1/memories", json={"namespace": NS, "title": "ok", "summary": ""})
    rid = created.json["record_id"]
    nul = "a\u0000b"
    made = api.post("/v1/memories", json={"namespace": NS, "title": nul, "summary": ""})
    assert made.status_code == 201
    assert api.get(f"/v1/memories/{made.json['record_id']}").json["title"] == "a\ufffdb"
    patched = api.patch(f"/v1/memories/{rid}", json={"facts": [nul]})
    assert patched.status_code == 200 and patched.json["facts"] == ["a\ufffdb"]
    body = {"namespace": NS, "session_id": nul, "dry_run": True}
    dry = api.post("/v1/memories/delete", json=body)
    assert dry.status_code == 200 and dry.json["records"] == 0
    preview = {"namespace": NS, "prompt": nul}
    assert api.get("/v1/context/preview", query_string=preview).status_code == 400
    for path in ("/v1/memories/a%00b", "/v1/memories/a%00b/source", "/v1/events/a%00b"):
        assert api.get(path).status_code == 404, path
    assert api.delete("/v1/memories/a%00b").status_code == 404
    assert api.get(f"/v1/memories/{rid}").json["title"] == "ok"


def test_audit_pages_sessions_and_their_prompts_by_key(api: Api) -> None:
    """Per session: its prompts, what was injected, bytes and latency, newest session
    first, each list paged by ``next``; a malformed ``after`` is a 400, never a 500."""
    api.post("/v1/memories", json={"namespace": NS, "title": "run the tests with make test",
                                   "summary": "make test runs pytest"})  # fmt: skip
    for session in ("s1", "s2", "s1", "s3"):
        body = {"type": "text", "content": "how do I run the tests?"}
        res = api.post("/v1/events?retrieve=true", json=make_event(session_id=session, body=body))
        assert res.status_code == 201
    first = api.get("/v1/retrievals/sessions", query_string={"namespace": NS, "limit": 2}).json
    assert [s["session_id"] for s in first["items"]] == ["s3", "s1"]
    s1 = first["items"][1]
    rows = api.get("/v1/retrievals", query_string={"namespace": NS, "session_id": "s1"}).json
    assert s1["prompts"] == len(rows["items"]) == 2 and rows["next"] is None
    assert s1["injected"] == sum(r["decision"] == "inject" for r in rows["items"])
    assert s1["bytes"] == sum(r["bytes"] for r in rows["items"])
    assert s1["records"] == sum(len(r["injected"]) for r in rows["items"])
    page_two = {"namespace": NS, "limit": 2, "after": first["next"]}
    rest = api.get("/v1/retrievals/sessions", query_string=page_two).json
    assert [s["session_id"] for s in rest["items"]] == ["s2"] and rest["next"] is None
    one = api.get("/v1/retrievals", query_string={"namespace": NS, "session_id": "s1", "limit": 1})
    two = api.get("/v1/retrievals", query_string={"namespace": NS, "session_id": "s1", "limit": 1,
                                                  "after": one.json["next"]})  # fmt: skip
    paged = [r["retrieval_id"] for r in one.json["items"] + two.json["items"]]
    assert paged == [r["retrieval_id"] for r in rows["items"]]
    for bad in ("nope", "2025-02-30T00:00:00.000000Z,x"):
        query = {"namespace": NS, "after": bad}
        assert api.get("/v1/retrievals/sessions", query_string=query).status_code == 400
        assert api.get("/v1/retrievals", query_string=query).status_code == 400
    prefix = {"namespace": "/actor/alice/"}  # sessions are listed per project
    assert api.get("/v1/retrievals/sessions", query_string=prefix).status_code == 400


# --- the token hand-off --------------------------------------------------------------------


def test_a_code_is_traded_for_the_token_once(api: Api, runtime: Runtime) -> None:
    from wakemark.services.ui import handoff

    code = handoff.issue(runtime.settings)
    first = api.post("/ui/token", json={"code": code}, token=None)
    assert first.status_code == 200 and first.json == {"token": api.token}
    again = api.post("/ui/token", json={"code": code}, token=None)
    assert again.status_code == 403 and again.json["error"] == "invalid_code"
    for body in ({}, {"code": 5}, {"code": "../../token"}, {"code": "x" * 40}):
        res = api.post("/ui/token", json=body, token=None)
        assert res.status_code == 403 and res.json["error"] == "invalid_code", body
    assert api.post("/ui/token", json=[], token=None).status_code == 422
    deep = b"[" * 100_000 + b"]" * 100_000  # the API's one JSON parser: bounded depth
    res = api.post("/ui/token", data=deep, token=None, content_type="application/json")
    assert res.status_code == 400 and res.json["error"] == "bad_json"
    # Expired: the code's file is as old as its lifetime and more.
    stale = handoff.issue(runtime.settings)
    path = next(p for p in (runtime.settings.home / "ui-codes").iterdir())
    old = path.stat().st_mtime - handoff.CODE_TTL_S - 1
    os.utime(path, (old, old))
    assert api.post("/ui/token", json={"code": stale}, token=None).status_code == 403
    assert not any((runtime.settings.home / "ui-codes").iterdir())  # spent all the same
    # From another machine, even a good code is refused (and stays usable here).
    code = handoff.issue(runtime.settings)
    remote = api.post(
        "/ui/token", json={"code": code}, token=None, environ_base={"REMOTE_ADDR": "10.0.0.7"}
    )
    assert remote.status_code == 403 and remote.json["error"] == "forbidden"
    assert api.post("/ui/token", json={"code": code}, token=None).status_code == 200


def test_issuing_a_code_removes_the_expired_ones(runtime: Runtime) -> None:
    from wakemark.services.ui import handoff

    handoff.issue(runtime.settings)
    folder = runtime.settings.home / "ui-codes"
    (old,) = folder.iterdir()
    past = old.stat().st_mtime - handoff.CODE_TTL_S - 1
    os.utime(old, (past, past))
    handoff.issue(runtime.settings)
    assert len(list(folder.iterdir())) == 1 and not old.exists()
    assert folder.stat().st_mode & 0o777 == 0o700

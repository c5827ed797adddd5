"""``GET /v1/export``: the export file, streamed, behind the token."""

from __future__ import annotations

import json

from wakemark.shared.runtime import Runtime
from wakemark.shared.transfer import export_lines, import_lines

from .conftest import NS, Api, make_event


def test_export_streams_the_same_file_as_the_cli(api: Api, runtime: Runtime) -> None:
    assert api.post("/v1/events", json=make_event()).status_code == 201
    body = {"namespace": NS, "title": "Use uv", "summary": "uv is fast", "pinned": True}
    assert api.post("/v1/memories", json=body).status_code == 201
    res = api.get(f"/v1/export?namespace={NS}&events=true&vectors=1")
    assert res.status_code == 200 and res.mimetype == "application/x-ndjson"
    expected = b"".join(export_lines(runtime.storage, NS, events=True, vectors=True))
    assert res.data == expected
    lines = [json.loads(line) for line in res.data.splitlines()]
    assert lines[0]["format"] == "wakemark-export" and lines[0]["namespace"] == NS
    assert lines[-1] == {"type": "end", "records": 1, "turns": 1, "events": 1}
    everything = api.get("/v1/export").data.splitlines()
    assert json.loads(everything[0])["namespace"] is None and len(everything) == 3


def test_export_of_an_actor_reimports_as_a_no_op(api: Api, runtime: Runtime) -> None:
    api.post("/v1/memories", json={"namespace": NS, "title": "t", "summary": "s"})
    data = api.get("/v1/export?namespace=/actor/alice/&events=true").data
    report = import_lines(runtime.storage, data.splitlines(keepends=True))
    assert report.lines["record"] == 1 and report.written.records == 0


def test_export_needs_the_token_and_valid_parameters(api: Api) -> None:
    assert api.get("/v1/export", token=None).status_code == 401
    bad_ns = api.get("/v1/export?namespace=nope")
    assert bad_ns.status_code == 400 and bad_ns.json["error"] == "bad_request"
    assert api.get("/v1/export?events=maybe").status_code == 400

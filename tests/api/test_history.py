"""A record's history over the API, on both backends: the chain, list opt-in, split."""

from __future__ import annotations

from datetime import UTC, datetime
from urllib.parse import urlencode

from wakemark.services.mcp.client import ApiError
from wakemark.services.mcp.tools import Scope, get_records
from wakemark.shared.runtime import Runtime

from .conftest import NS, Api

OTHER = "/actor/alice/project/p2/"


def _memory(api: Api, title: str, namespace: str = NS) -> str:
    body = {"namespace": namespace, "title": title, "summary": f"{title}, in short"}
    res = api.post("/v1/memories", json=body)
    assert res.status_code == 201, res.json
    return res.json["record_id"]


def _supersede(runtime: Runtime, old_id: str, new_id: str) -> None:
    with runtime.storage.transaction() as tx:
        tx.lock_subjects(NS)
        assert tx.supersede(old_id, new_id, datetime.now(UTC))


def test_the_chain_is_listed_on_request_and_a_split_restores(api: Api, runtime: Runtime) -> None:
    v1, v2, v3 = (_memory(api, t) for t in ("font path fix", "font embed fix", "font cache fix"))
    _supersede(runtime, v1, v2)
    _supersede(runtime, v2, v3)

    page = api.get(f"/v1/memories?namespace={NS}").json
    assert [r["record_id"] for r in page["items"]] == [v3] and page["total"] == 1
    assert "superseded" not in page
    page = api.get(f"/v1/memories?namespace={NS}&superseded=true").json
    assert [v["record"]["record_id"] for v in page["superseded"]] == [v2, v1]

    found = api.get(f"/v1/search?namespace={NS}&q=font&superseded=true").json
    assert [h["record"]["record_id"] for h in found["items"]] == [v3]
    assert [v["record"]["record_id"] for v in found["superseded"]] == [v2, v1]
    assert "superseded" not in api.get(f"/v1/search?namespace={NS}&q=font").json

    chain = api.get(f"/v1/memories/{v3}/history").json
    assert chain["current_id"] == v3
    assert [(v["record"]["title"], v["superseded_by"]) for v in chain["items"]] == [
        ("font embed fix", v3),
        ("font path fix", v2),
    ]
    gone = api.get(f"/v1/memories/{v1}")  # a superseded id answers its version, marked
    assert gone.status_code == 200, gone.json
    assert (gone.json["title"], gone.json["superseded_by"], gone.json["current_id"]) == (
        "font path fix",
        v2,
        v3,
    )
    assert gone.json["superseded_at"] == chain["items"][1]["superseded_at"]
    assert "superseded_by" not in api.get(f"/v1/memories/{v3}").json
    for method in (api.patch, api.delete):  # a version is read, not changed, by its id
        assert method(f"/v1/memories/{v1}", json={"pinned": True}).status_code == 404
    old = api.get(f"/v1/memories/{v1}/history").json
    assert (old["record_id"], old["current_id"]) == (v1, v3) and old["items"] == chain["items"]

    res = api.post(f"/v1/memories/{v2}/split", json={})
    assert res.status_code == 200 and res.json["record_id"] == v2
    assert api.get(f"/v1/memories/{v2}").json["title"] == "font embed fix"
    restored = api.get(f"/v1/memories/{v2}/history").json["items"]
    assert [v["record"]["record_id"] for v in restored] == [v1]
    assert api.get(f"/v1/memories/{v3}/history").json["items"] == []
    assert api.post(f"/v1/memories/{v2}/split", json={}).status_code == 404  # current again
    assert api.post(f"/v1/memories/{v3}/split", json={}).status_code == 404
    assert api.get("/v1/memories/mr_" + "0" * 26 + "/history").status_code == 404


def test_mcp_get_records_returns_the_chain(api: Api, runtime: Runtime) -> None:
    old, new = _memory(api, "retry the upload"), _memory(api, "upload retries with backoff")
    _supersede(runtime, old, new)

    class Client:  # the MCP server's API calls, answered by the app itself
        def request(self, method: str, path: str, **_: object) -> object:
            assert method == "GET"
            res = api.get(path)
            if res.status_code != 200:
                raise ApiError(res.status_code, "error", "failed")
            return res.json

        def get(self, path: str, **params: str) -> object:
            return self.request("GET", f"{path}?{urlencode(params)}")

    scope = Scope(NS, "/actor/alice/")
    out = get_records(Client(), scope, {"ids": [old, new]})  # type: ignore[arg-type]
    assert [r["record_id"] for r in out.data["records"]] == [new, new]
    assert [v["record"]["record_id"] for v in out.data["records"][0]["history"]] == [old]
    assert "Superseded " in out.text and "retry the upload" in out.text

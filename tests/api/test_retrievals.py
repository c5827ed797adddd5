"""The retrieval audit routes, ``min_relevance`` on search and events, and the counters."""

from __future__ import annotations

from .conftest import NS, Api, make_event

TEXT = "Stripe webhook signature check fails behind the proxy"


def _memory(api: Api, title: str = TEXT) -> str:
    res = api.post("/v1/memories", json={"namespace": NS, "title": title, "summary": "body"})
    assert res.status_code == 201, res.json
    return res.json["record_id"]


def _prompt(api: Api, text: str, session: str = "s1", query: str = "") -> dict:
    event = make_event("prompt", session_id=session, body={"type": "text", "content": text})
    res = api.post(f"/v1/events?retrieve=true{query}", json=event)
    assert res.status_code == 201, res.json
    return {"event_id": event["event_id"], **res.json["retrieval"]}


def test_each_prompt_retrieval_is_audited_and_listed(api: Api) -> None:
    rid = _memory(api)
    hit = _prompt(api, "why does the stripe webhook signature check fail?")
    miss = _prompt(api, "which violin concerto tonight?", session="s2")
    assert hit["records"] == [rid] and miss["records"] == []
    row = api.get(f"/v1/retrievals/{hit['retrieval_id']}").json
    assert row["event_id"] == hit["event_id"] and row["session_id"] == "s1"
    assert row["decision"] == "inject" and row["injected"] == [rid]
    assert row["bytes"] == len(hit["context"].encode())
    assert row["candidates"][0]["record_id"] == rid and row["candidates"][0]["injected"]
    assert row["candidates"][0]["relevance"] >= row["min_relevance"]
    items = api.get(f"/v1/retrievals?namespace={NS}").json["items"]
    assert [i["retrieval_id"] for i in items] == [miss["retrieval_id"], hit["retrieval_id"]]
    one = api.get(f"/v1/retrievals?namespace={NS}&session_id=s2&limit=1").json["items"]
    assert [i["decision"] for i in one] == ["none"]
    assert api.get("/v1/retrievals?namespace=/actor/bob/").json["items"] == []
    assert "violin" not in str(items) and TEXT not in str(items)  # ids and numbers only


def test_min_relevance_on_events_overrides_the_setting(api: Api) -> None:
    _memory(api)
    off = _prompt(api, "stripe webhook signature fails", query="&min_relevance=1")
    assert off["records"] == [] and off["context"] == ""
    row = api.get(f"/v1/retrievals/{off['retrieval_id']}").json
    assert row["min_relevance"] == 1.0 and "below" in row["reason"]


def test_search_reports_relevance_and_filters_on_it(api: Api) -> None:
    rid = _memory(api)
    _memory(api, "Webhook retries back off")
    items = api.get(f"/v1/search?namespace={NS}&q=stripe+webhook+signature").json["items"]
    assert [i["record"]["record_id"] for i in items][0] == rid and len(items) == 2
    assert all(0 <= i["relevance"] <= 1 for i in items)
    top = items[0]["relevance"]
    cut = api.get(f"/v1/search?namespace={NS}&q=stripe+webhook+signature&min_relevance={top}")
    assert [i["record"]["record_id"] for i in cut.json["items"]] == [rid]


def test_bad_audit_and_relevance_parameters_are_4xx(api: Api) -> None:
    assert api.get("/v1/retrievals/01J000000000000000000000XX").status_code == 404
    for rid in ("x" * 300, "%00", "01J000000000000000000000%00"):
        assert api.get(f"/v1/retrievals/{rid}").status_code == 404, rid
    for query in ("limit=0", "limit=abc", "namespace=nope", "session_id=a%00b"):
        assert api.get(f"/v1/retrievals?{query}").status_code == 400, query
    for value in ("-0.1", "1.5", "nan", "abc"):
        res = api.get(f"/v1/search?namespace={NS}&q=x&min_relevance={value}")
        assert res.status_code == 400, value
        res = api.post(f"/v1/events?retrieve=true&min_relevance={value}", json=make_event())
        assert res.status_code == 400, value


def test_health_and_metrics_count_prompts_and_injections(api: Api) -> None:
    _memory(api)
    _prompt(api, "stripe webhook signature check fails")
    _prompt(api, "which violin concerto tonight?", session="s2")
    prompts = api.get("/health").json["search"]["prompts"]
    assert prompts["prompts"] == 2 and prompts["injected_share"] == 0.5
    assert prompts["mean_records"] == 1.0 and prompts["mean_bytes"] > 0
    text = api.get("/metrics").get_data(as_text=True)
    assert "wakemark_prompts_total 2" in text and "wakemark_prompts_injected_total 1" in text

"""``/health`` (liveness for anyone, figures for a token and only those of its scope, no
user content, degraded on a dead database) and ``/metrics``."""

from __future__ import annotations

import pytest

from wakemark.services.api import create_app, metrics
from wakemark.services.api.security import ensure_token
from wakemark.shared import __version__, tokens
from wakemark.shared.config import Settings
from wakemark.shared.runtime import Runtime

from .conftest import BASE, Api, make_event


def test_health_shape(api: Api) -> None:
    res = api.get("/health")
    assert res.status_code == 200
    body = res.json
    assert body["status"] == "ok"
    assert body["backend"] in ("sqlite", "postgres")
    assert set(body["jobs"]) >= {"mode", "queue_depth"}
    assert body["embedder"]["state"] == "off"
    assert set(body["pending"]) == {"extraction", "embedding"}
    assert body["skipped"] == {}
    assert isinstance(body["search"], dict)


def test_health_counts_skipped_turns_by_reason(api: Api, runtime: Runtime) -> None:
    from wakemark.shared.jobs.tasks import extract_turns

    for body in ("<local-command-stdout>See ya!</local-command-stdout>", "hello", "fix the login"):
        api.post("/v1/events", json=make_event(body={"type": "text", "content": body}))
    extract_turns(runtime, runtime.storage.pending_turns())  # the open "fix the login" waits
    body = api.get("/health").json
    assert body["skipped"] == {"command": 1, "trivial": 1}


def test_health_reports_llm_token_use(sqlite_settings: Settings) -> None:
    from wakemark.shared.extraction.budget import usage

    assert usage(sqlite_settings)["enabled"] is False
    settings = sqlite_settings.replace(
        llm_base_url="http://127.0.0.1:9/v1", llm_model="m", llm_daily_tokens=1234
    )
    rt = Runtime.build(settings)
    try:
        client = create_app(runtime=rt).test_client()
        auth = {"Authorization": f"Bearer {ensure_token(settings)}"}
        llm = client.get("/health", base_url=BASE, headers=auth).json["llm"]
    finally:
        rt.close()
    assert llm["enabled"] is True and llm["state"] == "ok"
    assert llm["budget"] == 1234 and llm["tokens_used"] == 0 and llm["remaining"] == 1234
    assert usage(sqlite_settings)["state"] == "off"


def test_health_state_is_exhausted_once_a_call_was_refused(sqlite_settings: Settings) -> None:
    from wakemark.shared.extraction.budget import reserve, usage

    tight = sqlite_settings.replace(llm_base_url="http://127.0.0.1:9/v1", llm_model="m",
                                    llm_daily_tokens=100)  # fmt: skip
    assert reserve(tight, 60) and usage(tight)["state"] == "ok"
    assert not reserve(tight, 60)
    assert usage(tight)["state"] == "exhausted"


def test_health_reports_size_gate_totals_and_capture_misses(api: Api, runtime: Runtime) -> None:
    from wakemark.services.api import hooks

    before = api.get("/health").json
    assert before["database"]["bytes"] > 0
    assert before["gate"]["prompts"] == 0 and before["gate"]["injected_share"] is None
    memory = {"namespace": make_event()["namespace"], "title": "run the tests with make test"}
    api.post("/v1/memories", json={**memory, "summary": ""})
    for _ in range(2):
        api.post("/v1/events?retrieve=true", json=make_event())
    rows = api.get("/v1/retrievals").json["items"]
    stops = hooks.STOP_WITHOUT_ANSWER.value
    stop = {"hook_event_name": "Stop", "session_id": "s9", "cwd": "/home/a/p1",
            "last_assistant_message": ""}  # fmt: skip
    assert api.post("/v1/hooks/claude-code", json=stop).status_code in (200, 204)
    fresh = Api(create_app(runtime=runtime).test_client(), api.token)
    health = fresh.get("/health").json
    gate = health["gate"]  # a fresh app: the cached answer of the first call is not reused
    assert gate["prompts"] == len(rows) == 2
    assert gate["injected"] == sum(r["decision"] == "inject" for r in rows)
    injected = [r for r in rows if r["decision"] == "inject"]
    assert injected, rows  # the record answers the prompt: the gate lets it through
    assert gate["mean_bytes"] == round(sum(r["bytes"] for r in injected) / len(injected), 1)
    assert health["capture"]["stop_without_answer"] == stops + 1
    assert set(health["capture"]) == {"stop_without_answer", "file_reads_refused"}


def test_health_has_no_user_content(api: Api) -> None:
    secret = "zebra-unicorn-4711"
    api.post("/v1/events", json=make_event(body={"type": "text", "content": secret}))
    api.post(
        "/v1/memories",
        json={"namespace": make_event()["namespace"], "title": secret, "summary": secret},
    )
    api.post("/v1/events?retrieve=true", json=make_event(body={"type": "text", "content": secret}))
    assert secret not in api.get("/health").get_data(as_text=True)
    assert secret not in api.get("/metrics").get_data(as_text=True)


def test_health_is_degraded_503_when_the_database_is_unreachable(tmp_path) -> None:  # type: ignore[no-untyped-def]
    # The database path is a directory: SQLite genuinely cannot open it.
    settings = Settings(home=tmp_path / "h", embedder="off")
    rt = Runtime.build(settings)
    settings.sqlite_path.mkdir()
    try:
        client = create_app(runtime=rt).test_client()
        public = client.get("/health", base_url=BASE)
        assert public.status_code == 503
        assert public.json == {"status": "degraded", "version": __version__}
        auth = {"Authorization": f"Bearer {ensure_token(settings)}"}
        res = client.get("/health", base_url=BASE, headers=auth)
        assert res.status_code == 503
        assert res.json["status"] == "degraded"
        assert res.json["pending"] is None and res.json["skipped"] is None
        assert res.json["database"] is None and res.json["gate"] is None
    finally:
        rt.close()


def test_metrics_counts_requests_by_route_and_runs_callbacks(
    sqlite_api: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    sqlite_api.get("/v1/events/01ARZ3NDEKTSV4RRFFQ69G5FAV")
    good = lambda: ["# TYPE wakemark_test_gauge gauge", "wakemark_test_gauge 7"]  # noqa: E731
    bad = lambda: [str(1 / 0)]  # noqa: E731
    # Registered for this test only: the registry is the process's.
    monkeypatch.setattr(metrics, "_callbacks", list(metrics._callbacks))
    metrics.register(good)
    metrics.register(bad)
    res = sqlite_api.get("/metrics")
    assert res.status_code == 200 and res.mimetype == "text/plain"
    text = res.get_data(as_text=True)
    assert (
        'wakemark_http_requests_total{method="GET",route="/v1/events/<event_id>",status="404"}'
        in text
    )
    assert "01ARZ3NDEKTSV4RRFFQ69G5FAV" not in text
    assert "wakemark_test_gauge 7" in text


def test_unknown_methods_share_one_series(sqlite_api: Api, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(metrics, "_requests", {})
    for method in ("FOO", "BAR", "XYZZY", "GET"):
        sqlite_api.request(method, "/v1/search", token=None)
    series = {method for method, _, _ in metrics._requests}
    assert series == {"OTHER", "GET"}
    text = sqlite_api.get("/metrics").get_data(as_text=True)
    assert 'method="OTHER",route="unmatched",status="401"} 3' in text
    assert "FOO" not in text and "XYZZY" not in text


def test_health_and_metrics_show_the_vector_cache_budget(sqlite_settings: Settings) -> None:
    rt = Runtime.build(sqlite_settings.replace(vector_cache_mb=3))
    try:
        api = Api(create_app(runtime=rt).test_client(), ensure_token(sqlite_settings))
        cache = api.get("/health").json["search"]["vector_cache"]
        assert cache["budget_bytes"] == 3 * 2**20
        assert {"bytes", "evictions", "in_database", "database_searches"} <= set(cache)
        text = api.get("/metrics").get_data(as_text=True)
        assert f"wakemark_vector_cache_budget_bytes {3 * 2**20}" in text
        assert "wakemark_vector_cache_evictions_total 0" in text
        assert "wakemark_vector_database_searches_total 0" in text
    finally:
        rt.close()


ALICE = "/actor/alice/project/p1/"
BOB = "/actor/bob/project/b1/"
OPERATOR_ONLY = {"skipped", "database", "jobs", "search", "llm", "dropped", "capture"}


def test_health_by_token_none_bootstrap_scoped(api: Api, runtime: Runtime) -> None:
    # Records wait for embedding (the embedder is off): two of alice's, one of bob's;
    # one prompt of bob's went through the gate.
    for ns, n in ((ALICE, 2), (BOB, 1)):
        for i in range(n):
            memory = {"namespace": ns, "title": f"plan {i}", "summary": ""}
            res = api.post("/v1/memories", json=memory)
            assert res.status_code == 201
    event = make_event(namespace=BOB, actor_id="bob")
    assert api.post("/v1/events?retrieve=true", json=event).status_code == 201
    runtime.retriever.flush_audit()  # the gate's audit row is written after the answer
    bob = tokens.create(runtime.storage, actor="bob", who="test", project=None,
                        read_only=True, expires=None, name="bob")[1]  # fmt: skip
    alice = tokens.create(runtime.storage, actor="alice", who="test", project="p1",
                          read_only=False, expires=None, name="alice")[1]  # fmt: skip

    nobody = api.get("/health", token=None)
    assert nobody.status_code == 200
    assert nobody.json == {"status": "ok", "version": __version__}

    operator = api.get("/health").json
    assert set(operator) >= OPERATOR_ONLY
    assert operator["pending"]["embedding"] == 3 and operator["gate"]["prompts"] == 1
    assert "WAKEMARK_EMBEDDER" in operator["embedder"]["reason"]  # the operator's setting

    mine = api.get("/health", token=bob).json
    assert not OPERATOR_ONLY & set(mine)
    assert mine["backend"] == operator["backend"] and mine["embedder"] == {"state": "off"}
    assert mine["pending"]["embedding"] == 1 and mine["gate"]["prompts"] == 1
    theirs = api.get("/health", token=alice).json
    assert theirs["pending"]["embedding"] == 2 and theirs["gate"]["prompts"] == 0
    assert "reason" not in str(mine) + str(theirs)

    bad = api.get("/health", token="wm_not-a-token")
    assert bad.status_code == 401

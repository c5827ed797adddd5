"""``/health`` (public, no user content, degraded on a dead database) and ``/metrics``."""

from __future__ import annotations

import pytest

from wakemark.services.api import create_app, metrics
from wakemark.shared.config import Settings
from wakemark.shared.runtime import Runtime

from .conftest import BASE, Api, make_event


def test_health_shape(api: Api) -> None:
    res = api.get("/health", token=None)
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
    body = api.get("/health", token=None).json
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
        llm = client.get("/health", base_url=BASE).json["llm"]
    finally:
        rt.close()
    assert llm["enabled"] is True
    assert llm["budget"] == 1234 and llm["tokens_used"] == 0 and llm["remaining"] == 1234


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
        res = create_app(runtime=rt).test_client().get("/health", base_url=BASE)
        assert res.status_code == 503
        assert res.json["status"] == "degraded"
        assert res.json["pending"] is None and res.json["skipped"] is None
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


def test_health_and_metrics_show_the_vector_cache_budget(sqlite_settings: Settings) -> None:
    from wakemark.services.api.security import ensure_token

    rt = Runtime.build(sqlite_settings.replace(vector_cache_mb=3))
    try:
        api = Api(create_app(runtime=rt).test_client(), ensure_token(sqlite_settings))
        cache = api.get("/health", token=None).json["search"]["vector_cache"]
        assert cache["budget_bytes"] == 3 * 2**20
        assert {"bytes", "evictions", "in_database", "database_searches"} <= set(cache)
        text = api.get("/metrics").get_data(as_text=True)
        assert f"wakemark_vector_cache_budget_bytes {3 * 2**20}" in text
        assert "wakemark_vector_cache_evictions_total 0" in text
        assert "wakemark_vector_database_searches_total 0" in text
    finally:
        rt.close()

"""``GET /v1/search`` and ``GET /v1/context`` through the real app."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.api.conftest import Api
from tests.retrieval.conftest import NS, make_record, put
from wakemark.services.api import create_app
from wakemark.services.api.security import ensure_token
from wakemark.shared.config import Settings, prepare_home
from wakemark.shared.runtime import Runtime
from wakemark.shared.storage import migrate


@pytest.fixture
def api(settings: Settings) -> Iterator[Api]:
    """The real app over a migrated SQLite home (the subject here is HTTP, not the backend)."""
    prepare_home(settings)
    migrate(settings)
    rt = Runtime.build(settings)
    yield Api(create_app(runtime=rt).test_client(), ensure_token(settings))
    rt.close()


def _runtime(api: Api) -> Runtime:
    return api.client.application.extensions["wakemark"]  # type: ignore[no-any-return]


def test_search_returns_items_with_record_source_and_score(api: Api) -> None:
    rt = _runtime(api)
    records = [make_record(NS, "stripe webhook signature", i, facts=["raw body"]) for i in range(3)]
    put(rt, records)
    res = api.get("/v1/search", query_string={"namespace": NS, "q": "stripe webhook", "limit": 2})
    assert res.status_code == 200
    body = res.get_json()
    assert set(body) == {"items", "latency_ms", "degraded"}
    assert len(body["items"]) == 2 and body["degraded"] is True  # embedder off in tests
    item = body["items"][0]
    assert item["match_source"] == "fts" and item["score"] > 0
    assert item["record"]["record_id"] == records[2].record_id  # newest first on a tie
    assert "embedding" not in item["record"]
    prefixed = api.get("/v1/search", query_string={"namespace": "/actor/alice/", "q": "stripe"})
    assert len(prefixed.get_json()["items"]) == 3


@pytest.mark.parametrize(
    "params",
    [
        {"q": "x"},
        {"namespace": NS},
        {"namespace": "/nope/", "q": "x"},
        {"namespace": NS, "q": "x", "limit": "0"},
        {"namespace": NS, "q": "x", "limit": "101"},
        {"namespace": NS, "q": "x", "limit": "ten"},
        {"namespace": NS, "q": "x", "type": "bogus"},
        {"namespace": NS, "q": "x", "days": "0"},
        {"namespace": NS, "q": "x", "days": "-3"},
    ],
)
def test_search_rejects_bad_parameters(api: Api, params: dict[str, str]) -> None:
    res = api.get("/v1/search", query_string=params)
    assert res.status_code == 400
    assert res.get_json()["error"] == "bad_request" and res.get_json()["message"]


def test_search_needs_the_token(api: Api) -> None:
    res = api.get("/v1/search", query_string={"namespace": NS, "q": "x"}, token=None)
    assert res.status_code == 401


def test_context_index_within_budget(api: Api) -> None:
    rt = _runtime(api)
    put(rt, [make_record(NS, f"Décision n°{i}", i, summary="ü" * 200) for i in range(100)])
    res = api.get("/v1/context", query_string={"namespace": NS, "max_bytes": 1000})
    body = res.get_json()
    assert res.status_code == 200 and body["used_bytes"] == len(body["context"].encode()) <= 1000
    default = api.get("/v1/context", query_string={"namespace": NS}).get_json()
    assert 1000 < default["used_bytes"] <= rt.settings.context_max_bytes
    for bad in ("9501", "0", "abc"):
        res = api.get("/v1/context", query_string={"namespace": NS, "max_bytes": bad})
        assert res.status_code == 400
    assert api.get("/v1/context").status_code == 400


def test_health_and_metrics_report_search_without_content(api: Api) -> None:
    put(_runtime(api), [make_record(NS, "secretword in a title", 0)])
    api.get("/v1/search", query_string={"namespace": NS, "q": "secretword"})
    health = api.get("/health").get_json()
    assert health["search"]["requests"] == 1 and "p95_ms" in health["search"]
    metrics = api.get("/metrics").get_data(as_text=True)
    assert "wakemark_search_requests_total 1" in metrics
    assert "secretword" not in metrics and "secretword" not in str(health)

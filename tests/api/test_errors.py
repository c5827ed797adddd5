"""Every error class renders as JSON with a code, and client input never yields a 500."""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from wakemark.shared.models import MAX_REQUEST_BYTES

from .conftest import NS, Api, make_event


def _is_error(res, status: int, code: str | None = None) -> dict:  # type: ignore[no-untyped-def]
    assert res.status_code == status, res.get_data(as_text=True)[:500]
    assert res.mimetype == "application/json"
    body = res.json
    assert set(body) <= {"error", "message", "details"}
    assert isinstance(body["error"], str) and isinstance(body["message"], str)
    if code:
        assert body["error"] == code
    return body


def test_unknown_route_is_json_404(sqlite_api: Api) -> None:
    _is_error(sqlite_api.get("/v1/nope"), 404, "not_found")


def test_wrong_method_is_405_with_allow(sqlite_api: Api) -> None:
    res = sqlite_api.request("PUT", "/v1/events", json={})
    _is_error(res, 405, "method_not_allowed")
    assert {"GET", "POST"} <= {m.strip() for m in res.headers["Allow"].split(",")}


def test_oversized_request_is_413(sqlite_api: Api) -> None:
    huge = make_event(body={"type": "text", "content": "x" * (MAX_REQUEST_BYTES + 10)})
    _is_error(sqlite_api.post("/v1/events", json=huge), 413, "payload_too_large")


def test_oversized_body_field_is_422_without_echo(sqlite_api: Api) -> None:
    event = make_event(body={"type": "text", "content": "y" * (1024 * 1024 + 1)})
    res = sqlite_api.post("/v1/events", json=event)
    body = _is_error(res, 422, "validation_error")
    assert "yyyy" not in res.get_data(as_text=True)
    assert body["details"][0]["loc"][0] == "body"


@pytest.mark.parametrize("ctype", ["text/plain", "application/x-www-form-urlencoded", None])
def test_non_json_content_type_is_415(sqlite_api: Api, ctype: str | None) -> None:
    headers = {"Content-Type": ctype} if ctype else {}
    res = sqlite_api.post("/v1/events", data=json.dumps(make_event()), headers=headers)
    _is_error(res, 415, "unsupported_media_type")


def test_a_post_without_a_body_needs_no_content_type(api: Api) -> None:
    # A split takes no body (the spec gives it none), so a plain `curl -X POST` is a
    # request like any other; a route that needs a body finds none: malformed JSON.
    res = api.post("/v1/memories/mr_00000000000000000000000000/split")
    _is_error(res, 404, "not_found")
    _is_error(api.post("/v1/memories"), 400, "bad_json")
    _is_error(api.post("/v1/memories", headers={"Content-Length": "0"}), 400, "bad_json")


@pytest.mark.parametrize("raw", [b"{", b"not json", b"", b"\xff\xfe", b'{"a": 1,}'])
def test_malformed_json_is_400(sqlite_api: Api, raw: bytes) -> None:
    res = sqlite_api.post("/v1/events", data=raw, content_type="application/json")
    _is_error(res, 400, "bad_json")


def test_schema_violation_is_422_with_locations(sqlite_api: Api) -> None:
    event = make_event(kind="bogus", extra_field=1)
    del event["session_id"]
    body = _is_error(sqlite_api.post("/v1/events", json=event), 422, "validation_error")
    locs = {tuple(d["loc"]) for d in body["details"]}
    assert ("kind",) in locs and ("session_id",) in locs and ("extra_field",) in locs
    assert all("input" not in d for d in body["details"])


@pytest.mark.parametrize(
    "query",
    ["limit=0", "limit=101", "limit=abc", "namespace=nope", "namespace=/actor/a", "limit=1e3"],
)
def test_bad_query_params_are_400(sqlite_api: Api, query: str) -> None:
    _is_error(sqlite_api.get(f"/v1/events?{query}"), 400, "bad_request")


def test_bad_retrieve_flag_is_400(sqlite_api: Api) -> None:
    _is_error(sqlite_api.post("/v1/events?retrieve=maybe", json=make_event()), 400)


def test_memories_requires_namespace(sqlite_api: Api) -> None:
    body = _is_error(sqlite_api.get("/v1/memories"), 400)
    assert "namespace" in body["message"]


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=20,
)


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    payload=st.one_of(
        json_values,
        st.fixed_dictionaries({"events": json_values}),
        st.builds(
            lambda extra: {**make_event(), **extra},
            st.dictionaries(
                st.sampled_from(
                    [
                        "kind",
                        "body",
                        "namespace",
                        "valid_time",
                        "source",
                        "event_id",
                        "schema_version",
                    ]
                ),
                json_values,
                max_size=3,
            ),
        ),
    ),
    path=st.sampled_from(["/v1/events", "/v1/events?retrieve=true", "/v1/memories"]),
)
def test_arbitrary_json_never_500(sqlite_api: Api, payload: object, path: str) -> None:
    res = sqlite_api.post(path, data=json.dumps(payload), content_type="application/json")
    assert res.status_code < 500, res.get_data(as_text=True)[:500]
    assert res.status_code in (201, 400, 422)


@settings(
    max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    path=st.sampled_from(
        [
            "/v1/events",
            "/v1/memories",
            "/v1/timeline",
            "/v1/stats",
            "/v1/projects",
            "/v1/retrievals",
            "/v1/search",
        ]
    ),
    args=st.dictionaries(
        st.sampled_from(
            [
                "namespace",
                "limit",
                "offset",
                "session_id",
                "record_id",
                "before",
                "after",
                "retrieve",
                "q",
                "min_relevance",
            ]
        ),
        st.text(max_size=30),
        max_size=4,
    ),
)
def test_arbitrary_query_params_never_500(sqlite_api: Api, path: str, args: dict) -> None:  # type: ignore[type-arg]
    res = sqlite_api.get(path, query_string=args)
    assert res.status_code in (200, 400, 404), res.get_data(as_text=True)[:500]


def test_arbitrary_ids_in_paths_never_500(sqlite_api: Api) -> None:
    for rid in ["x", "mr_" + "Z" * 26, "%00", "a" * 5000, "'; DROP TABLE events;--"]:
        for method in ("GET", "DELETE"):
            assert sqlite_api.request(method, f"/v1/memories/{rid}").status_code == 404
        assert sqlite_api.get(f"/v1/events/{rid}").status_code == 404
        assert sqlite_api.get(f"/v1/retrievals/{rid}").status_code == 404
        res = sqlite_api.patch(f"/v1/memories/{rid}", json={"pinned": True})
        assert res.status_code == 404
    assert sqlite_api.get(f"/v1/timeline?record_id=nope&namespace={NS}").status_code == 404


def test_unexpected_exception_is_json_500_with_logged_traceback(
    sqlite_settings, caplog: pytest.LogCaptureFixture
) -> None:  # type: ignore[no-untyped-def]
    from wakemark.services.api import create_app
    from wakemark.services.api.security import ensure_token
    from wakemark.shared.runtime import Runtime

    rt = Runtime.build(sqlite_settings)
    app = create_app(runtime=rt)

    @app.get("/v1/boom")
    def boom() -> str:
        raise RuntimeError("kaboom")

    try:
        res = app.test_client().get(
            "/v1/boom",
            base_url="http://127.0.0.1:37800",
            headers={"Authorization": f"Bearer {ensure_token(sqlite_settings)}"},
        )
    finally:
        rt.close()
    assert res.status_code == 500
    assert res.json == {"error": "internal", "message": "internal error"}
    assert "kaboom" not in res.get_data(as_text=True)
    assert any(r.exc_info and "kaboom" in str(r.exc_info[1]) for r in caplog.records)

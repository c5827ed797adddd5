"""Hostile bodies and query strings: every one is a 4xx in the normal error shape.

Each case broke a rule of the one body parser (``params.parse_json``), which every
route reads JSON through; before it bounded nesting, a deep body was a 500 everywhere.
"""

from __future__ import annotations

import gzip
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from wakemark.services.api.params import MAX_JSON_DEPTH, _too_deep

from .conftest import NS, Api, make_event

BODY_ROUTES = [
    "/v1/events",
    "/v1/memories",
    "/v1/hooks/claude-code",
    "/v1/memories/mr_00000000000000000000000000",
]


def _nested(depth: int, leaf: object = 1) -> object:
    value = leaf
    for i in range(depth):
        value = [value] if i % 2 else {"a": value}
    return value


def _error(res, status: int, code: str) -> str:  # type: ignore[no-untyped-def]
    assert res.status_code == status, res.get_data(as_text=True)[:300]
    assert res.mimetype == "application/json"
    body = res.json
    assert {"error", "message"} <= set(body) <= {"error", "message", "details"}
    assert body["error"] == code
    return str(body["message"])


def _send(api: Api, path: str, raw: bytes, ctype: str = "application/json"):  # type: ignore[no-untyped-def]
    method = "PATCH" if path.startswith("/v1/memories/") else "POST"
    return api.request(method, path, data=raw, content_type=ctype)


HOSTILE = {
    "deep arrays": b"[" * 100_000 + b"]" * 100_000,
    "deep objects": b'{"a":' * 50_000 + b"1" + b"}" * 50_000,
    "deep, unterminated": b"[" * 200_000,
    "one level too deep": json.dumps(_nested(MAX_JSON_DEPTH + 1)).encode(),
    "deep inside a valid event": json.dumps(
        make_event(kind="tool_use", body={"type": "json", "data": {"x": _nested(500)}})
    ).encode(),
    "integer of 5,000 digits": b'{"a": ' + b"9" * 5000 + b"}",
    "float overflowing to infinity": b'{"a": 1e999}',
    "NaN": b'{"a": NaN}',
    "Infinity": b'{"a": Infinity}',
    "-Infinity": b"[-Infinity]",
    "duplicate keys": b'{"a": 1, "a": 2}',
    "invalid UTF-8": b'{"a": "\xff"}',
    "UTF-16 with BOM": '{"a": 1}'.encode("utf-16"),
    "UTF-8 BOM": b'\xef\xbb\xbf{"a": 1}',
    "lone high surrogate": b'{"a": "\\ud800"}',
    "lone low surrogate in a key": b'{"\\udfff": 1}',
    "reversed surrogate pair": b'["\\udc00\\ud800"]',
    "truncated": b'{"a": [1, 2',
}


@pytest.mark.parametrize("path", BODY_ROUTES)
@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_hostile_body_is_400_bad_json(sqlite_api: Api, path: str, case: str) -> None:
    message = _error(_send(sqlite_api, path, HOSTILE[case]), 400, "bad_json")
    assert message.startswith("malformed JSON: ")


def test_deep_nesting_names_the_limit(sqlite_api: Api) -> None:
    message = _error(_send(sqlite_api, "/v1/events", HOSTILE["deep arrays"]), 400, "bad_json")
    assert message == f"malformed JSON: nested deeper than {MAX_JSON_DEPTH} levels"


def test_nesting_up_to_the_limit_is_stored_and_read_back(sqlite_api: Api) -> None:
    # The event, its body and the data object are 3 levels: the rest is the payload's.
    def event(depth: int) -> dict:  # type: ignore[type-arg]
        data = {"x": _nested(depth - 3)}
        return make_event(kind="tool_use", body={"type": "json", "data": data})

    deepest = event(MAX_JSON_DEPTH)
    res = sqlite_api.post("/v1/events", json=deepest)
    assert res.status_code == 201, res.get_data(as_text=True)[:300]
    got = sqlite_api.get(f"/v1/events/{deepest['event_id']}").json
    assert got["body"]["data"] == deepest["body"]["data"]
    _error(sqlite_api.post("/v1/events", json=event(MAX_JSON_DEPTH + 1)), 400, "bad_json")


def test_brackets_inside_strings_do_not_count(sqlite_api: Api) -> None:
    text = '[{"\\"[' * 10_000  # escaped quotes too: the string does not end early
    event = make_event(body={"type": "text", "content": text})
    assert sqlite_api.post("/v1/events", json=event).status_code == 201


def test_surrogate_pairs_and_escaped_backslashes_are_fine(sqlite_api: Api) -> None:
    # ensure_ascii (Python's default) writes an emoji as a surrogate-pair escape; "\\ud800"
    # is a backslash and five letters, not a surrogate.
    event = make_event(body={"type": "text", "content": "ok \U0001f600 and \\ud800"})
    raw = json.dumps(event, ensure_ascii=True).encode()
    assert b"\\ud83d\\ude00" in raw
    res = _send(sqlite_api, "/v1/events", raw)
    assert res.status_code == 201, res.get_data(as_text=True)[:300]
    got = sqlite_api.get(f"/v1/events/{event['event_id']}").json
    assert got["body"]["content"] == "ok \U0001f600 and \\ud800"


def test_a_utf16_body_cannot_slip_a_private_tag_past_the_scrub(sqlite_api: Api) -> None:
    # The privacy pre-check reads raw bytes; a UTF-16 body used to be decoded, stored
    # unscrubbed, and readable back.
    event = make_event(body={"type": "text", "content": "key <private>hunter2</private>"})
    res = _send(sqlite_api, "/v1/events", json.dumps(event).encode("utf-16"))
    _error(res, 400, "bad_json")
    assert sqlite_api.get(f"/v1/events/{event['event_id']}").status_code == 404


@pytest.mark.parametrize(
    "ctype",
    ["application/json; charset=utf-16", "application/json; charset=latin-1", "text/json"],
)
def test_non_utf8_or_non_json_content_type_is_415(sqlite_api: Api, ctype: str) -> None:
    raw = json.dumps(make_event()).encode()
    _error(_send(sqlite_api, "/v1/events", raw, ctype), 415, "unsupported_media_type")


@pytest.mark.parametrize("encoding", ["gzip", "deflate", "br", "gzip, identity"])
def test_a_compressed_body_is_415(api: Api, encoding: str) -> None:
    # The body is parsed as it arrives: a gzipped event was a misleading "not valid
    # UTF-8", and plain JSON labelled gzip was stored as if it were not labelled.
    event = make_event()
    raw = json.dumps(event).encode()
    for sent in (gzip.compress(raw), raw):
        headers = {"Content-Encoding": encoding}
        res = api.post("/v1/events", data=sent, content_type="application/json", headers=headers)
        message = _error(res, 415, "unsupported_media_type")
        assert message == "Content-Encoding must be identity: send the JSON uncompressed"
    assert api.get(f"/v1/events/{event['event_id']}").status_code == 404
    res = api.post("/v1/events", data=raw, content_type="application/json",
                   headers={"Content-Encoding": "Identity"})  # fmt: skip
    assert res.status_code == 201, res.get_data(as_text=True)[:300]


@pytest.mark.parametrize("ctype", ["application/json; charset=UTF-8", "Application/JSON"])
def test_utf8_json_content_types_are_accepted(sqlite_api: Api, ctype: str) -> None:
    raw = json.dumps(make_event()).encode()
    assert _send(sqlite_api, "/v1/events", raw, ctype).status_code == 201


@pytest.mark.parametrize(
    "query",
    [
        "limit=1e999",
        "limit=-1",
        "limit=" + "9" * 5000,
        "limit=%EF%BC%91",  # a full-width digit one: int() would take it
        "limit=1_0",
        "limit=+5",
        "limit=%205",
        "limit=0x10",
        "offset=-0",
        "offset=50",  # keyset paging only: an ignored offset would repeat the first page
        "after=yesterday",
        "after=2025-13-01T00:00:00.000000Z,mr_x",  # the shape of a cursor, an impossible time
        "after=2025-01-01T00:00:00.000000Z,",
        "namespace=%ff%fe",
        "namespace=" + "a" * 10_000,
        "days=0",
        "type=nope",
    ],
)
def test_bad_query_values_are_400(sqlite_api: Api, query: str) -> None:
    path = "/v1/search" if query.startswith(("days", "type")) else "/v1/memories"
    full = f"{path}?namespace={NS}&q=x&{query}" if "namespace=" not in query else f"{path}?{query}"
    _error(sqlite_api.get(full), 400, "bad_request")


def test_repeated_and_bracketed_query_keys_take_the_first_plain_value(sqlite_api: Api) -> None:
    assert sqlite_api.get(f"/v1/memories?namespace={NS}&limit=2&limit=999").json["limit"] == 2
    assert sqlite_api.get(f"/v1/memories?namespace={NS}&limit[]=999").json["limit"] == 50


@pytest.mark.parametrize(
    "headers",
    [
        {"X-Wakemark-Project": "/tmp/\x00nul"},
        {"X-Wakemark-Actor": "\x00\xff" * 2000},
        {"X-Wakemark-Project": "/" + "a/" * 4000},
        {"Origin": "\xff" * 100},
    ],
)
def test_absurd_headers_on_a_hook_are_not_a_5xx(sqlite_api: Api, headers: dict) -> None:  # type: ignore[type-arg]
    payload = {"hook_event_name": "UserPromptSubmit", "prompt": "hi", "session_id": "s"}
    res = sqlite_api.post("/v1/hooks/claude-code", json=payload, headers=headers)
    assert res.status_code in (200, 204, 400, 403, 422), res.get_data(as_text=True)[:300]


@pytest.mark.parametrize(
    "auth", ["Bearer \xff\xfe", "Bearer " + "x" * 10_000, "bearer", "Basic Zm9vOmJhcg==", ""]
)
def test_absurd_authorization_is_401(sqlite_api: Api, auth: str) -> None:
    res = sqlite_api.get("/v1/stats", token=None, headers={"Authorization": auth})
    _error(res, 401, "unauthorized")


@pytest.mark.parametrize("when", [1_700_000_000, "1700000000", 1.5, True, "yesterday"])
def test_valid_time_is_an_iso_string_not_a_unix_time(sqlite_api: Api, when: object) -> None:
    # The published schema says date-time; pydantic alone would read a number as Unix time.
    res = sqlite_api.post("/v1/events", json=make_event(valid_time=when))
    _error(res, 422, "validation_error")
    assert res.json["details"][0]["loc"] == ["valid_time"]


@pytest.mark.parametrize("when", ["0001-01-01T00:00:00+03:04", "9999-12-31T23:59:59-00:01"])
def test_a_valid_time_outside_the_utc_range_is_422(api: Api, when: str) -> None:
    # Found by schemathesis: storage writes UTC, and these instants fall before year 1 or
    # after year 9999 once converted.
    res = api.post("/v1/events", json=make_event(valid_time=when))
    _error(res, 422, "validation_error")
    assert res.json["details"][0]["loc"] == ["valid_time"]


def _depth(value: object) -> int:
    if isinstance(value, dict):
        return 1 + max(map(_depth, value.values()), default=0)
    if isinstance(value, list):
        return 1 + max(map(_depth, value), default=0)
    return 0


_tricky_text = st.text(st.sampled_from('[]{}"\\ab'), max_size=12)
_values = st.recursive(
    st.none() | st.integers() | _tricky_text,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_tricky_text, inner, max_size=3),
    max_leaves=12,
)


@settings(max_examples=300, deadline=None)
@given(value=_values, wrap=st.integers(0, 70), ascii_only=st.booleans())
def test_depth_prescan_agrees_with_the_decoded_depth(
    value: object, wrap: int, ascii_only: bool
) -> None:
    # Strings full of brackets, quotes and backslashes must count as text, whatever the
    # escaping; nesting is measured exactly, at the limit and either side of it.
    for _ in range(wrap):
        value = [value]
    raw = json.dumps(value, ensure_ascii=ascii_only).encode()
    assert _too_deep(raw) == (_depth(value) > MAX_JSON_DEPTH)


def test_the_limits_store_and_read_back_on_every_backend(api: Api) -> None:
    # What the parser lets through must also survive storage: Postgres keeps bodies as
    # jsonb (its own number and nesting rules), SQLite as text.
    data = {
        "deep": _nested(MAX_JSON_DEPTH - 4),
        "big": int("9" * 4000),
        "tiny": 5e-324,
        "text": '\U0001f600 \\ud800 [{"',
    }
    event = make_event(kind="tool_use", body={"type": "json", "data": data})
    res = api.post("/v1/events", json=event)
    assert res.status_code == 201, res.get_data(as_text=True)[:300]
    assert api.get(f"/v1/events/{event['event_id']}").json["body"]["data"] == data


NUL_WRITES = {
    "event session_id": ("/v1/events", lambda: make_event(session_id="a\x00b")),
    "event text": ("/v1/events", lambda: make_event(body={"type": "text", "content": "a\x00"})),
    "event json key": (
        "/v1/events",
        lambda: make_event(kind="tool_use", body={"type": "json", "data": {"k\x00": "\x00"}}),
    ),
    "event source": ("/v1/events", lambda: make_event(source={"surface": "x\x00"})),
    "memory": ("/v1/memories", lambda: {"namespace": NS, "title": "a\x00", "facts": ["\x00"]}),
    "hook": (
        "/v1/hooks/claude-code",
        lambda: {"hook_event_name": "UserPromptSubmit", "prompt": "a\x00", "session_id": "s\x00"},
    ),
}


@pytest.mark.parametrize("case", sorted(NUL_WRITES))
def test_a_nul_in_a_body_string_is_stored_as_a_replacement_character(api: Api, case: str) -> None:
    # Postgres text cannot hold U+0000 (it was a 500 there); both backends store U+FFFD.
    path, build = NUL_WRITES[case]
    payload = build()
    if path == "/v1/memories":
        payload["summary"] = "s"
    res = api.post(path, json=payload)
    assert res.status_code in (200, 201, 204), res.get_data(as_text=True)[:300]
    if path == "/v1/events":
        stored = json.dumps(api.get(f"/v1/events/{payload['event_id']}").json)
        assert "\\u0000" not in stored and "\\ufffd" in stored


@pytest.mark.parametrize(
    "path",
    [
        f"/v1/events?namespace={NS}&session_id=a%00b",
        f"/v1/search?namespace={NS}&q=a%00b",
        "/v1/memories?namespace=/actor/a%00/",
        "/v1/timeline?record_id=mr_%00",
        # Patterns of one project's namespace, not a prefix: a 500 on Postgres, and a
        # preview that hid the storage error behind an empty 200.
        "/v1/retrievals/sessions?namespace=/actor/a%00/project/p/",
        "/v1/context/preview?namespace=/actor/a/project/p%00/&prompt=hi",
    ],
)
def test_a_nul_in_a_query_is_400(api: Api, path: str) -> None:
    _error(api.get(path), 400, "bad_request")


@pytest.mark.parametrize("path", ["/v1/memories/mr_%00", "/v1/events/%00", "/v1/memories/%00x"])
def test_a_nul_in_a_path_is_404(api: Api, path: str) -> None:
    _error(api.get(path), 404, "not_found")
    _error(api.delete(path), 404, "not_found")


def test_a_nul_in_a_header_is_400(api: Api) -> None:
    payload = {"hook_event_name": "UserPromptSubmit", "prompt": "hi", "session_id": "s"}
    res = api.post("/v1/hooks/claude-code", json=payload, headers={"X-Wakemark-Project": "/\x00"})
    _error(res, 400, "bad_request")

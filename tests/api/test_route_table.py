"""Every published operation, every query and path parameter, each hostile value in turn,
on both backends: a 4xx in the API's error shape or a success, never a 5xx.

Where the fuzzers sample, this walks the whole table, so a parameter whose pattern lets
a NUL through to Postgres (``/v1/retrievals/sessions`` did) cannot go unvisited. The
other parameters hold valid values, so each request reaches the one under test.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

import pytest

from wakemark.services.api.openapi import build_spec

from .conftest import NS, Api

pytestmark = pytest.mark.fuzz

RECORD = "mr_" + "0" * 26
# What each parameter holds while another is under test (names the spec shares).
VALID = {
    "namespace": NS,
    "q": "tests",
    "ids": RECORD,
    "record_id": RECORD,
    "event_id": "0" * 26,
    "retrieval_id": "0" * 26,
    "agent": "claude-code",
    "name": "app.js",
}
HOSTILE = [
    "", " ", "\x00", "a\x00b", "/actor/a\x00/project/p/", "/actor/a/project/p\x00/",
    "/actor/a\x00/", "\ud800", "\u202e\u0645", "\U0001f600", "a" * 10_000, "-1", "0",
    "9" * 40, "1e999", "NaN", "Infinity", "true", "%", "%00", "%ff", "/", "../..",
    "0," + "x" * 300, "999999999999999999,\x00",
]  # fmt: skip
SPEC = build_spec()
OPERATIONS = [
    (method.upper(), path, op)
    for path, item in SPEC["paths"].items()
    for method, op in item.items()
    if not path.startswith("/ui")  # the viewer's page and assets: tests/ui
]


def _quote(value: str) -> str:
    # As a client would send it: UTF-8, and a lone surrogate as the bytes it would be.
    return quote(value, safe="", errors="surrogatepass")


@pytest.mark.parametrize(
    ("method", "path", "op"), OPERATIONS, ids=[f"{m} {p}" for m, p, _ in OPERATIONS]
)
def test_every_parameter_of_every_route_takes_hostile_values(
    api: Api, method: str, path: str, op: dict[str, Any]
) -> None:
    params = [p for p in op.get("parameters", []) if p["in"] in ("query", "path")]
    required = {p["name"]: VALID.get(p["name"], "1") for p in params if p.get("required")}
    body = {"json": {}} if "requestBody" in op else {}
    for param in params:
        for value in HOSTILE:
            args = {**required, param["name"]: value}
            url = path
            for name in [p["name"] for p in params if p["in"] == "path"]:
                url = url.replace("{" + name + "}", _quote(args.pop(name)) or "x")
            qs = "&".join(f"{_quote(k)}={_quote(v)}" for k, v in args.items())
            res = api.request(method, url, query_string=qs, **body)
            where = (method, url[:80], qs[:120])
            assert res.status_code < 500, (*where, res.get_data(as_text=True)[:300])
            if res.status_code >= 400:
                assert res.mimetype == "application/json", where
                assert {"error", "message"} <= set(res.json), where

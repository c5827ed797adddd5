"""A hypothesis fuzzer below the spec: raw bodies, headers and query strings on every route.

Where schemathesis sends what the spec describes (and near misses), this sends bytes:
deep nesting (to 200,000 levels), mutated events, hostile literals, any content type,
absurd header values, malformed query strings, every method on every rule plus unknown
paths. Whatever arrives, the answer is never a 5xx, never takes over ``REQUEST_BOUND_S``,
and every error has the API's shape.
Bounded for CI by ``MAX_EXAMPLES`` per backend.
Alone: ``pytest -m fuzz tests/api/test_fuzz_raw.py``.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from typing import Any
from urllib.parse import quote

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from wakemark.services import agents
from wakemark.services.api import create_app
from wakemark.shared.config import Settings
from wakemark.shared.runtime import Runtime

from .conftest import BASE, NS, make_event
from .fuzzing import REQUEST_BOUND_S, Tally

pytestmark = pytest.mark.fuzz

MAX_EXAMPLES = 500  # per backend
METHODS = ["GET", "POST", "PATCH", "DELETE", "PUT", "HEAD", "OPTIONS"]
UNKNOWN_PATHS = ["/", "/v1", "/v1/nope", "/v1/memories/", "//v1/events", "/v1/events/"]
QUERY_NAMES = [
    "namespace", "q", "limit", "offset", "type", "days", "max_bytes", "session_id",
    "record_id", "before", "after", "retrieve", "event", "limit[]", "", "%00", "a" * 300,
]  # fmt: skip
NASTY_VALUES = [
    "", "0", "-1", "1e999", "9" * 5000, "1.5", "+5", " 5", "0x10", "1_0", "１", "NaN",
    "true", "maybe", NS, "/actor/a/", "/actor/", "%ff", "%00", "%", "%%41", "\x00",
    "\ud800", "a" * 10_000, "../../etc/passwd", "' OR 1=1 --", "<private>x</private>",
]  # fmt: skip
CONTENT_TYPES = [
    "application/json", "application/json; charset=utf-8", "application/json; charset=utf-16",
    "application/json;charset=", "application/JSON", "text/plain", "multipart/form-data",
    "application/x-www-form-urlencoded", "application/*", "", "\x7f", "a" * 2000,
]  # fmt: skip


def _quote(text: str) -> str:
    return quote(text, safe="%&=/:@!$'()*+,;", errors="surrogatepass")


def _latin1(max_size: int) -> st.SearchStrategy[str]:
    # What a WSGI server can hand over as a header value: latin-1, no CR/LF.
    chars = st.characters(min_codepoint=0x20, max_codepoint=0xFF)
    return st.text(chars, max_size=max_size)


json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=30),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner),
    max_leaves=25,
)


@st.composite
def deep(draw: st.DrawFn) -> bytes:
    depth = draw(st.sampled_from([63, 64, 65, 100, 254, 256, 999, 1001, 10_000, 200_000]))
    opener = draw(st.sampled_from([b"[", b'{"a":', b'[{"a":', b'{"":[']))
    inner = draw(st.sampled_from([b"1", b"", b'"x"', b"[]", b"{}"]))
    closer = {b"[": b"]", b'{"a":': b"}", b'[{"a":': b"}]", b'{"":[': b"]}"}[opener]
    closed = draw(st.booleans())
    body = opener * depth + inner + (closer * depth if closed else b"")
    if draw(st.booleans()):  # inside an otherwise valid event
        event = json.dumps(make_event(kind="tool_use", body={"type": "json", "data": {}}))
        body = event.replace('"data": {}', '"data": {"x": ' + body.decode() + "}").encode()
    return body


@st.composite
def mutated(draw: st.DrawFn) -> bytes:
    """A valid event or hook payload with a few bytes inserted, removed or replaced."""
    base = draw(
        st.sampled_from(
            [
                json.dumps(make_event()),
                json.dumps({"events": [make_event(), make_event("note")]}),
                json.dumps({"hook_event_name": "UserPromptSubmit", "prompt": "hi", "cwd": "/"}),
                json.dumps({"namespace": NS, "title": "t", "summary": "s"}),
            ]
        )
    ).encode()
    data = bytearray(base)
    for _ in range(draw(st.integers(1, 4))):
        at = draw(st.integers(0, len(data)))
        what = draw(st.sampled_from(["insert", "delete", "replace"]))
        chunk = draw(
            st.sampled_from([b"[", b"{", b'"', b"\\", b"\\u", b"\\ud800", b"\x00", b"\xff", b","])
            | st.binary(max_size=4)
        )
        if what == "insert":
            data[at:at] = chunk
        elif what == "delete":
            del data[at : at + len(chunk) or 1]
        else:
            data[at : at + len(chunk)] = chunk
    return bytes(data)


HOSTILE_LITERALS = [
    b'{"a": NaN}', b'{"a": -Infinity}', b'{"a": 1e999}', b'{"a": ' + b"9" * 5000 + b"}",
    b'{"a": "\\ud800"}', b'{"a": 1, "a": 2}', b'\xef\xbb\xbf{"a": 1}',
    '{"a": 1}'.encode("utf-16"), b'"\\udfff"', b"\xc0\x80", b"\xed\xa0\x80", b"",
]  # fmt: skip

valid = st.sampled_from(
    [
        lambda: make_event(),
        lambda: {"events": [make_event("note"), make_event("tool_use")]},
        lambda: {"hook_event_name": "UserPromptSubmit", "prompt": "hi", "session_id": "s"},
        lambda: {"namespace": NS, "title": "t", "summary": "s", "pinned": True},
        lambda: {"pinned": False},
    ]
).map(lambda build: json.dumps(build()).encode())

# Half over characters that storage and JSON treat specially, NUL first among them.
_tricky = st.sampled_from('\x00a["\\\u2028\U0001f600')
_any_text = st.text(_tricky, min_size=1, max_size=30) | st.text(max_size=30)


@st.composite
def filled(draw: st.DrawFn) -> tuple[str, bytes]:
    """A well-formed write to its own route whose strings are anything: what storage
    must cope with (Postgres text refuses a NUL that SQLite takes)."""
    text = draw(_any_text)
    path, build = draw(
        st.sampled_from(
            [
                ("/v1/events", lambda: make_event(body={"type": "text", "content": text})),
                ("/v1/events", lambda: make_event(session_id=text or "s", actor_id=text or "a")),
                (
                    "/v1/events",
                    lambda: make_event(kind="tool_use", body={"type": "json", "data": {text: 1}}),
                ),
                (
                    "/v1/hooks/claude-code",
                    lambda: {
                        "hook_event_name": "UserPromptSubmit",
                        "prompt": text,
                        "session_id": "s",
                    },
                ),
                (
                    "/v1/hooks/codex",
                    lambda: {
                        "hook_event_name": "PostToolUse",
                        "tool_name": text,
                        "session_id": "s",
                    },
                ),
                (
                    "/v1/memories",
                    lambda: {
                        "namespace": NS,
                        "title": text or "t",
                        "summary": text,
                        "facts": [text],
                    },
                ),
            ]
        )
    )
    return path, json.dumps(build()).encode()


bodies = st.one_of(
    valid,
    deep(),
    deep(),  # twice: the class of body that was a 500 on every route
    mutated(),
    st.sampled_from(HOSTILE_LITERALS),
    json_values.map(lambda v: json.dumps(v).encode()),
    st.binary(max_size=200),
)


@st.composite
def targets(draw: st.DrawFn, operations: list[tuple[str, str]]) -> tuple[str, str]:
    """Mostly a real (method, rule) with its ids filled in; now and then anything."""
    if draw(st.integers(0, 9)) < 8:
        method, rule = draw(st.sampled_from(operations))
    else:
        method = draw(st.sampled_from(METHODS))
        rule = draw(st.sampled_from([r for _, r in operations] + UNKNOWN_PATHS))
    ids = st.sampled_from(
        ["mr_" + "0" * 26, "0" * 26, "x", "%00", "%2F", "..", "a" * 5000, "%ff", "🙂"]
    ) | st.text(st.characters(min_codepoint=0x21, max_codepoint=0x7E, exclude_characters="/?#"))
    path = rule.replace("<agent>", draw(st.sampled_from([*agents.names(), "nope", "%00"])))
    for name in ("<record:record_id>", "<event_id>"):
        if name in path:
            path = path.replace(name, draw(ids) or "x")
    return method, path


queries = st.lists(
    st.tuples(
        st.sampled_from(QUERY_NAMES) | st.text(max_size=10),
        st.sampled_from(NASTY_VALUES) | st.text(max_size=20),
    ),
    max_size=5,
)


@st.composite
def header_sets(draw: st.DrawFn, token: str) -> dict[str, str]:
    # Mostly the right token, or the request never gets past the 401.
    bad = st.sampled_from(["", "Bearer", "Bearer x", "Basic eA=="]) | _latin1(300)
    right = draw(st.integers(0, 9)) < 9
    headers = {"Authorization": f"Bearer {token}" if right else draw(bad)}
    if draw(st.integers(0, 9)) < 8:
        headers["Content-Type"] = "application/json"
    elif draw(st.booleans()):
        headers["Content-Type"] = draw(st.sampled_from(CONTENT_TYPES) | _latin1(100))
    # A foreign Origin stops a write at the 403, before the body: so only now and then.
    names = ["X-Wakemark-Project", "X-Wakemark-Actor", "Accept"]
    if draw(st.integers(0, 9)) == 0:
        names.append("Origin")
    for name in draw(st.lists(st.sampled_from(names), max_size=3, unique=True)):
        headers[name] = draw(
            st.sampled_from(["/tmp", "/", "/\x00", "http://127.0.0.1:37800", "a" * 5000])
            | _latin1(200)
        )
    return headers


@pytest.fixture(
    scope="module", params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]
)
def client(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[Any, list[tuple[str, str]], str, Tally]]:
    """The app over each backend (Postgres refuses what SQLite takes, such as NUL), with
    its own tally, reported and checked for 5xx when the backend's run ends."""
    from wakemark.shared.config import prepare_home
    from wakemark.shared.storage import migrate

    token = "fuzz-token"
    conf = Settings(home=tmp_path_factory.mktemp("raw") / "home", embedder="off", token=token)
    schema = None
    if request.param == "postgres":
        import psycopg

        base = request.getfixturevalue("pg_base_url")
        schema = "t_fuzz_" + uuid.uuid4().hex[:10]
        with psycopg.connect(base, autocommit=True) as conn:
            conn.execute(f'CREATE SCHEMA "{schema}"')
        options = quote(f"-csearch_path={schema},public")
        conf = conf.replace(database_url=f"{base}{'&' if '?' in base else '?'}options={options}")
    else:
        prepare_home(conf)
    migrate(conf)
    runtime = Runtime.build(conf)
    app = create_app(runtime=runtime)
    tally = Tally()
    tally.wrap(app)
    operations = sorted(
        (method, rule.rule)
        for rule in app.url_map.iter_rules()
        if rule.endpoint != "static"
        for method in rule.methods or ()
        if method not in ("HEAD", "OPTIONS")
    )
    yield app.test_client(), operations, token, tally
    runtime.close()
    if schema is not None:
        with psycopg.connect(base, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA "{schema}" CASCADE')
    line = tally.report(request.config, f"raw fuzzer ({request.param})")
    assert tally.requests > 0 and tally.server_errors == 0, line


@settings(
    max_examples=MAX_EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(data=st.data())
def test_raw_requests_never_yield_a_5xx(
    client: tuple[Any, list[tuple[str, str]], str, Tally], data: Any
) -> None:
    test_client, operations, token, tally = client
    tally.take_slow()  # a request of an earlier example, already failed on
    if data.draw(st.integers(0, 4), label="write") == 0:  # a fifth: writes that get stored
        method, (path, body) = "POST", data.draw(filled(), label="write")
        query: list[tuple[str, str]] = []
        headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
    else:
        method, path = data.draw(targets(operations), label="target")
        query = data.draw(queries, label="query")
        headers = data.draw(header_sets(token), label="headers")
        body = data.draw(bodies, label="body") if method in ("POST", "PATCH", "PUT") else b""
    # As a client would send them: what is not ASCII as UTF-8 escapes (a lone surrogate
    # too, so invalid UTF-8 arrives), a literal % or & left as it is.
    qs = "&".join(f"{_quote(k)}={_quote(v)}" for k, v in query)
    res = test_client.open(
        path, method=method, base_url=BASE, query_string=qs, headers=headers, data=body
    )
    assert res.status_code < 500, (method, path, qs[:200], res.get_data(as_text=True)[:300])
    slow = tally.take_slow()
    assert not slow, f"over {REQUEST_BOUND_S} s: {slow} ({qs[:200]})"
    if res.status_code >= 400 and method != "HEAD":
        assert res.mimetype == "application/json", res.get_data(as_text=True)[:300]
        assert {"error", "message"} <= set(res.json) <= {"error", "message", "details"}

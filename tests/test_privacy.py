"""The privacy scrub: unit rules, and the property that a tagged secret never reaches storage."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from wakemark.services.api import create_app
from wakemark.services.api.security import ensure_token
from wakemark.shared.config import Settings, prepare_home
from wakemark.shared.models import new_ulid
from wakemark.shared.privacy import REDACTED, scrub, scrub_text
from wakemark.shared.runtime import Runtime
from wakemark.shared.storage import migrate


@pytest.mark.parametrize(
    ("raw", "want"),
    [
        ("no tags here", "no tags here"),
        ("a <private>s</private> b", f"a {REDACTED} b"),
        ("<PRIVATE>s</Private>", REDACTED),
        ("<private>a<private>b</private>c</private>", REDACTED),
        ("x<private>a<private>b</private>c</private>y", f"x{REDACTED}y"),
        ("a<private>unclosed secret", f"a{REDACTED}"),
        ("a<private>x<private>y</private> still open", f"a{REDACTED}"),
        ("stray </private> close", "stray </private> close"),
        ("<private>a</private>mid<private>b</private>", f"{REDACTED}mid{REDACTED}"),
        ("< private >s</ private >", REDACTED),
        ("<privateer>not a tag</privateer>", "<privateer>not a tag</privateer>"),
        ("", ""),
    ],
)
def test_scrub_text_rules(raw: str, want: str) -> None:
    assert scrub_text(raw) == want


def test_scrub_walks_every_shape_and_keys() -> None:
    value = {
        "a": ["<private>1</private>", {"b": ("<private>2",)}],
        "<private>key</private>": 3,
        "n": None,
        "f": 1.5,
    }
    assert scrub(value) == {"a": [REDACTED, {"b": [REDACTED]}], REDACTED: 3, "n": None, "f": 1.5}


@given(st.text())
def test_scrub_is_idempotent(text: str) -> None:
    once = scrub_text(text)
    assert scrub_text(once) == once


# --- property: secrets never reach storage --------------------------------------------------

PLAIN = st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=12)


def _tag(draw: Any, closing: bool) -> str:
    name = draw(st.sampled_from(["private", "PRIVATE", "Private", "pRiVaTe"]))
    return f"</{name}>" if closing else f"<{name}>"


@st.composite
def wrapped_secret(draw: Any, secret: str) -> str:
    shape = draw(st.sampled_from(["plain", "nested", "unclosed", "double"]))
    before, after = draw(PLAIN), draw(PLAIN)
    inner = f"{draw(PLAIN)}{secret}{draw(PLAIN)}"
    if shape == "plain":
        core = _tag(draw, False) + inner + _tag(draw, True)
    elif shape == "nested":
        core = (
            _tag(draw, False)
            + draw(PLAIN)
            + _tag(draw, False)
            + inner
            + _tag(draw, True)
            + secret
            + _tag(draw, True)
        )
    elif shape == "double":
        core = _tag(draw, False) + inner + _tag(draw, True) + draw(PLAIN)
        core += _tag(draw, False) + secret + _tag(draw, True)
    else:
        return before + _tag(draw, False) + inner
    return before + core + after


@st.composite
def secret_json(draw: Any, secret: str, depth: int = 0) -> Any:
    leaf = st.one_of(wrapped_secret(secret), PLAIN, st.integers(), st.none())
    if depth >= 3:
        return draw(leaf)
    kind = draw(st.sampled_from(["leaf", "list", "dict"]))
    if kind == "leaf":
        return draw(leaf)
    children = draw(st.lists(secret_json(secret, depth + 1), max_size=3))
    if kind == "list":
        return children
    keys = [draw(st.one_of(PLAIN, wrapped_secret(secret))) for _ in children]
    return dict(zip(keys, children, strict=True))


@st.composite
def secret_event(draw: Any, secret: str) -> dict[str, Any]:
    shape = draw(st.sampled_from(["text", "message", "json"]))
    if shape == "text":
        body: dict[str, Any] = {"type": "text", "content": draw(wrapped_secret(secret))}
    elif shape == "message":
        turns = [
            {
                "role": draw(st.sampled_from(["user", "assistant"])),
                "content": draw(wrapped_secret(secret)),
            }
            for _ in range(draw(st.integers(1, 3)))
        ]
        body = {"type": "message", "turns": turns}
    else:
        data = draw(secret_json(secret))
        body = {"type": "json", "data": data if isinstance(data, dict) else {"v": data}}
    return {
        "event_id": new_ulid(),
        "session_id": draw(st.sampled_from(["s1", f"s-{REDACTED}"])),
        "actor_id": "alice",
        "namespace": "/actor/alice/project/p/",
        "kind": draw(st.sampled_from(["prompt", "tool_use", "session_summary", "note"])),
        "body": body,
        "valid_time": datetime.now(UTC).isoformat(),
        "source": {"surface": "test", "project_path": "/tmp/p"},
    }


@pytest.fixture
def sqlite_app(settings: Settings) -> Iterator[tuple[Any, str, Settings]]:
    prepare_home(settings)
    migrate(settings)
    rt = Runtime.build(settings)
    yield create_app(runtime=rt).test_client(), ensure_token(settings), settings
    rt.close()


def _db_bytes(settings: Settings) -> bytes:
    files = sorted(settings.home.glob("wakemark.db*"))
    assert files, "no database files"
    return b"".join(f.read_bytes() for f in files)


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(data=st.data())
def test_tagged_secrets_never_reach_storage(
    sqlite_app: tuple[Any, str, Settings], data: Any
) -> None:
    client, token, cfg = sqlite_app
    secret = "sEcReT" + uuid.uuid4().hex
    events = data.draw(st.lists(secret_event(secret), min_size=1, max_size=4))
    headers = {"Authorization": f"Bearer {token}"}
    base = "http://127.0.0.1:37800"
    res = client.post("/v1/events", json={"events": events}, headers=headers, base_url=base)
    assert res.status_code == 201, res.get_data(as_text=True)[:300]
    memory = {
        "namespace": "/actor/alice/project/p/",
        "title": data.draw(wrapped_secret(secret)),
        "summary": data.draw(wrapped_secret(secret)),
        "facts": [data.draw(wrapped_secret(secret))],
        "concepts": ["c"],
        "files_touched": [data.draw(wrapped_secret(secret))[:900]],
    }
    res = client.post("/v1/memories", json=memory, headers=headers, base_url=base)
    assert res.status_code in (201, 422), res.get_data(as_text=True)[:300]
    for e in events:
        got = client.get(f"/v1/events/{e['event_id']}", headers=headers, base_url=base)
        assert got.status_code == 200
        assert secret not in got.get_data(as_text=True)
    listed = client.get("/v1/memories?namespace=/actor/alice/", headers=headers, base_url=base)
    assert secret not in listed.get_data(as_text=True)
    assert secret.encode() not in _db_bytes(cfg)

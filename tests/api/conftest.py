"""HTTP test fixtures: the real app over a real (migrated) backend, with a real token."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest
from flask import Flask
from flask.testing import FlaskClient

from wakemark.services.api import create_app
from wakemark.services.api.security import ensure_token
from wakemark.shared.config import Settings
from wakemark.shared.models import new_ulid
from wakemark.shared.runtime import Runtime

NS = "/actor/alice/project/p1/"
BASE = "http://127.0.0.1:37800"


class Api:
    """A test client that sends the token and a loopback Host unless told otherwise."""

    def __init__(self, client: FlaskClient, token: str) -> None:
        self.client = client
        self.token = token

    def request(self, method: str, path: str, *, token: str | None = "default", **kw: Any):  # type: ignore[no-untyped-def]
        headers = dict(kw.pop("headers", {}) or {})
        if token == "default":
            token = self.token
        if token is not None:
            headers.setdefault("Authorization", f"Bearer {token}")
        kw.setdefault("base_url", BASE)
        return self.client.open(path, method=method, headers=headers, **kw)

    def get(self, path: str, **kw: Any):  # type: ignore[no-untyped-def]
        return self.request("GET", path, **kw)

    def post(self, path: str, **kw: Any):  # type: ignore[no-untyped-def]
        return self.request("POST", path, **kw)

    def patch(self, path: str, **kw: Any):  # type: ignore[no-untyped-def]
        return self.request("PATCH", path, **kw)

    def delete(self, path: str, **kw: Any):  # type: ignore[no-untyped-def]
        return self.request("DELETE", path, **kw)


def make_event(kind: str = "prompt", **over: Any) -> dict[str, Any]:
    body = over.pop("body", None) or {"type": "text", "content": "how do I run the tests?"}
    event = {
        "event_id": new_ulid(),
        "session_id": "s1",
        "actor_id": "alice",
        "namespace": NS,
        "kind": kind,
        "body": body,
        "valid_time": datetime.now(UTC).isoformat(),
        "source": {"surface": "claude-code", "version": "1.0", "project_path": "/home/a/p1"},
        "schema_version": 1,
    }
    event.update(over)
    return event


@pytest.fixture
def app(runtime: Runtime) -> Flask:
    return create_app(runtime=runtime)


@pytest.fixture
def api(app: Flask, runtime: Runtime) -> Api:
    return Api(app.test_client(), ensure_token(runtime.settings))


@pytest.fixture
def sqlite_settings(settings: Settings) -> Settings:
    from wakemark.shared.config import prepare_home
    from wakemark.shared.storage import migrate

    prepare_home(settings)
    migrate(settings)
    return settings


@pytest.fixture
def sqlite_api(sqlite_settings: Settings) -> Iterator[Api]:
    """SQLite only: for tests whose subject is the HTTP layer, not the backend."""
    rt = Runtime.build(sqlite_settings)
    app = create_app(runtime=rt)
    yield Api(app.test_client(), ensure_token(sqlite_settings))
    rt.close()

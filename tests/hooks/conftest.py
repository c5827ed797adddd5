"""Hook test fixtures: the real app over a real backend, fixture payloads, a project dir."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from flask.testing import FlaskClient

from wakemark.services.api import create_app
from wakemark.services.api.security import ensure_token
from wakemark.shared import project
from wakemark.shared.config import Settings
from wakemark.shared.models import MemoryRecord
from wakemark.shared.runtime import Runtime

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "hooks"
ACTOR = "alice"
HOST = "127.0.0.1:37800"


def load(agent: str, name: str, cwd: Path | None = None) -> dict[str, Any]:
    payload: dict[str, Any] = json.loads((FIXTURES / agent / f"{name}.json").read_text())
    if cwd is not None:
        if "workspace_roots" in payload:
            payload["workspace_roots"] = [str(cwd)]
        else:
            payload["cwd"] = str(cwd)
    return payload


class Hooks:
    def __init__(self, client: FlaskClient, token: str, runtime: Runtime) -> None:
        self.client = client
        self.token = token
        self.runtime = runtime

    def post(self, agent: str, payload: Any, event: str = "", **headers: str):  # type: ignore[no-untyped-def]
        sent = {"Authorization": f"Bearer {self.token}", "Host": HOST, "X-Wakemark-Actor": ACTOR}
        sent.update(headers)
        data = payload if isinstance(payload, (bytes, str)) else json.dumps(payload)
        path = f"/v1/hooks/{agent}" + (f"?event={event}" if event else "")
        return self.client.post(path, data=data, headers=sent, content_type="application/json")


@pytest.fixture
def project_dir(tmp_path: Path) -> Path:
    root = tmp_path / "shop"
    (root / ".git").mkdir(parents=True)
    (root / "src").mkdir()
    return root


@pytest.fixture
def namespace(project_dir: Path) -> str:
    return project.namespace_for(ACTOR, project.project_id(str(project_dir.resolve())))


def _hooks(settings: Settings) -> Iterator[Hooks]:
    rt = Runtime.build(settings)
    app = create_app(runtime=rt)
    yield Hooks(app.test_client(), ensure_token(settings), rt)
    rt.close()


@pytest.fixture
def hooks(backend_settings: Settings) -> Iterator[Hooks]:
    """Each backend in turn."""
    yield from _hooks(backend_settings)


@pytest.fixture
def sqlite_hooks(settings: Settings) -> Iterator[Hooks]:
    from wakemark.shared.config import prepare_home
    from wakemark.shared.storage import migrate

    prepare_home(settings)
    migrate(settings)
    yield from _hooks(settings)


def remember(runtime: Runtime, namespace: str) -> MemoryRecord:
    record = MemoryRecord(
        namespace=namespace,
        # Says what the fixtures' prompt asks about, so the relevance gate lets it through.
        title="test_apply_discount fails after the pricing refactor",
        summary="Cart discount rounding uses ROUND_HALF_EVEN.",
        facts=["pytest -q exits 1 on test_apply_discount with ROUND_HALF_UP"],
        observation_type="bugfix",
    )
    runtime.storage.put_memory_record(record)
    return record

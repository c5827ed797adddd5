"""The SQLite shape on a full disk (a real one: a small tmpfs as its home): a write is
refused with 507 + Retry-After, nothing of it is kept, and writes work again once space
is freed."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.api.conftest import Api, make_event
from tests.stack.stack import fill, tmpfs
from wakemark.services.api import create_app
from wakemark.services.api.security import ensure_token
from wakemark.shared.config import Settings, prepare_home
from wakemark.shared.runtime import Runtime
from wakemark.shared.storage import migrate


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    try:
        with tmpfs(tmp_path / "disk", "4m") as path:
            yield path
    except PermissionError as exc:
        pytest.skip(str(exc))


def test_a_full_disk_refuses_writes_whole_and_recovers_once_space_is_freed(
    small_disk: Path,
) -> None:
    settings = Settings(home=small_disk / "home", embedder="off")
    prepare_home(settings)
    migrate(settings)
    rt = Runtime.build(settings)
    api = Api(create_app(runtime=rt).test_client(), ensure_token(settings))
    try:
        assert api.post("/v1/events", json=make_event()).status_code == 201
        filler = fill(small_disk, leave=32 * 1024)
        # A batch bigger than the space left: all of it or none of it.
        big = [{"type": "text", "content": f"{i} " + "x" * 8000} for i in range(20)]
        batch = [make_event(body=body) for body in big]
        res = api.post("/v1/events", json={"events": batch})
        assert res.status_code == 507, res.get_data(as_text=True)
        assert res.get_json()["error"] == "insufficient_storage"
        assert int(res.headers["Retry-After"]) > 0
        assert rt.storage.count_events([e["event_id"] for e in batch]) == 0
        # Reads still work on a full disk.
        assert api.get("/v1/stats").status_code == 200

        filler.unlink()
        res = api.post("/v1/events", json={"events": batch})
        assert res.status_code == 201, res.get_data(as_text=True)
        assert rt.storage.count_events([e["event_id"] for e in batch]) == len(batch)
    finally:
        rt.close()

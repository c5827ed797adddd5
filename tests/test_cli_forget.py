"""`wakemark forget` as a subprocess against a real HTTP server: dry run first, then the
cascade, and nothing outside the selection changes."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from wakemark.shared import project
from wakemark.shared.config import Settings
from wakemark.shared.models import MemoryRecord
from wakemark.shared.retrieval.lexical import search_lexical
from wakemark.shared.runtime import Runtime

pytestmark = pytest.mark.slow  # every test here starts a wakemark process

ACTOR = "alice"


def _forget(settings: Settings, cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("WAKEMARK_", "CLAUDE_"))}
    env.update(
        WAKEMARK_HOME=str(settings.home), WAKEMARK_PORT=str(settings.port), WAKEMARK_ACTOR=ACTOR
    )
    return subprocess.run(
        [sys.executable, "-m", "wakemark.services.cli.main", "forget", *args],
        env=env, cwd=cwd, capture_output=True, text=True, timeout=60,
    )  # fmt: skip


@pytest.fixture
def shop(served: Runtime, tmp_path: Path) -> tuple[Path, str, list[MemoryRecord]]:
    root = tmp_path / "shop"
    (root / ".git").mkdir(parents=True)
    ns = project.namespace_for(ACTOR, project.project_id(str(root.resolve())))
    records = [
        MemoryRecord(namespace=ns, title="Discount rounding uses ROUND_HALF_EVEN",
                     summary="cart totals", observation_type="bugfix"),
        MemoryRecord(namespace=ns, title="Discount codes expire at midnight UTC",
                     summary="billing", observation_type="decision"),
        MemoryRecord(namespace=ns, title="Deploys go through staging", summary="ops",
                     observation_type="decision"),
    ]  # fmt: skip
    for i, record in enumerate(records):
        served.storage.put_memory_record(record)
        served.storage.put_embedding(record.record_id, np.full(384, i + 1.0, dtype=np.float32))
    return root, ns, records


def test_a_query_is_counted_first_then_forgotten_with_its_vectors(
    served: Runtime, shop: tuple[Path, str, list[MemoryRecord]]
) -> None:
    root, ns, (rounding, codes, deploys) = shop
    dry = _forget(served.settings, root, "--query", "discount")
    assert dry.returncode == 0, dry.stderr
    assert "Would delete 2 memories (2 vectors)" in dry.stdout and "--yes" in dry.stdout
    assert len(served.storage.list_memory_records(ns).items) == 3  # nothing gone yet
    done = _forget(served.settings, root, "--query", "discount", "--yes")
    assert done.returncode == 0, done.stderr
    assert "Deleted 2 memories." in done.stdout
    left = [r.record_id for r in served.storage.list_memory_records(ns).items]
    assert left == [deploys.record_id]
    assert served.storage.embedded_ids(ns) == [deploys.record_id]
    assert search_lexical(served.storage, ns, "discount", 10) == []  # no ghost full-text rows
    again = _forget(served.settings, root, "--query", "discount")
    assert again.returncode == 1 and "No memory matches" in again.stdout


def test_a_filter_forgets_only_what_it_names(
    served: Runtime, shop: tuple[Path, str, list[MemoryRecord]]
) -> None:
    root, ns, (rounding, codes, deploys) = shop
    done = _forget(served.settings, root, "--type", "decision", "--yes")
    assert done.returncode == 0, done.stderr
    assert [r.record_id for r in served.storage.list_memory_records(ns).items] == [
        rounding.record_id
    ]


def test_ids_and_a_filter_together_are_refused(
    served: Runtime, shop: tuple[Path, str, list[MemoryRecord]]
) -> None:
    root, _, (rounding, _, _) = shop
    done = _forget(served.settings, root, rounding.record_id, "--type", "bugfix")
    assert done.returncode == 2 and "not both" in done.stderr
    assert served.storage.get_memory_record(rounding.record_id) is not None


def test_a_query_selects_what_search_lists(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # With vectors every record ranks for any query: only the hits that reach the gate's
    # floor (what `wakemark search` lists) may be selected, as docs/cli.md says.
    from wakemark.services.cli import main as cli
    from wakemark.services.mcp import client

    asked: list[dict[str, object]] = []

    class Client:
        def get(self, path: str, **params: object) -> dict[str, object]:
            asked.append({"path": path, **params})
            return {"items": []}

    for name in [n for n in os.environ if n.startswith("WAKEMARK_")]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("WAKEMARK_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("WAKEMARK_MIN_RELEVANCE", "0.25")
    monkeypatch.setattr(client, "client_for", lambda _settings: Client())
    assert cli.main(["forget", "--query", "zebra"]) == 1
    assert "No memory matches" in capsys.readouterr().out
    [search] = asked
    assert search["path"] == "/v1/search" and search["min_relevance"] == 0.25

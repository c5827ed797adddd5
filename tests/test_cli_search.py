"""`wakemark search` as a subprocess against a real HTTP server (or none)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import free_port
from wakemark.services.api.security import ensure_token
from wakemark.shared import project
from wakemark.shared.config import Settings, prepare_home
from wakemark.shared.models import MemoryRecord
from wakemark.shared.runtime import Runtime

pytestmark = pytest.mark.slow  # every test here starts a wakemark process

ACTOR = "alice"


def _project(root: Path) -> str:
    (root / ".git").mkdir(parents=True)
    return project.namespace_for(ACTOR, project.project_id(str(root.resolve())))


def _search(
    settings: Settings, cwd: Path, *args: str, **extra: str
) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("WAKEMARK_", "CLAUDE_"))}
    env.update(
        WAKEMARK_HOME=str(settings.home), WAKEMARK_PORT=str(settings.port), WAKEMARK_ACTOR=ACTOR
    )
    env.update(extra)
    return subprocess.run(
        [sys.executable, "-m", "wakemark.services.cli.main", "search", *args],
        env=env, cwd=cwd, capture_output=True, text=True, timeout=60,
    )  # fmt: skip


@pytest.fixture
def shop(served: Runtime, tmp_path: Path) -> Path:
    root = tmp_path / "shop"
    ns = _project(root)
    for title, summary in [
        ("Discount rounding uses ROUND_HALF_EVEN", "Cart totals were off by a cent."),
        ("Discount codes expire at midnight UTC", "Checked against the billing tests."),
    ]:
        served.storage.put_memory_record(
            MemoryRecord(namespace=ns, title=title, summary=summary, observation_type="bugfix")
        )
    other = _project(tmp_path / "weather")
    served.storage.put_memory_record(
        MemoryRecord(namespace=other, title="Forecast cache keyed by station", summary="")
    )
    (root / "src").mkdir()
    return root


def test_prints_this_projects_hits(served: Runtime, shop: Path) -> None:
    done = _search(served.settings, shop / "src", "discount", "rounding")
    assert done.returncode == 0, done.stderr
    assert "Discount rounding uses ROUND_HALF_EVEN" in done.stdout
    assert "bugfix" in done.stdout and "Cart totals were off by a cent." in done.stdout
    assert "Forecast" not in done.stdout


def test_limit_and_json(served: Runtime, shop: Path) -> None:
    done = _search(served.settings, shop, "discount", "--json", "--limit", "1")
    assert done.returncode == 0, done.stderr
    reply = json.loads(done.stdout)
    assert len(reply["items"]) == 1
    assert reply["items"][0]["record"]["title"].startswith("Discount")


def test_all_projects_reaches_the_others(served: Runtime, shop: Path) -> None:
    assert _search(served.settings, shop, "forecast").returncode == 1
    done = _search(served.settings, shop, "forecast", "--all-projects")
    assert done.returncode == 0, done.stderr
    assert "Forecast cache keyed by station" in done.stdout


def test_no_hit_exits_1(served: Runtime, shop: Path) -> None:
    done = _search(served.settings, shop, "kubernetes")
    assert done.returncode == 1
    assert "No relevant memories for 'kubernetes'" in done.stdout


def test_hits_below_the_gates_threshold_are_not_listed(served: Runtime, shop: Path) -> None:
    # The gate's threshold (WAKEMARK_MIN_RELEVANCE) decides, as for an agent's prompt;
    # --min-relevance overrides it, 0 lists every match.
    strict = _search(served.settings, shop, "discount", WAKEMARK_MIN_RELEVANCE="1")
    assert strict.returncode == 1, strict.stdout + strict.stderr
    assert strict.stdout.startswith("No relevant memories for 'discount'")
    assert "Discount" not in strict.stdout
    shown = _search(
        served.settings, shop, "discount", "--min-relevance", "0", WAKEMARK_MIN_RELEVANCE="1"
    )
    assert shown.returncode == 0, shown.stderr
    assert "Discount rounding uses ROUND_HALF_EVEN" in shown.stdout


@pytest.mark.parametrize(
    ("args", "error"),
    [
        (["--limit", "abc"], "argument --limit: expected an integer from 1 to 100, got 'abc'"),
        (["--limit", "0"], "argument --limit: expected an integer from 1 to 100, got '0'"),
        (["--min-relevance", "x"], "argument --min-relevance: expected a number from 0 to 1"),
        (["--limt", "3"], "unrecognized arguments: --limt"),
    ],
)
def test_bad_options_name_the_search_command(
    settings: Settings, tmp_path: Path, args: list[str], error: str
) -> None:
    done = _search(settings, tmp_path, "anything", *args)
    assert done.returncode == 2
    assert done.stderr.startswith("usage: wakemark search ")  # its own usage, not the top level
    assert done.stderr.splitlines()[-1].startswith(f"wakemark search: error: {error}")
    assert "Traceback" not in done.stderr


def test_server_down_exits_2_with_a_message(settings: Settings, tmp_path: Path) -> None:
    prepare_home(settings)
    ensure_token(settings)
    down = settings.replace(port=free_port())
    done = _search(down, tmp_path, "anything")
    assert done.returncode == 2
    assert "not running" in done.stderr and "wakemark serve" in done.stderr
    assert "Traceback" not in done.stderr


def test_a_hit_whose_code_went_or_changed_says_so_here_and_to_the_agent(
    served: Runtime, tmp_path: Path, user_home: Path
) -> None:
    from wakemark.services.mcp import tools
    from wakemark.services.mcp.client import client_for
    from wakemark.shared.retrieval.staleness import capture

    root = user_home / "shop"
    ns = _project(root)
    (root / "cart.py").write_text("def round_total(x):\n    return x\n")
    (root / "coupon.py").write_text("def expire_coupon(x):\n    return x\n")
    for name in ("cart.py", "coupon.py"):
        title = f"Discount rounding lives in {name}"
        record = MemoryRecord(namespace=ns, title=title, summary="", files_touched=[name])
        served.storage.put_memory_record(record)
        with served.storage.transaction() as tx:
            tx.put_anchors(capture(record, str(root), readable=True))  # type: ignore[arg-type]
    (root / "cart.py").unlink()
    (root / "coupon.py").write_text("def expire_coupon(x):\n    return None\n")

    done = _search(served.settings, root, "discount", "rounding")
    assert done.returncode == 0, done.stderr
    assert "· gone: cart.py" in done.stdout and "· changed since: coupon.py" in done.stdout
    scope = tools.Scope(ns, f"/actor/{ACTOR}/")
    found = tools.search(client_for(served.settings), scope, {"query": "discount rounding"})
    assert "; gone: cart.py)" in found.text and "; changed since: coupon.py)" in found.text
    assert sorted(h["code"] for h in found.data["items"]) == ["changed since: coupon.py",
                                                              "gone: cart.py"]  # fmt: skip
    ids = [h["id"] for h in found.data["items"]]
    full = tools.get_records(client_for(served.settings), scope, {"ids": ids})
    assert "Code: gone: cart.py" in full.text and "Code: changed since: coupon.py" in full.text
    assert sorted(r["code"] for r in full.data["records"]) == ["changed since: coupon.py",
                                                               "gone: cart.py"]  # fmt: skip

"""A real server (the API app on a loopback port, in a thread) and Debian's Chromium."""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import free_port
from tests.served import serving
from wakemark.services.api.security import ensure_token
from wakemark.shared.config import Settings, prepare_home
from wakemark.shared.runtime import Runtime
from wakemark.shared.storage import migrate

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking"]
# Set to a folder (docs/screenshots) to refresh the screenshots of the README and docs/viewer.md.
SHOTS = os.environ.get("WAKEMARK_SCREENSHOTS")


@dataclass
class Server:
    base: str
    token: str
    runtime: Runtime


@pytest.fixture
def server(tmp_path: Path) -> Iterator[Server]:
    port = free_port()
    # Text evidence only (embedder off) and one matching record: lower bars, so the walk's
    # prompt is injected. A roomy deadline: what the page shows must not depend on load.
    settings = Settings(
        home=tmp_path / "home",
        embedder="off",
        port=port,
        min_prompt_relevance=0.0,
        min_relevance=0.05,
        retrieval_budget_ms=10_000,
    )
    prepare_home(settings)
    migrate(settings)
    runtime = Runtime.build(settings)
    with serving(runtime, port, threaded=True):
        yield Server(f"http://127.0.0.1:{port}", ensure_token(settings), runtime)
    runtime.close()


@pytest.fixture(scope="session")
def browser() -> Iterator[Any]:
    if not os.path.exists(CHROMIUM):
        reason = f"{CHROMIUM} missing: apt-get install chromium (.ci/run does)"
        if os.environ.get("CI") == "true" or os.environ.get("WAKEMARK_REQUIRE_SERVICES") == "1":
            pytest.fail(reason)
        pytest.skip(reason)
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield browser
        browser.close()


@pytest.fixture
def page(browser: Any) -> Iterator[Any]:
    context = browser.new_context(viewport={"width": 1200, "height": 800})
    page = context.new_page()
    page.set_default_timeout(10_000)
    yield page
    context.close()


def shot(page: Any, name: str, tmp_path: Path, full_page: bool = False) -> None:
    """A screenshot of the page as it is (``full_page``: all of it, not only the
    viewport); into SHOTS too when set."""
    folder = Path(SHOTS) if SHOTS else tmp_path
    folder.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(folder / f"{name}.png"), full_page=full_page)

"""``wakemark ui``: the viewer opened with a one-time code (never the token on the
browser's command line), or its address with the token printed."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from tests.conftest import free_port
from tests.test_cli import _env, _wakemark
from wakemark.services.ui import handoff
from wakemark.shared.config import Settings

pytestmark = pytest.mark.slow  # every test here starts a wakemark process


def test_ui_gives_the_browser_a_one_time_code_not_the_token(tmp_path: Path) -> None:
    seen = tmp_path / "browser-argv"
    browser = tmp_path / "browser"
    browser.write_text(f'#!/bin/sh\nprintf "%s" "$*" > {seen}\n')
    browser.chmod(browser.stat().st_mode | stat.S_IEXEC)
    port = str(free_port())
    done = _wakemark("ui", env=_env(tmp_path, BROWSER=str(browser), WAKEMARK_PORT=port))
    assert done.returncode == 0, done.stderr
    token = (tmp_path / "home" / "token").read_text().strip()
    argv = seen.read_text()
    assert token not in argv  # what /proc/<browser>/cmdline shows
    prefix = f"http://127.0.0.1:{port}/ui#code="
    assert argv.startswith(prefix)
    assert token not in done.stdout  # opened: the address is not printed with the token
    assert "not running" in done.stdout  # nothing listens on that port
    # The code is good once, for this home's server.
    settings = Settings(home=tmp_path / "home")
    code = argv.removeprefix(prefix)
    assert handoff.redeem(settings, code) and not handoff.redeem(settings, code)


def test_ui_prints_the_address_when_no_browser_opens(tmp_path: Path) -> None:
    port = str(free_port())
    for args, extra in ((("ui",), {"BROWSER": "false"}), (("ui", "--print"), {})):
        done = _wakemark(*args, env=_env(tmp_path, WAKEMARK_PORT=port, **extra))
        token = (tmp_path / "home" / "token").read_text().strip()
        assert done.returncode == 0, done.stderr
        assert f"http://127.0.0.1:{port}/ui#token={token}" in done.stdout, args

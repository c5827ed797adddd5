"""Opt-out per project: an ignored project's hooks and events are never stored."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.api.conftest import make_event
from wakemark.services.api import create_app
from wakemark.services.api import optout as api_optout
from wakemark.services.api.security import ensure_token
from wakemark.shared import optout
from wakemark.shared.config import Settings
from wakemark.shared.runtime import Runtime
from wakemark.shared.storage import migrate

from .conftest import ACTOR, Hooks, _hooks, load

SESSION = ("SessionStart", "UserPromptSubmit", "PostToolUse", "PostToolUse.edit", "Stop")


def _run_session(hooks: Hooks, project_dir: Path) -> None:
    for name in SESSION:
        res = hooks.post("claude-code", load("claude-code", name, project_dir))
        assert res.status_code in (200, 204), (name, res.get_data(as_text=True))


def _stored(runtime: Runtime) -> dict[str, int]:
    stats = runtime.storage.stats()
    return {k: stats[k] for k in ("events", "memories", "pending_extraction")}


def test_ignore_file_at_the_root_or_a_glob_ignores_a_project(tmp_path: Path) -> None:
    root = tmp_path / "shop"
    (root / ".git").mkdir(parents=True)
    (root / "src").mkdir()
    assert optout.ignored(str(root)) is None
    assert optout.ignored(None) is None
    (root / ".wakemarkignore").write_text("")
    assert ".wakemarkignore exists" in (optout.ignored(str(root)) or "")
    assert optout.ignored(str(root / "src")) is not None  # a cwd below the root
    (root / ".wakemarkignore").unlink()
    assert optout.ignored(str(root), [str(tmp_path / "sh*")]) is not None
    assert optout.ignored(str(root), [str(tmp_path / "weather")]) is None
    # A path this process cannot see (the API in a container) still matches a glob.
    assert optout.ignored("/home/bob/client-acme", ["/home/*/client-*"]) is not None
    assert optout.ignored("/home/bob/client-acme") is None


def test_globs_come_from_the_setting() -> None:
    env = {"WAKEMARK_IGNORE_PROJECTS": " ~/work/client-*, */secret-*,"}
    globs = Settings.from_env(env).ignore_projects
    assert globs == (os.path.expanduser("~/work/client-*"), "*/secret-*")


def test_an_ignored_projects_hooks_store_nothing(
    hooks: Hooks, project_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    (project_dir / ".wakemarkignore").write_text("")
    before = api_optout.dropped()
    with caplog.at_level(logging.INFO, logger="wakemark.api"):
        _run_session(hooks, project_dir)
    assert _stored(hooks.runtime) == {"events": 0, "memories": 0, "pending_extraction": 0}
    assert hooks.runtime.storage.pending_turns() == []
    assert api_optout.dropped() - before == 4  # SessionStart stores no event
    assert f"dropping events of ignored project {project_dir.resolve()}" in caplog.text
    health = hooks.client.get(
        "/health",
        headers={"Host": "127.0.0.1:37800", "Authorization": f"Bearer {hooks.token}"},
    ).get_json()
    assert health["dropped"]["ignored_project"] == api_optout.dropped()
    metrics = hooks.client.get(
        "/metrics",
        headers={"Host": "127.0.0.1:37800", "Authorization": f"Bearer {hooks.token}"},
    ).get_data(as_text=True)
    assert f'wakemark_events_dropped_total{{reason="ignored_project"}} {api_optout.dropped()}' in (
        metrics
    )

    # Resumed: the same session is stored again.
    (project_dir / ".wakemarkignore").unlink()
    _run_session(hooks, project_dir)
    assert _stored(hooks.runtime)["events"] == 4


def test_posted_events_of_an_ignored_project_are_answered_not_stored(
    hooks: Hooks, tmp_path: Path
) -> None:
    ignored, kept = tmp_path / "client-acme", tmp_path / "shop"
    for root in (ignored, kept):
        (root / ".git").mkdir(parents=True)
    (ignored / ".wakemarkignore").write_text("")
    events = [
        make_event("note", source={"surface": "cli", "project_path": str(ignored)}),
        make_event("note", source={"surface": "cli", "project_path": str(kept)}),
    ]
    headers = {"Authorization": f"Bearer {hooks.token}", "Host": "127.0.0.1:37800"}
    res = hooks.client.post("/v1/events", json={"events": events}, headers=headers)
    assert res.status_code == 201
    assert [r["stored"] for r in res.get_json()["results"]] == [False, True]
    assert hooks.runtime.storage.get_event(events[0]["event_id"]) is None
    assert hooks.runtime.storage.get_event(events[1]["event_id"]) is not None
    single = make_event("prompt", source={"surface": "cli", "project_path": str(ignored)})
    res = hooks.client.post("/v1/events", json=single, headers=headers)
    assert (res.status_code, res.get_json()["stored"]) == (201, False)


def test_a_glob_in_the_settings_ignores_a_project(settings: Settings, project_dir: Path) -> None:
    from wakemark.shared.config import prepare_home

    cfg = settings.replace(ignore_projects=(str(project_dir.parent / "sh*"),))
    prepare_home(cfg)
    migrate(cfg)
    for hooks in _hooks(cfg):
        _run_session(hooks, project_dir)
        assert _stored(hooks.runtime)["events"] == 0


@pytest.mark.redis
@pytest.mark.postgres
def test_celery_shape_stores_and_enqueues_nothing(
    settings: Settings, pg_url: str, redis_url: str, project_dir: Path
) -> None:
    cfg = settings.replace(database_url=pg_url, redis_url=redis_url)
    migrate(cfg)
    rt = Runtime.build(cfg)
    try:
        assert rt.jobs.mode == "celery"
        hooks = Hooks(create_app(runtime=rt).test_client(), ensure_token(cfg), rt)
        (project_dir / ".wakemarkignore").write_text("")
        _run_session(hooks, project_dir)
        assert _stored(rt) == {"events": 0, "memories": 0, "pending_extraction": 0}
        assert rt.jobs.queue_depth() == 0
    finally:
        rt.close()


# --- the CLI ------------------------------------------------------------------------------


def _cli(home: Path, cwd: Path, *args: str, **extra: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("WAKEMARK_", "CLAUDE_"))}
    env.update(WAKEMARK_HOME=str(home), WAKEMARK_ACTOR=ACTOR, **extra)
    return subprocess.run(
        [sys.executable, "-m", "wakemark.services.cli.main", *args],
        env=env, cwd=cwd, capture_output=True, text=True, timeout=60,
    )  # fmt: skip


@pytest.fixture
def home(tmp_path: Path) -> Iterator[Path]:
    yield tmp_path / "home"


@pytest.mark.slow
def test_pause_and_resume_create_and_remove_the_file(home: Path, project_dir: Path) -> None:
    marker = project_dir / ".wakemarkignore"
    done = _cli(home, project_dir / "src", "pause")
    assert done.returncode == 0, done.stderr
    assert marker.is_file() and "paused" in done.stdout
    assert optout.ignored(str(project_dir)) is not None
    assert _cli(home, project_dir, "pause").returncode == 0  # twice is fine
    done = _cli(home, project_dir / "src", "resume")
    assert done.returncode == 0, done.stderr
    assert not marker.exists() and "resumed" in done.stdout


@pytest.mark.slow
def test_resume_says_when_the_setting_still_ignores_it(home: Path, project_dir: Path) -> None:
    done = _cli(home, project_dir, "resume", WAKEMARK_IGNORE_PROJECTS=str(project_dir))
    assert done.returncode == 1
    assert "stays ignored: WAKEMARK_IGNORE_PROJECTS" in done.stderr


@pytest.mark.slow
def test_pause_outside_a_project_fails_clearly(home: Path, tmp_path: Path) -> None:
    bare = tmp_path / "bare"
    bare.mkdir()
    done = _cli(home, bare, "pause", HOME=str(tmp_path))
    assert done.returncode == 1
    assert "is in no project" in done.stderr and "pass --project DIR" in done.stderr
    named = _cli(home, tmp_path, "pause", "--project", str(bare), HOME=str(tmp_path))
    assert named.returncode == 1
    assert "is in no project" in named.stderr and "--project" not in named.stderr
    assert not (bare / ".wakemarkignore").exists()


@pytest.mark.slow
def test_status_shows_a_paused_project(served: Any, project_dir: Path) -> None:
    settings = served.settings
    port = str(settings.port)
    home = settings.home
    done = _cli(home, project_dir, "status", WAKEMARK_PORT=port)
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"project   {project_dir.resolve()}: recording" in done.stdout
    (project_dir / ".wakemarkignore").write_text("")
    done = _cli(home, project_dir, "status", WAKEMARK_PORT=port)
    assert f"{project_dir.resolve()}: paused, nothing stored" in done.stdout

"""The distribution as a user gets it: sdist -> wheel -> a non-editable install in a fresh
venv outside the checkout, then the CLI, the server and an installed hook from there.

Nothing here may import the checkout: every command runs the venv's own ``wakemark``
with the working directory in a temp folder, so a file missing from the wheel fails.
"""

from __future__ import annotations

import http.client
import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import time
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import free_port, per_run  # loaded for every test anyway

pytestmark = [pytest.mark.slow, pytest.mark.wheel, pytest.mark.timeout(600)]

ROOT = Path(__file__).resolve().parents[1]


def _run(argv: list[str], **kwargs: Any) -> subprocess.CompletedProcess[str]:
    out = subprocess.run(argv, capture_output=True, text=True, timeout=300, **kwargs)
    assert out.returncode == 0, (
        f"{shlex.join(argv)} -> {out.returncode}\n{out.stdout}\n{out.stderr}"
    )
    return out


# Built once per run and shared by the test processes: a build and a venv cost a minute.
@pytest.fixture(scope="session")
def dist(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """sdist, then the wheel built from that sdist (so the sdist is proven complete)."""

    def build(out: Path) -> Path:
        if not list(out.glob("wakemark-*.whl")):
            for old in out.glob("wakemark-*"):  # a build that failed half way
                old.unlink()
            _run([sys.executable, "-m", "build", "--no-isolation", "--outdir", str(out), str(ROOT)])
        return out

    return per_run(tmp_path_factory, "dist", build)


@pytest.fixture(scope="session")
def wheel(dist: Path) -> Path:
    (found,) = dist.glob("wakemark-*.whl")
    return found


@pytest.fixture(scope="session")
def venv(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    def build(folder: Path) -> Path:
        where, ready = folder / "v", folder / "ready"
        if not ready.exists():
            shutil.rmtree(where, ignore_errors=True)
            _run([sys.executable, "-m", "venv", str(where)])
            _run([str(where / "bin" / "pip"), "install", "-q", str(wheel)], cwd=where)
            ready.touch()
        return where

    return per_run(tmp_path_factory, "venv", build)


def test_the_wheel_holds_one_package_and_every_migration(wheel: Path) -> None:
    names = zipfile.ZipFile(wheel).namelist()
    tops = {n.split("/")[0] for n in names}
    assert tops == {"wakemark", wheel.name.split("-py3")[0] + ".dist-info"}
    migrations = {
        "wakemark/" + str(p.relative_to(ROOT)) for p in (ROOT / "migrations").rglob("*.sql")
    }
    assert migrations and migrations <= set(names)
    assert "wakemark/services/cli/hook.py" in names  # the forwarder's former path
    assert "wakemark/services/forwarder/hook.py" in names
    assert "wakemark/services/forwarder/forward.py" in names


def test_the_sdist_carries_the_sources(dist: Path) -> None:
    import tarfile

    (sdist,) = dist.glob("wakemark-*.tar.gz")
    with tarfile.open(sdist) as tar:
        members = {m.split("/", 1)[1] for m in tar.getnames() if "/" in m}
    assert {"pyproject.toml", "README.md", "wakemark/__init__.py"} <= members
    assert "wakemark/migrations/sqlite/0001_initial.sql" in members


# A user's venv holds wakemark and its dependencies, the ONNX runtime among them, and no
# torch: the 500 MB budget is what `pip install wakemark` may cost on disk.
MAX_VENV_MB = 500


def _site(venv: Path) -> Path:
    return next((venv / "lib").glob("python3.*/site-packages"))


def test_installing_the_wheel_brings_no_torch_and_no_cuda(venv: Path) -> None:
    # What `pip install wakemark` installed into an empty venv, resolved by pip itself
    # against the package index this machine is configured with.
    names = set()
    for info in _site(venv).glob("*.dist-info"):
        metadata = (info / "METADATA").read_text(encoding="utf-8", errors="replace")
        names.update(line[6:].strip().lower() for line in metadata.splitlines()[:5]
                     if line.startswith("Name: "))  # fmt: skip
    assert {"wakemark", "onnxruntime", "onnx", "tokenizers", "numpy"} <= names
    heavy = sorted(n for n in names if n in ("torch", "triton") or n.startswith("nvidia-"))
    assert heavy == [], f"pip install wakemark brought {heavy}"


def test_a_fresh_venv_with_the_wheel_stays_small(venv: Path) -> None:
    size = sum(p.lstat().st_size for p in venv.rglob("*") if p.is_file() and not p.is_symlink())
    assert size / 1e6 <= MAX_VENV_MB, f"the installed venv takes {size / 1e6:.0f} MB"
    site = _site(venv)
    assert not (site / "torch").exists() and not (site / "sentence_transformers").exists()


def _get(port: int, path: str, token: str) -> tuple[int, Any]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        conn.request("GET", path, headers={"Authorization": f"Bearer {token}"})
        res = conn.getresponse()
        return res.status, json.loads(res.read() or b"null")
    finally:
        conn.close()


@pytest.fixture
def user(tmp_path: Path, venv: Path) -> dict[str, str]:
    """A user's environment: a temp HOME, nothing of the checkout or of this venv."""
    home = tmp_path / "home"
    home.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("WAKEMARK_", "PYTHON"))}
    env.update(
        HOME=str(home),
        PATH=f"{venv / 'bin'}:{env.get('PATH', '/usr/bin:/bin')}",
        WAKEMARK_EMBEDDER="off",
        WAKEMARK_PORT=str(free_port()),
    )
    env.pop("VIRTUAL_ENV", None)
    return env


@pytest.fixture
def served(user: dict[str, str], venv: Path, tmp_path: Path) -> Iterator[dict[str, str]]:
    wakemark = str(venv / "bin" / "wakemark")
    _run([wakemark, "migrate"], env=user, cwd=tmp_path)
    proc = subprocess.Popen(
        [wakemark, "serve"], env=user, cwd=tmp_path, stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE, start_new_session=True,
    )  # fmt: skip
    token_file = Path(user["HOME"]) / ".wakemark" / "token"  # written by serve at start
    port = int(user["WAKEMARK_PORT"])
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                token = token_file.read_text().strip()
                if _get(port, "/health", token)[0] == 200:
                    break
            except OSError:
                pass
            assert proc.poll() is None, proc.stderr.read().decode() if proc.stderr else ""
            assert time.monotonic() < deadline, "wakemark serve never answered /health"
            time.sleep(0.2)
        yield {**user, "TOKEN": token}
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=30)


def test_the_installed_cli_migrates_serves_and_installs_a_working_hook(
    served: dict[str, str], venv: Path, tmp_path: Path
) -> None:
    wakemark = str(venv / "bin" / "wakemark")
    env = {k: v for k, v in served.items() if k != "TOKEN"}
    port, token = int(env["WAKEMARK_PORT"]), served["TOKEN"]
    status, health = _get(port, "/health", token)
    assert status == 200 and health["status"] == "ok"

    dry = _run([wakemark, "install", "claude-code", "--dry-run"], env=env, cwd=tmp_path)
    site = str(venv / "lib")
    assert site in dry.stdout and str(ROOT) not in dry.stdout
    assert not (Path(env["HOME"]) / ".claude" / "settings.json").exists()

    _run([wakemark, "install", "kiro-cli"], env=env, cwd=tmp_path)
    agent = json.loads((Path(env["HOME"]) / ".kiro" / "agents" / "wakemark.json").read_text())
    (prompt_hook,) = agent["hooks"]["userPromptSubmit"]
    argv = shlex.split(prompt_hook["command"])
    assert argv[-1] == "kiro-cli" and argv[-2].startswith(site)

    project = tmp_path / "proj"
    (project / ".git").mkdir(parents=True)
    payload = {
        "hook_event_name": "userPromptSubmit",
        "cwd": str(project),
        "session_id": "8d3f0a6b-2c41-4e97-b5a0-6f1e9c7d2b34",
        "prompt": "why does the packaging test install the wheel?",
    }
    hook = subprocess.run(
        argv, input=json.dumps(payload), env=env, cwd=project, capture_output=True,
        text=True, timeout=30,
    )  # fmt: skip
    assert (hook.returncode, hook.stderr) == (0, "")
    status, events = _get(port, "/v1/events?limit=10", token)
    assert status == 200
    assert [e["kind"] for e in events["items"]] == ["prompt"]


@pytest.mark.postgres
def test_the_installed_cli_migrates_postgres(
    user: dict[str, str], venv: Path, tmp_path: Path, pg_url: str
) -> None:
    env = {**user, "WAKEMARK_DATABASE_URL": pg_url}
    out = _run([str(venv / "bin" / "wakemark"), "migrate"], env=env, cwd=tmp_path)
    assert "0001_initial" in out.stdout + out.stderr

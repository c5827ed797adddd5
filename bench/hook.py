"""`wakemark hook` wall time per invocation against a real `wakemark serve`.

Commands interleaved run by run so machine noise hits them alike: the bare interpreter
(``/usr/bin/python3 -S -c pass``, the baseline), the forwarder exactly as `wakemark
install` writes it (``hook_command``: the system python3 when usable, else the venv's),
the same with no server listening (the client's own cost, no request handling), the
forwarder under the venv's interpreter, and the ``wakemark hook`` console script
(site-packages, ``.pth`` files) for comparison. Each
forwarded payload is a Claude Code PostToolUse with its own ``tool_use_id``, so every run
stores a new event. Target: forwarder p50 ≤ 15 ms above the bare interpreter.
Run alone: ``python -m bench.hook [runs]``.
"""

from __future__ import annotations

import json
import os
import resource
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.ingest import Server, _pct
from wakemark.services.agents.configs import Where, hook_command

RUNS = 200
FIXTURE = Path(__file__).resolve().parents[1] / "tests/fixtures/hooks/claude-code/PostToolUse.json"


def timed_run(argv: list[str], stdin: bytes, env: dict[str, str]) -> tuple[float, float]:
    """Wall and CPU seconds (user + system) of one run of ``argv``, which must succeed
    and print nothing to stderr."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    done = subprocess.run(argv, input=stdin, env=env, capture_output=True)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0 or done.stderr:
        raise RuntimeError(f"{argv[0]} failed: {done.stderr[:200]!r}")
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def _time(argv: list[str], stdin: bytes, env: dict[str, str]) -> float:
    return timed_run(argv, stdin, env)[0]


def _installed_forwarder(forwarder: list[str], where: Path) -> list[str]:
    """The same command with the forwarder of a wheel built from this tree and installed
    by pip into ``where`` (as after ``pipx install``): it runs from site-packages."""
    root = Path(__file__).resolve().parents[1]
    dist, site = where / "dist", where / "site"
    build = [sys.executable, "-m", "build", "--wheel", "--no-isolation", "--outdir", str(dist)]
    subprocess.run([*build, str(root)], check=True, capture_output=True)
    (wheel,) = dist.glob("wakemark-*.whl")
    pip = [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(site)]
    subprocess.run([*pip, str(wheel)], check=True, capture_output=True)
    hook = site / "wakemark" / "services" / "forwarder" / "hook.py"
    return [str(hook) if arg.endswith("hook.py") else arg for arg in forwarder]


def run(runs: int = RUNS) -> dict[str, Any]:
    server = Server(workers=1)  # wakemark serve's own threads
    wheel_dir = Path(tempfile.mkdtemp(prefix="wakemark-wheel-"))
    try:
        env = {k: v for k, v in os.environ.items() if not k.startswith("WAKEMARK_")}
        env.update(WAKEMARK_PORT=str(server.port), WAKEMARK_TOKEN=server.token)
        base = json.loads(FIXTURE.read_text())
        # A default install (port 37800, ~/.wakemark): the command has no env prefix.
        default = Where(home=os.path.expanduser("~"), project=None, port=37800, token=None)
        forwarder = shlex.split(hook_command(default, "claude-code"))
        venv_forwarder = [sys.executable, *forwarder[1:]]
        installed = _installed_forwarder(forwarder, wheel_dir)
        script = [str(Path(sys.executable).with_name("wakemark")), "hook", "claude-code"]
        # Same forwarder, nothing listening: its own cost without the server's work.
        down = {**env, "WAKEMARK_PORT": "9", "WAKEMARK_HOME": tempfile.mkdtemp(prefix="wakemark-")}
        times: dict[str, list[float]] = {
            "bare": [],
            "forwarder": [],
            "forwarder_installed_wheel": [],
            "forwarder_server_down": [],
            "forwarder_venv_python": [],
            "console_script": [],
        }
        for i in range(runs):
            payload = json.dumps({**base, "tool_use_id": f"toolu_bench_{i}"}).encode()
            times["bare"].append(_time(["/usr/bin/python3", "-S", "-c", "pass"], b"", env))
            times["forwarder"].append(_time(forwarder, payload, env))
            wheel_payload = json.dumps({**base, "tool_use_id": f"toolu_w_{i}"}).encode()
            times["forwarder_installed_wheel"].append(_time(installed, wheel_payload, env))
            times["forwarder_server_down"].append(_time(forwarder, payload, down))
            venv_payload = json.dumps({**base, "tool_use_id": f"toolu_v_{i}"}).encode()
            times["forwarder_venv_python"].append(_time(venv_forwarder, venv_payload, env))
            if i % 4 == 0:  # the slow path only needs a rough number
                script_payload = json.dumps({**base, "tool_use_id": f"toolu_s_{i}"}).encode()
                times["console_script"].append(_time(script, script_payload, env))
        status, body = _stats(server)
    finally:
        server.stop()
        shutil.rmtree(wheel_dir, ignore_errors=True)
    result: dict[str, Any] = {
        "name": "hook",
        "config": {
            "runs": runs,
            "cpus": os.cpu_count(),
            "command": shlex.join(forwarder),
            "loadavg_1m": round(os.getloadavg()[0], 2),
        },
    }
    for name, values in times.items():
        result[name] = {"p50_ms": _pct(values, 50), "p95_ms": _pct(values, 95), "n": len(values)}
    over = result["forwarder"]["p50_ms"] - result["bare"]["p50_ms"]
    result["forwarder_over_bare_p50_ms"] = round(over, 2)
    result["forwarder_over_bare_p95_ms"] = round(
        result["forwarder"]["p95_ms"] - result["bare"]["p95_ms"], 2
    )
    wheel_over = result["forwarder_installed_wheel"]["p50_ms"] - result["bare"]["p50_ms"]
    result["installed_wheel_over_bare_p50_ms"] = round(wheel_over, 2)
    result["venv_python_over_bare_p50_ms"] = round(
        result["forwarder_venv_python"]["p50_ms"] - result["bare"]["p50_ms"], 2
    )
    result["client_only_over_bare_p50_ms"] = round(
        result["forwarder_server_down"]["p50_ms"] - result["bare"]["p50_ms"], 2
    )
    result["events_stored"] = body.get("events") if status == 200 else None
    result["targets"] = {
        "forwarder_p50_over_bare_ms<=15": over <= 15,
        "forwarder_p95_over_bare_ms<=15": result["forwarder_over_bare_p95_ms"] <= 15,
        "installed_wheel_p50_over_bare_ms<=10": wheel_over <= 10,
    }
    return result


def markdown(result: dict[str, Any]) -> str:
    cfg = result["config"]
    rows = [
        f"| {name} | {result[name]['p50_ms']} | {result[name]['p95_ms']} | {result[name]['n']} |"
        for name in (
            "bare",
            "forwarder",
            "forwarder_installed_wheel",
            "forwarder_server_down",
            "forwarder_venv_python",
            "console_script",
        )
    ]
    ok = ", ".join(f"{k}: {'yes' if v else 'NO'}" for k, v in result["targets"].items())
    return "\n".join(
        [
            "# hook",
            "",
            f"Wall time of one `wakemark hook claude-code` (PostToolUse) per invocation, "
            f"{cfg['runs']} runs interleaved, against a real `wakemark serve` on {cfg['cpus']} "
            f"CPUs (1-min load average {cfg['loadavg_1m']} at the end). Forwarder as "
            f"installed: `{cfg['command']}`. Baseline: `/usr/bin/python3 -S -c pass`.",
            "",
            "| command | p50 ms | p95 ms | runs |",
            "|---|---|---|---|",
            *rows,
            "",
            f"Forwarder over the bare interpreter: p50 +{result['forwarder_over_bare_p50_ms']} "
            f"ms, p95 +{result['forwarder_over_bare_p95_ms']} ms (client alone, server down: "
            f"p50 +{result['client_only_over_bare_p50_ms']} ms; from a wheel installed by pip: "
            f"p50 +{result['installed_wheel_over_bare_p50_ms']} ms; with the venv's python: p50 "
            f"+{result['venv_python_over_bare_p50_ms']} ms). Events stored: "
            f"{result['events_stored']}.",
            "",
            f"Targets met — {ok}.",
            "",
        ]
    )


def _stats(server: Server) -> tuple[int, dict[str, Any]]:
    from bench.ingest import request

    headers = {"Authorization": f"Bearer {server.token}"}
    status, raw = request(server.connect(), "GET", "/v1/stats", None, headers)
    return status, json.loads(raw or b"{}")


if __name__ == "__main__":
    print(json.dumps(run(*[int(a) for a in sys.argv[1:2]]), indent=2))

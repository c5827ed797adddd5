"""Ingest throughput through a real ``engram serve`` (gunicorn) on this machine.

Three phases against one server, each bounded by a request count: ``GET /health`` (the
server's own ceiling, the baseline), single events from concurrent keep-alive clients,
and batches of 100. Bodies are serialized before the clock starts so the client spends
its CPU on HTTP, not on JSON. Run alone: ``python -m bench.ingest [workers threads]``.
"""

from __future__ import annotations

import http.client
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from ulid import ULID

CLIENTS = 8
HEALTH_REQUESTS = 4000
SINGLE_EVENTS = 8000
BATCHES = 200
BATCH_SIZE = 100
TURN = ("prompt", "tool_use", "tool_use", "tool_use", "session_summary")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _event(i: int, session: str) -> dict[str, Any]:
    kind = TURN[i % len(TURN)]
    content = f"step {i}: ran pytest -q in services/api, 84 passed; edited ingest.py"
    return {
        "event_id": str(ULID()),
        "session_id": session,
        "actor_id": "bench",
        "namespace": "/actor/bench/project/p/",
        "kind": kind,
        "body": {"type": "text", "content": content},
        "valid_time": datetime.now(UTC).isoformat(),
        "source": {"surface": "bench", "version": "1", "project_path": "/tmp/p"},
    }


class Server:
    """``engram serve`` in a fresh home on a free port; stopped with SIGTERM."""

    def __init__(self, workers: int, threads: int) -> None:
        self.port = _free_port()
        self._tmp = tempfile.TemporaryDirectory(prefix="engram-bench-")
        env = {k: v for k, v in os.environ.items() if not k.startswith("ENGRAM_")}
        env.update(
            ENGRAM_HOME=str(Path(self._tmp.name) / "home"),
            ENGRAM_PORT=str(self.port),
            ENGRAM_EMBEDDER="off",
            ENGRAM_LOG_LEVEL="warning",
            HF_HUB_OFFLINE="1",
        )
        argv = [sys.executable, "-m", "services.cli.main", "serve"]
        argv += ["--workers", str(workers), "--threads", str(threads)]
        self._proc = subprocess.Popen(
            argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        for _ in range(600):  # bounded wait for boot
            if self._proc.poll() is not None:
                raise RuntimeError(f"engram serve exited with {self._proc.returncode}")
            try:
                if request(self.connect(), "GET", "/health", None, {})[0] == 200:
                    break
            except OSError:
                time.sleep(0.05)
        else:
            self.stop()
            raise RuntimeError("engram serve did not become healthy")
        self.token = (Path(env["ENGRAM_HOME"]) / "token").read_text().strip()

    def connect(self) -> http.client.HTTPConnection:
        return http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)

    def stop(self) -> None:
        self._proc.send_signal(signal.SIGTERM)
        try:
            self._proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()
        self._tmp.cleanup()


def request(
    conn: http.client.HTTPConnection,
    method: str,
    path: str,
    body: bytes | None,
    headers: dict[str, str],
) -> tuple[int, bytes]:
    conn.request(method, path, body=body, headers=headers)
    res = conn.getresponse()
    return res.status, res.read()


def _drive(
    server: Server, method: str, path: str, bodies: list[list[bytes | None]], want: int
) -> tuple[float, list[float], int]:
    """Each client thread sends its list of bodies; returns (seconds, latencies, errors)."""
    headers = {"Authorization": f"Bearer {server.token}", "Content-Type": "application/json"}
    latencies: list[list[float]] = [[] for _ in bodies]
    errors = [0] * len(bodies)
    start_gate = threading.Barrier(len(bodies) + 1)

    def client(n: int) -> None:
        conn = server.connect()
        start_gate.wait()
        for body in bodies[n]:
            t0 = time.perf_counter()
            status, _ = request(conn, method, path, body, headers)
            latencies[n].append(time.perf_counter() - t0)
            errors[n] += status != want
        conn.close()

    threads = [threading.Thread(target=client, args=(n,)) for n in range(len(bodies))]
    for t in threads:
        t.start()
    start_gate.wait()
    t0 = time.perf_counter()
    for t in threads:
        t.join()
    return time.perf_counter() - t0, [x for lat in latencies for x in lat], sum(errors)


def _pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return round(ordered[min(len(ordered) - 1, int(p / 100 * len(ordered)))] * 1000, 2)


def run(workers: int = 2, threads: int = 4, scale: float = 1.0) -> dict[str, Any]:
    n_health = int(HEALTH_REQUESTS * scale)
    n_single = int(SINGLE_EVENTS * scale)
    n_batches = max(2, int(BATCHES * scale))
    server = Server(workers, threads)
    try:
        per = n_health // CLIENTS
        secs, lat, err = _drive(server, "GET", "/health", [[None] * per] * CLIENTS, 200)
        health_rps = per * CLIENTS / secs

        per = n_single // CLIENTS
        singles = [
            [json.dumps(_event(i, f"c{n}")).encode() for i in range(per)] for n in range(CLIENTS)
        ]
        secs, lat, err_single = _drive(server, "POST", "/v1/events", singles, 201)
        single_eps = per * CLIENTS / secs
        single_lat = {f"p{p}_ms": _pct(lat, p) for p in (50, 95, 99)}

        clients = 4
        per = n_batches // clients
        batches = [
            [
                json.dumps({"events": [_event(i, f"b{n}-{b}") for i in range(BATCH_SIZE)]}).encode()
                for b in range(per)
            ]
            for n in range(clients)
        ]
        secs, blat, err_batch = _drive(server, "POST", "/v1/events", batches, 201)
        batch_eps = per * clients * BATCH_SIZE / secs
    finally:
        server.stop()
    return {
        "name": "ingest",
        "config": {
            "workers": workers,
            "threads": threads,
            "clients": CLIENTS,
            "single_events": n_single,
            "batches": n_batches,
            "batch_size": BATCH_SIZE,
            "cpus": os.cpu_count(),
        },
        "baseline_health_rps": round(health_rps),
        "single_events_per_s": round(single_eps),
        "single_latency": single_lat,
        "single_vs_health": round(single_eps / health_rps, 3),
        "batched_events_per_s": round(batch_eps),
        "batch_p50_ms": _pct(blat, 50),
        "errors": err + err_single + err_batch,
        "targets": {
            "single_events_per_s>=1500": single_eps >= 1500,
            "batched_events_per_s>=20000": batch_eps >= 20000,
            "single_p99_ms<=20": single_lat["p99_ms"] <= 20,
        },
    }


if __name__ == "__main__":
    args = [int(a) for a in sys.argv[1:3]]
    print(json.dumps(run(*args), indent=2))


def markdown(result: dict[str, Any]) -> str:
    cfg, lat = result["config"], result["single_latency"]
    ok = ", ".join(f"{k}: {'yes' if v else 'NO'}" for k, v in result["targets"].items())
    return "\n".join(
        [
            "# ingest",
            "",
            f"Real `engram serve` (gunicorn gthread, {cfg['workers']} worker(s) x "
            f"{cfg['threads']} threads, SQLite) on {cfg['cpus']} CPUs; {cfg['clients']} "
            "keep-alive clients on the same machine.",
            "",
            "| measure | value |",
            "|---|---|",
            f"| baseline: `GET /health` req/s | {result['baseline_health_rps']} |",
            f"| single events/s | {result['single_events_per_s']} |",
            f"| single events vs baseline | {result['single_vs_health']} |",
            f"| single p50 / p95 / p99 ms | {lat['p50_ms']} / {lat['p95_ms']} / {lat['p99_ms']} |",
            f"| batched events/s (batches of {cfg['batch_size']}) | "
            f"{result['batched_events_per_s']} |",
            f"| batch p50 ms | {result['batch_p50_ms']} |",
            f"| non-2xx responses | {result['errors']} |",
            "",
            f"Targets met — {ok}.",
            "",
        ]
    )

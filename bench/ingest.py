"""Ingest throughput through a real ``wakemark serve`` (gunicorn) on this machine.

Three phases against one server, each bounded by a request count: ``GET /health`` (the
server's own ceiling, the baseline), single events from concurrent keep-alive clients,
and batches of 100. The clients take requests from one shared list per phase. Requests
are fully encoded before the clock starts and the clients speak raw HTTP/1.1 over
sockets, so the client's own CPU (reported) stays small next to the server's. Server CPU
per request is read from ``/proc`` (workers plus reaped ones): it is far steadier than
throughput on a loaded machine. Beside events answered per second, each phase reports a
sustained rate, its clock running until the server has also extracted every turn the
phase closed: embedded mode extracts inside the API processes, and holds that work back
while requests keep coming (up to 2 s, ``shared/jobs/inprocess``), so work still queued
at the last answer would otherwise go unseen. Run alone: ``python -m bench.ingest
[workers [threads]]`` (default: ``wakemark serve``'s own, 2 workers and 1 thread with
SQLite).
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

from bench._stats import nearest_rank
from wakemark.services.cli.serve import DEFAULT_THREADS

CLIENTS = 8
BATCH_CLIENTS = 4
HEALTH_REQUESTS = 4000
SINGLE_EVENTS = 8000
BATCHES = 500  # ~1 s at 40-50k events/s: long enough to time, still a burst (< 2 s)
BATCH_SIZE = 100
NS = "/actor/bench/project/p/"
TURN = ("prompt", "tool_use", "tool_use", "tool_use", "session_summary")
_TICK = os.sysconf("SC_CLK_TCK")


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
        "namespace": NS,
        "kind": kind,
        "body": {"type": "text", "content": content},
        "valid_time": datetime.now(UTC).isoformat(),
        "source": {"surface": "bench", "version": "1", "project_path": "/tmp/p"},
    }


class Server:
    """``wakemark serve`` in a fresh home on a free port; stopped with SIGTERM."""

    def __init__(self, workers: int, threads: int | None = None, home: Path | None = None) -> None:
        """``home``: serve that one (the model on, as ``make run``); else a fresh one
        with the embedder off."""
        self.port = _free_port()
        self._tmp = tempfile.TemporaryDirectory(prefix="wakemark-bench-")
        env = {k: v for k, v in os.environ.items() if not k.startswith("WAKEMARK_")}
        env.update(
            WAKEMARK_HOME=str(home or Path(self._tmp.name) / "home"),
            WAKEMARK_PORT=str(self.port),
            WAKEMARK_EMBEDDER="onnx" if home else "off",
            WAKEMARK_LOG_LEVEL="warning",
            # Clients share one list of requests, so under load a session's event can
            # overtake the one before it and land after its turn was extracted, opening a
            # turn of its own that only closes when idle: without this the drain waited
            # out the default 600 s (the bench "hung").
            WAKEMARK_TURN_IDLE_S="2",
            WAKEMARK_SWEEP_INTERVAL_S="5",
            HF_HUB_OFFLINE="1",
        )
        argv = [sys.executable, "-m", "wakemark.services.cli.main", "serve"]
        argv += ["--workers", str(workers)]
        argv += ["--threads", str(threads)] if threads is not None else []
        self._proc = subprocess.Popen(
            argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        for _ in range(600):  # bounded wait for boot
            if self._proc.poll() is not None:
                raise RuntimeError(f"wakemark serve exited with {self._proc.returncode}")
            try:
                if request(self.connect(), "GET", "/health", None, {})[0] == 200:
                    break
            except OSError:
                time.sleep(0.05)
        else:
            self.stop()
            raise RuntimeError("wakemark serve did not become healthy")
        self.token = (Path(env["WAKEMARK_HOME"]) / "token").read_text().strip()

    def connect(self) -> http.client.HTTPConnection:
        return http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)

    def raw(self, method: str, path: str, body: bytes = b"") -> bytes:
        """One complete HTTP/1.1 keep-alive request, authorized."""
        head = (
            f"{method} {path} HTTP/1.1\r\nHost: 127.0.0.1:{self.port}\r\n"
            f"Authorization: Bearer {self.token}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\n\r\n"
        )
        return head.encode() + body

    def drain_seconds(self, timeout: float = 300.0) -> float:
        """Seconds until every stored event's turn is extracted (``pending_extraction``
        of ``/v1/stats`` is 0): work the server deferred past the last response."""
        t0 = time.perf_counter()
        headers = {"Authorization": f"Bearer {self.token}"}
        conn = self.connect()
        try:
            while time.perf_counter() - t0 < timeout:
                status, body = request(conn, "GET", f"/v1/stats?namespace={NS}", None, headers)
                if status == 200 and json.loads(body)["pending_extraction"] == 0:
                    break
                # A poll is a request, and queued jobs wait for a pause in requests:
                # polling too often would itself slow the drain it measures.
                time.sleep(0.05)
        finally:
            conn.close()
        return time.perf_counter() - t0

    def cpu_seconds(self) -> float:
        """CPU time of the server: master, live workers, and workers already reaped."""
        pid = self._proc.pid
        total = _stat_cpu(pid, children=True)
        for entry in os.listdir("/proc"):
            if entry.isdigit() and _ppid(entry) == pid:
                total += _stat_cpu(int(entry), children=False)
        return total

    def stop(self) -> None:
        self._proc.send_signal(signal.SIGTERM)
        try:
            self._proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()
        self._tmp.cleanup()


def _stat_fields(pid: int | str) -> list[str]:
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return []
    return text.rsplit(")", 1)[1].split()  # fields from 3 (state) on; comm may hold spaces


def _ppid(pid: str) -> int:
    fields = _stat_fields(pid)
    return int(fields[1]) if fields else -1


def _stat_cpu(pid: int, children: bool) -> float:
    fields = _stat_fields(pid)
    if not fields:
        return 0.0
    ticks = int(fields[11]) + int(fields[12])  # utime, stime
    if children:
        ticks += int(fields[13]) + int(fields[14])  # cutime, cstime: reaped workers
    return ticks / _TICK


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


class _Conn:
    """A minimal HTTP/1.1 keep-alive client: send prepared bytes, read one response.

    gunicorn closes idle or recycled workers' connections; a request that met a closed
    connection is sent again on a new one (ingest is idempotent on ``event_id``)."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.reconnects = 0
        self._open()

    def _open(self) -> None:
        self.sock = socket.create_connection(("127.0.0.1", self.port), timeout=30)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buf = b""

    def call(self, raw: bytes) -> int:
        try:
            return self._call(raw)
        except (ConnectionError, OSError):
            self.sock.close()
            self.reconnects += 1
            self._open()
            return self._call(raw)

    def _call(self, raw: bytes) -> int:
        self.sock.sendall(raw)
        buf = self.buf
        while (end := buf.find(b"\r\n\r\n")) < 0:
            buf += self._recv()
        head = buf[:end].lower()
        at = head.find(b"\r\ncontent-length:")
        length = int(head[at + 17 :].split(b"\r\n", 1)[0]) if at >= 0 else 0
        while len(buf) < end + 4 + length:
            buf += self._recv()
        self.buf = buf[end + 4 + length :]
        return int(head[9:12])

    def _recv(self) -> bytes:
        chunk = self.sock.recv(65536)
        if not chunk:
            raise ConnectionError("server closed the connection")
        return chunk

    def close(self) -> None:
        self.sock.close()


def _drive(server: Server, requests: list[bytes], clients: int, want: int) -> dict[str, Any]:
    """Client threads, each on one keep-alive connection, take the next request from
    one shared list until it is empty. gunicorn's workers split the connections unevenly
    (5/3, 6/2 or 7/1 as often as 4/4); with a fixed share per client, the clients of the
    less loaded worker finished early and the rest of the phase ran on one worker."""
    latencies: list[list[float]] = [[] for _ in range(clients)]
    errors = [0] * clients
    reconnects = [0] * clients
    gate = threading.Barrier(clients + 1)
    todo = iter(requests)  # next() on a list iterator is atomic under the GIL

    def client(n: int) -> None:
        conn = _Conn(server.port)
        gate.wait()
        for raw in todo:
            t0 = time.perf_counter()
            status = conn.call(raw)
            latencies[n].append(time.perf_counter() - t0)
            errors[n] += status != want
        reconnects[n] = conn.reconnects
        conn.close()

    threads = [threading.Thread(target=client, args=(n,)) for n in range(clients)]
    for t in threads:
        t.start()
    gate.wait()
    cpu0, server0, t0 = time.process_time(), server.cpu_seconds(), time.perf_counter()
    for t in threads:
        t.join()
    secs = time.perf_counter() - t0
    drain = server.drain_seconds() if want == 201 else 0.0
    n = len(requests)
    lat = [x for per in latencies for x in per]
    return {
        "requests_per_s": n / secs,
        # Requests per second until the last turn is extracted too: what the server can
        # sustain, with no backlog left behind.
        "sustained_per_s": n / (secs + drain),
        "drain_s": round(drain, 2),
        "p50_ms": _pct(lat, 50),
        "p95_ms": _pct(lat, 95),
        "p99_ms": _pct(lat, 99),
        "server_cpu_us_per_request": round((server.cpu_seconds() - server0) / n * 1e6),
        "client_cpu_us_per_request": round((time.process_time() - cpu0) / n * 1e6),
        "errors": sum(errors),
        "reconnects": sum(reconnects),
    }


def _pct(values: list[float], p: float) -> float:
    return round(nearest_rank(values, p / 100) * 1000, 2)


def run(workers: int = 2, threads: int | None = None, scale: float = 1.0) -> dict[str, Any]:
    n_health = int(HEALTH_REQUESTS * scale)
    n_single = int(SINGLE_EVENTS * scale)
    n_batches = max(1, int(BATCHES * scale))
    server = Server(workers, threads)
    try:
        health = _drive(server, [server.raw("GET", "/health")] * n_health, CLIENTS, 200)
        # CLIENTS sessions, interleaved: the events of one are CLIENTS requests apart,
        # so they go out in order (and next to never at the same time) whichever client
        # sends them.
        singles = [
            server.raw(
                "POST",
                "/v1/events",
                json.dumps(_event(i // CLIENTS, f"s{i % CLIENTS}")).encode(),
            )
            for i in range(n_single)
        ]
        single = _drive(server, singles, CLIENTS, 201)
        batches = [
            server.raw(
                "POST",
                "/v1/events",
                json.dumps({"events": [_event(i, f"b{b}") for i in range(BATCH_SIZE)]}).encode(),
            )
            for b in range(n_batches)
        ]
        batch = _drive(server, batches, BATCH_CLIENTS, 201)
    finally:
        server.stop()
    # The targets are on events answered per second (what the agents' hooks see); the
    # sustained rates add the time until every closed turn was extracted as well.
    single_eps = single["requests_per_s"]
    batch_eps = batch["requests_per_s"] * BATCH_SIZE
    return {
        "name": "ingest",
        "config": {
            "workers": workers,
            "threads": threads or DEFAULT_THREADS["sqlite"],
            "clients": CLIENTS,
            "batch_clients": BATCH_CLIENTS,
            "single_events": n_single,
            "batches": n_batches,
            "batch_size": BATCH_SIZE,
            "cpus": os.cpu_count(),
            "loadavg_1m": round(os.getloadavg()[0], 2),
        },
        "baseline_health_rps": round(health["requests_per_s"]),
        "single_events_per_s": round(single_eps),
        "single_sustained_per_s": round(single["sustained_per_s"]),
        "single_drain_s": single["drain_s"],
        "single_latency": {k: single[k] for k in ("p50_ms", "p95_ms", "p99_ms")},
        "single_vs_health": round(single_eps / health["requests_per_s"], 3),
        "batched_events_per_s": round(batch_eps),
        "batched_sustained_per_s": round(batch["sustained_per_s"] * BATCH_SIZE),
        "batched_drain_s": batch["drain_s"],
        "batched_vs_health": round(batch_eps / health["requests_per_s"], 3),
        "batch_p50_ms": batch["p50_ms"],
        "server_cpu_us": {
            "health": health["server_cpu_us_per_request"],
            "single_event": single["server_cpu_us_per_request"],
            "batched_event": round(batch["server_cpu_us_per_request"] / BATCH_SIZE),
        },
        "client_cpu_us_per_request": {
            "health": health["client_cpu_us_per_request"],
            "single": single["client_cpu_us_per_request"],
        },
        "errors": health["errors"] + single["errors"] + batch["errors"],
        "reconnects": health["reconnects"] + single["reconnects"] + batch["reconnects"],
        "targets": {
            "single_events_per_s>=1500": single_eps >= 1500,
            "batched_events_per_s>=20000": batch_eps >= 20000,
            "single_p99_ms<=20": single["p99_ms"] <= 20,
        },
    }


def markdown(result: dict[str, Any]) -> str:
    cfg, lat, cpu = result["config"], result["single_latency"], result["server_cpu_us"]
    ok = ", ".join(f"{k}: {'yes' if v else 'NO'}" for k, v in result["targets"].items())
    worker = "InlineWorker" if cfg["threads"] == 1 else "PolledWorker"
    return "\n".join(
        [
            "# ingest",
            "",
            f"Real `wakemark serve` (gunicorn, {worker}, {cfg['workers']} worker(s) x "
            f"{cfg['threads']} thread(s), SQLite) on {cfg['cpus']} CPUs (1-min load average "
            f"{cfg['loadavg_1m']} at the end); {cfg['clients']} keep-alive clients "
            f"({cfg['batch_clients']} for batches) on the same machine, sharing one list of "
            "requests per phase.",
            "",
            "| measure | value |",
            "|---|---|",
            f"| baseline: `GET /health` req/s | {result['baseline_health_rps']} |",
            f"| single events/s answered | {result['single_events_per_s']} |",
            f"| single events/s sustained (until extracted; drained {result['single_drain_s']} "
            f"s after the last answer) | {result['single_sustained_per_s']} |",
            f"| single events vs baseline | {result['single_vs_health']} |",
            f"| single p50 / p95 / p99 ms | {lat['p50_ms']} / {lat['p95_ms']} / {lat['p99_ms']} |",
            f"| batched events/s answered (batches of {cfg['batch_size']}) | "
            f"{result['batched_events_per_s']} |",
            f"| batched events/s sustained (drained {result['batched_drain_s']} s after) | "
            f"{result['batched_sustained_per_s']} |",
            f"| batched events vs baseline | {result['batched_vs_health']} |",
            f"| batch p50 ms | {result['batch_p50_ms']} |",
            "| server CPU µs, extraction included: health / single event / batched event | "
            f"{cpu['health']} / {cpu['single_event']} / {cpu['batched_event']} |",
            f"| non-2xx responses | {result['errors']} |",
            "",
            f"Targets met — {ok}.",
            "",
        ]
    )


if __name__ == "__main__":
    print(json.dumps(run(*[int(a) for a in sys.argv[1:3]]), indent=2))

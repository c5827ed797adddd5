"""wakemark's gunicorn workers under a real ``wakemark serve``: keep-alive, pipelining,
silent and slow clients."""

from __future__ import annotations

import json
import socket
import time
from pathlib import Path

import pytest

from tests.conftest import free_port
from wakemark.services.api import polled
from wakemark.services.cli.serve import gunicorn_argv

from .test_serve_e2e import _env, _serving

pytestmark = pytest.mark.slow


def _health(port: int) -> bytes:
    return f"GET /health HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n".encode()


def _responses(sock: socket.socket, count: int) -> list[bytes]:
    """Read ``count`` complete responses (heads and Content-Length bodies)."""
    buf, heads = b"", []
    while len(heads) < count:
        end = buf.find(b"\r\n\r\n")
        if end < 0:
            chunk = sock.recv(65536)
            assert chunk, f"connection closed after {len(heads)} response(s)"
            buf += chunk
            continue
        head = buf[:end]
        length = next(
            int(line.split(b":", 1)[1])
            for line in head.split(b"\r\n")
            if line.lower().startswith(b"content-length:")
        )
        if len(buf) < end + 4 + length:
            chunk = sock.recv(65536)
            assert chunk, "connection closed inside a response body"
            buf += chunk
            continue
        heads.append(head)
        buf = buf[end + 4 + length :]
    return heads


def test_one_thread_runs_the_inline_worker_more_run_the_polled_pool() -> None:
    def worker(threads: int) -> str:
        argv = gunicorn_argv("127.0.0.1", 37800, 2, threads)
        return argv[argv.index("--worker-class") + 1]

    assert worker(1) == "wakemark.services.api.polled.InlineWorker"
    assert worker(4) == "wakemark.services.api.polled.PolledWorker"


HEAD = b"POST /v1/hooks/claude-code HTTP/1.1\r\nHost: h\r\n"


@pytest.mark.parametrize(
    ("request_bytes", "expected"),
    [
        (b"GET /health HTTP/1.1\r\nHost: h", polled.INCOMPLETE),
        (b"GET /health HTTP/1.1\r\nHost: h\r\n\r\n", polled.WHOLE),
        (HEAD + b"Content-Length: 5\r\n\r\nabcd", polled.INCOMPLETE),
        (HEAD + b"Content-Length: 5\r\n\r\nabcde", polled.WHOLE),
        (HEAD + b"Content-Length: 5\r\n\r\nabcdeGET", polled.WHOLE),  # pipelined
        (HEAD + b"content-length: 99999999\r\n\r\n", polled.TOO_LARGE),
        (HEAD + b"Content-Length: -1\r\n\r\n", polled.WHOLE),  # the parser answers 400
        (HEAD + b"Transfer-Encoding: chunked\r\n\r\n5\r\nab", polled.INCOMPLETE),
        (HEAD + b"Transfer-Encoding: chunked\r\n\r\n5\r\nabcde\r\n0\r\n", polled.INCOMPLETE),
        (HEAD + b"Transfer-Encoding: chunked\r\n\r\n5\r\nabcde\r\n0\r\n\r\n", polled.WHOLE),
        (HEAD + b"Transfer-Encoding: chunked\r\n\r\n0\r\nX-T: 1\r\n\r\n", polled.WHOLE),
        (HEAD + b"Transfer-Encoding: chunked\r\n\r\n300000\r\n", polled.TOO_LARGE),
        (HEAD + b"Transfer-Encoding: chunked\r\n\r\nzz\r\n", polled.WHOLE),
        (b"GET / HTTP/1.1\r\nX: " + b"a" * (polled.HEAD_LIMIT + 1), polled.HEAD_TOO_LARGE),
    ],
)
def test_framing_knows_when_a_request_is_whole(request_bytes: bytes, expected: str) -> None:
    assert polled.Framing().feed(request_bytes) == expected
    # The same verdict however the bytes are cut into reads (one at a time here).
    byte_by_byte = polled.Framing()
    found = polled.INCOMPLETE
    for i in range(len(request_bytes)):
        found = byte_by_byte.feed(request_bytes[i : i + 1])
        if found != polled.INCOMPLETE:
            break
    assert found == expected


def test_framing_looks_at_each_byte_a_bounded_number_of_times() -> None:
    # Tiny chunks, each in its own read: rescanning what came before on every read would
    # take minutes here.
    framing = polled.Framing()
    assert framing.feed(HEAD + b"Transfer-Encoding: chunked\r\n\r\n") == polled.INCOMPLETE
    start = time.monotonic()
    for _ in range(100_000):
        assert framing.feed(b"1\r\na\r\n") == polled.INCOMPLETE
    assert framing.feed(b"0\r\n\r\n") == polled.WHOLE
    head = polled.Framing()
    for _ in range(polled.HEAD_LIMIT // 2):
        assert head.feed(b"a") == polled.INCOMPLETE
    assert time.monotonic() - start < 2.0


def test_keep_alive_and_pipelined_requests_are_all_answered(tmp_path: Path) -> None:
    port = free_port()
    with _serving(_env(tmp_path / "home", port), port) as log:
        assert "Using worker: wakemark.services.api.polled.InlineWorker" in log.read_text()
        with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
            for _ in range(3):  # one at a time, on one connection
                sock.sendall(_health(port))
                assert _responses(sock, 1)[0].startswith(b"HTTP/1.1 200")
            # Many at once: those read along with the first are where the poller cannot
            # see them; they must be answered all the same.
            sock.sendall(_health(port) * 400)
            heads = _responses(sock, 400)
        assert all(h.startswith(b"HTTP/1.1 200") for h in heads)


def test_a_silent_connection_does_not_hold_up_other_clients(tmp_path: Path) -> None:
    # A pre-connect that sends nothing must not hold up the only thread.
    port = free_port()
    with (
        _serving(_env(tmp_path / "home", port), port),
        socket.create_connection(("127.0.0.1", port), timeout=10) as silent,
    ):
        with socket.create_connection(("127.0.0.1", port), timeout=3) as other:
            other.sendall(_health(port))
            assert _responses(other, 1)[0].startswith(b"HTTP/1.1 200")
        # The silent one is still served once it speaks.
        silent.sendall(_health(port))
        assert _responses(silent, 1)[0].startswith(b"HTTP/1.1 200")


def test_more_threads_run_the_polled_pool(tmp_path: Path) -> None:
    port = free_port()
    with _serving(_env(tmp_path / "home", port), port, "--threads", "2") as log:
        with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
            sock.sendall(_health(port))
            assert _responses(sock, 1)[0].startswith(b"HTTP/1.1 200")
        assert "Using worker: wakemark.services.api.polled.PolledWorker" in log.read_text()


def _timed_health(port: int) -> float:
    start = time.monotonic()
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        sock.sendall(_health(port))
        assert _responses(sock, 1)[0].startswith(b"HTTP/1.1 200")
    return time.monotonic() - start


def _hook(port: int, token: str) -> tuple[bytes, float]:
    body = json.dumps({"hook_event_name": "SessionStart", "session_id": "slow-1", "cwd": "/tmp"})
    start = time.monotonic()
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        sock.sendall(
            f"POST /v1/hooks/claude-code HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
            f"Authorization: Bearer {token}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\n\r\n{body}".encode()
        )
        head = b""
        while b"\r\n" not in head:  # the status line is enough
            chunk = sock.recv(4096)
            assert chunk, "connection closed before an answer"
            head += chunk
        return head, time.monotonic() - start


def _slow_clients(port: int, count: int) -> list[tuple[socket.socket, bytes]]:
    """``count`` connections, each with a request it will send a byte at a time: half
    dribble their head, half a declared body."""
    clients = []
    for i in range(count):
        sock = socket.create_connection(("127.0.0.1", port), timeout=5)
        if i % 2:
            rest = f"GET /health HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n".encode()
        else:
            sock.sendall(HEAD + b"Content-Length: 100000\r\n\r\n")
            rest = b"x" * 100000
        clients.append((sock, rest))
    return clients


def _dribble_and_check(port: int, token: str, seconds: float) -> list[float]:
    clients = _slow_clients(port, 50)
    waits = []
    try:
        end = time.monotonic() + seconds
        sent = 0
        while time.monotonic() < end:  # bounded by time
            for sock, rest in clients:
                sock.sendall(rest[sent : sent + 1])
            sent += 1
            waits.append(_timed_health(port))
            head, took = _hook(port, token)
            assert head.startswith((b"HTTP/1.1 200", b"HTTP/1.1 204")), head
            waits.append(took)
            time.sleep(0.05)
    finally:
        for sock, _ in clients:
            sock.close()
    return waits


@pytest.mark.parametrize(
    ("backend", "threads"),
    [
        ("sqlite", "1"),  # InlineWorker, the embedded default
        ("sqlite", "4"),  # PolledWorker
        pytest.param("postgres", "4", marks=pytest.mark.postgres),  # PolledWorker, its default
    ],
)
def test_slow_clients_never_hold_the_service(
    tmp_path: Path, request: pytest.FixtureRequest, backend: str, threads: str
) -> None:
    port = free_port()
    home = tmp_path / "home"
    env = _env(home, port)
    if backend == "postgres":
        env["WAKEMARK_DATABASE_URL"] = request.getfixturevalue("pg_url")
    with _serving(env, port, "--threads", threads) as log:
        assert f"({backend}, 1 worker(s) x {threads} thread(s))" in log.read_text()
        token = (home / "token").read_text().strip()
        waits = _dribble_and_check(port, token, seconds=3.0)
        assert len(waits) >= 10 and max(waits) < 1.0, waits


def test_a_request_not_whole_in_time_is_answered_408(tmp_path: Path) -> None:
    port = free_port()
    with _serving(_env(tmp_path / "home", port), port):
        with socket.create_connection(("127.0.0.1", port), timeout=30) as stalled:
            stalled.sendall(b"GET /health HTTP/1.1\r\nHo")
            start = time.monotonic()
            answer = stalled.recv(4096)
            took = time.monotonic() - start
        assert answer.startswith(b"HTTP/1.1 408 Request Timeout"), answer
        assert polled.HEAD_TIMEOUT_S - 0.5 < took < polled.HEAD_TIMEOUT_S + 3
        # A body declared over the limit is refused before any of it is read.
        with socket.create_connection(("127.0.0.1", port), timeout=5) as big:
            big.sendall(HEAD + b"Content-Length: %d\r\n\r\n" % (4 * 1024 * 1024))
            answer = big.recv(4096)
        assert answer.startswith(b"HTTP/1.1 413"), answer
        assert b'"error": "payload_too_large"' in answer
        assert _timed_health(port) < 1.0


def test_closing_connections_and_expect_continue_never_stall_the_worker(tmp_path: Path) -> None:
    port = free_port()
    home = tmp_path / "home"
    with _serving(_env(home, port), port):
        token = (home / "token").read_text().strip()
        # Answered with "Connection: close", then left open: the server waits for the
        # client's end (so the answer is not cut by a reset), but on its poller.
        kept = []
        for _ in range(20):
            sock = socket.create_connection(("127.0.0.1", port), timeout=5)
            sock.sendall(
                f"GET /health HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n\r\n"
                .encode()
            )  # fmt: skip
            assert _responses(sock, 1)[0].startswith(b"HTTP/1.1 200")
            kept.append(sock)
        assert _timed_health(port) < 1.0
        for sock in kept:
            sock.close()
        # A client that waits for "100 Continue" before its body gets it before the body.
        body = json.dumps({"hook_event_name": "SessionStart", "session_id": "c", "cwd": "/tmp"})
        with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
            sock.sendall(
                f"POST /v1/hooks/claude-code HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
                f"Authorization: Bearer {token}\r\nContent-Type: application/json\r\n"
                f"Expect: 100-continue\r\nContent-Length: {len(body)}\r\n\r\n".encode()
            )
            assert sock.recv(4096).startswith(b"HTTP/1.1 100 Continue")
            sock.sendall(body.encode())
            answer = b""
            while b"HTTP/1.1 2" not in answer:
                chunk = sock.recv(4096)
                assert chunk, answer
                answer += chunk

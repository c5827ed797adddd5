"""``InlineWorker`` under a real ``wakemark serve``: keep-alive, pipelining, silent clients."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from wakemark.services.cli.serve import gunicorn_argv

from .test_serve_e2e import _env, _free_port, _serving

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


def test_one_thread_runs_the_inline_worker_more_run_gthread() -> None:
    def worker(threads: int) -> str:
        argv = gunicorn_argv("127.0.0.1", 37800, 2, threads)
        return argv[argv.index("--worker-class") + 1]

    assert worker(1) == "wakemark.services.api.inline.InlineWorker"
    assert worker(4) == "gthread"


def test_keep_alive_and_pipelined_requests_are_all_answered(tmp_path: Path) -> None:
    port = _free_port()
    with _serving(_env(tmp_path / "home", port), port) as log:
        assert "Using worker: wakemark.services.api.inline.InlineWorker" in log.read_text()
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
    # gthread's pool thread waits up to 5 s for a new connection's first bytes; with one
    # thread every other client waited behind a pre-connect that sends nothing.
    port = _free_port()
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


def test_more_threads_keep_gthread(tmp_path: Path) -> None:
    port = _free_port()
    with _serving(_env(tmp_path / "home", port), port, "--threads", "2") as log:
        with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
            sock.sendall(_health(port))
            assert _responses(sock, 1)[0].startswith(b"HTTP/1.1 200")
        assert "Using worker: gthread" in log.read_text()

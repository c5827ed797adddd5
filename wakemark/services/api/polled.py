"""gunicorn workers that read each request whole on the polling thread before serving it.

gunicorn's gthread worker reads a request on the thread that serves it, from a blocking
socket with no deadline: a client that sends its head or body a byte at a time holds that
thread for as long as it likes, and a few such clients hold every thread. Here the
polling thread reads from non-blocking sockets as bytes arrive, and a request goes to a
serving thread only once it is whole, so a serving thread never waits on a client. A
request not whole within its deadline is answered 408 and closed; a body declared over
the API's limit is answered 413 at once. Closing a connection, which waits for the
client's end (RFC 9112 section 9.6), also happens on the poller.

``PolledWorker`` (gthread's pool) serves with several threads: Postgres, where a request
waits on the database. ``InlineWorker`` serves on the polling thread itself: one thread
(SQLite), where a pool would only add two thread switches per request. Only the heartbeat
pauses while a request runs there, as in gunicorn's sync worker.
"""

from __future__ import annotations

import contextlib
import errno
import selectors
import socket
import struct
import time
from collections import deque
from concurrent import futures
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from gunicorn.workers.gthread import TConn, ThreadWorker

from wakemark.shared.models import MAX_REQUEST_BYTES

HEAD_TIMEOUT_S = 10.0  # from a request's first byte to the end of its head
BODY_TIMEOUT_S = 30.0  # from the end of the head to the end of the body
# A serving thread blocked on a client (one that does not read its response, or a
# request framed in a way ``framing`` misjudged) gives up after this long.
IO_TIMEOUT_S = 10.0
HEAD_LIMIT = 64 * 1024  # gunicorn's own limits on the request line and fields fit in it
# What the requests being read may hold in one worker at once: a client over it is
# closed rather than let many large half-sent bodies take the memory.
BUFFER_BUDGET = 64 * 1024 * 1024
LINGER_S = 2.0  # gunicorn's close_graceful: how long a closing connection is drained
LINGER_BYTES = 64 * 1024
_RECV = 256 * 1024

INCOMPLETE, WHOLE, TOO_LARGE, HEAD_TOO_LARGE = "incomplete", "whole", "too large", "head too large"


class Framing:
    """Where a request being read stands, updated as its bytes arrive: how it is cut into
    reads never makes a byte be looked at more than a bounded number of times.

    A head this cannot make sense of counts as whole: gunicorn's parser then answers it
    (400) without reading more.
    """

    def __init__(self, limit: int = MAX_REQUEST_BYTES) -> None:
        self.buf = bytearray()
        self.limit = limit
        self.head_end = -1  # where the blank line ending the head starts, once found
        self._searched = 0  # how far the search for it got
        self._chunked = False
        self._length = 0
        self._next = 0  # chunked: where the next chunk's size line starts
        self._total = 0  # chunked: the sizes of the chunks before it

    def feed(self, data: bytes) -> str:
        """The state of the request after ``data``: ``INCOMPLETE``, ``WHOLE``,
        ``TOO_LARGE`` (a body declared over the limit) or ``HEAD_TOO_LARGE``."""
        self.buf += data
        if self.head_end < 0:
            end = self.buf.find(b"\r\n\r\n", max(0, self._searched - 3))
            if end < 0:
                self._searched = len(self.buf)
                return HEAD_TOO_LARGE if len(self.buf) > HEAD_LIMIT else INCOMPLETE
            if end > HEAD_LIMIT:
                return HEAD_TOO_LARGE
            self.head_end, self._next = end, end + 4
            verdict = self._head(bytes(self.buf[:end]))
            if verdict is not None:
                return verdict
        if self._chunked:
            return self._chunks()
        return WHOLE if len(self.buf) >= self.head_end + 4 + self._length else INCOMPLETE

    def _head(self, head: bytes) -> str | None:
        for line in head.split(b"\r\n")[1:]:
            name, _, value = line.partition(b":")
            name, value = name.strip().lower(), value.strip()
            if name == b"transfer-encoding":
                self._chunked = value.lower().endswith(b"chunked")
                if not self._chunked:
                    return WHOLE
            elif name == b"content-length":
                if not value.isdigit():
                    return WHOLE
                self._length = int(value)
        if not self._chunked and self._length > self.limit:
            return TOO_LARGE
        return None

    def _chunks(self) -> str:
        buf = self.buf
        while True:
            eol = buf.find(b"\r\n", self._next, self._next + 1024)
            if eol < 0:
                return INCOMPLETE if len(buf) - self._next <= 1024 else WHOLE
            try:
                size = int(bytes(buf[self._next : eol]).split(b";", 1)[0].strip(), 16)
            except ValueError:
                return WHOLE
            if size == 0:
                # Trailer fields end with an empty line; without trailers that is at once.
                if buf.find(b"\r\n\r\n", eol, eol + HEAD_LIMIT) >= 0:
                    return WHOLE
                return HEAD_TOO_LARGE if len(buf) - eol > HEAD_LIMIT else INCOMPLETE
            if self._total + size > self.limit:
                return TOO_LARGE
            after = eol + 2 + size + 2
            if after > len(buf):
                return INCOMPLETE
            self._total += size
            self._next = after


def _status(code: int, reason: str, body: bytes = b"") -> bytes:
    head = f"HTTP/1.1 {code} {reason}\r\nConnection: close\r\nContent-Length: {len(body)}\r\n" + (
        "Content-Type: application/json\r\n" if body else ""
    )
    return head.encode() + b"\r\n" + body


TIMEOUT_408 = _status(408, "Request Timeout")
TOO_LARGE_413 = _status(
    413,
    "Content Too Large",
    b'{"error": "payload_too_large", "message": "a request over %d MiB"}'
    % (MAX_REQUEST_BYTES // (1024 * 1024)),
)
HEAD_TOO_LARGE_431 = _status(431, "Request Header Fields Too Large")


@dataclass
class _Reading:
    deadline: float
    framing: Framing = field(default_factory=Framing)


class Conn(TConn):
    """A connection whose graceful close is left to the worker's poller."""

    def __init__(self, worker: PolledWorker, *args: Any) -> None:
        super().__init__(*args)
        self.worker = worker
        # gthread switches the socket to blocking, with no timeout, to serve it: these
        # make the kernel bound every blocking call instead.
        timeval = struct.pack("ll", int(IO_TIMEOUT_S), 0)
        for option in (socket.SO_SNDTIMEO, socket.SO_RCVTIMEO):
            self.sock.setsockopt(socket.SOL_SOCKET, option, timeval)

    def close(self, graceful: bool = False) -> None:
        if graceful:
            self.worker.linger(self)
        else:
            super().close()


class PolledWorker(ThreadWorker):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.reading: dict[Conn, _Reading] = {}
        self.lingering: dict[socket.socket, tuple[float, int]] = {}
        self.buffered = 0

    # --- connections waiting for their next request ---------------------------------

    def accept(self, listener: Any) -> None:
        try:
            sock, addr = listener.accept()
        except OSError as exc:
            if exc.errno not in (errno.EAGAIN, errno.ECONNABORTED, errno.EWOULDBLOCK):
                raise
            return
        self.nr_conns += 1
        conn = Conn(self, self.cfg, sock, addr, listener.getsockname())
        # Parked as gthread parks a connection that has sent nothing yet (closed after
        # the keep-alive timeout if it never does).
        conn.timeout = time.monotonic() + self.cfg.keepalive
        self.pending_conns.append(conn)
        self.poller.register(
            sock, selectors.EVENT_READ, partial(self.on_pending_socket_readable, conn)
        )

    def on_pending_socket_readable(self, conn: Conn, client: Any) -> None:
        self.pending_conns.remove(conn)
        self._read_from(conn, client)

    def on_client_socket_readable(self, conn: Conn, client: Any) -> None:
        self.keepalived_conns.remove(conn)
        self._read_from(conn, client)

    def enqueue_req(self, conn: Conn) -> None:
        # gthread's finish_request comes here when the parser read past the request
        # just answered (pipelining): what it holds is the start of the next one.
        leftover = conn.parser.unreader.take_buffered()
        conn.sock.setblocking(False)
        self.poller.register(conn.sock, selectors.EVENT_READ, partial(self._on_readable, conn))
        self._start(conn, leftover)

    # --- reading a request ------------------------------------------------------------

    def _read_from(self, conn: Conn, client: Any) -> None:
        self.poller.modify(client, selectors.EVENT_READ, partial(self._on_readable, conn))
        self._start(conn, b"")
        self._on_readable(conn, client)

    def _start(self, conn: Conn, data: bytes) -> None:
        self.reading[conn] = _Reading(time.monotonic() + HEAD_TIMEOUT_S)
        if data:
            self._received(conn, data)

    def _on_readable(self, conn: Conn, client: Any) -> None:
        try:
            data = conn.sock.recv(_RECV)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            data = b""
        if not data:
            self._drop(conn)
            return
        self._received(conn, data)

    def _received(self, conn: Conn, data: bytes) -> None:
        state = self.reading[conn]
        if self.buffered + len(data) > BUFFER_BUDGET:
            self._drop(conn)
            return
        framing = state.framing
        had_head = framing.head_end >= 0
        self.buffered += len(data)
        found = framing.feed(data)
        if found == INCOMPLETE:
            if not had_head and framing.head_end >= 0:
                state.deadline = time.monotonic() + BODY_TIMEOUT_S
                if b"100-continue" in framing.buf[: framing.head_end].lower():
                    # The client waits for this before it sends the body.
                    self._send_nowait(conn, b"HTTP/1.1 100 Continue\r\n\r\n")
            return
        if found == TOO_LARGE:
            self._answer(conn, TOO_LARGE_413)
        elif found == HEAD_TOO_LARGE:
            self._answer(conn, HEAD_TOO_LARGE_431)
        else:
            self._serve(conn)

    def _serve(self, conn: Conn) -> None:
        state = self._forget(conn)
        self.poller.unregister(conn.sock)
        conn.init()
        conn.parser.unreader.unread(bytes(state.framing.buf))
        conn.data_ready = True
        self.serve(conn)

    def serve(self, conn: Conn) -> None:
        """Hand a connection holding a whole request to a serving thread."""
        super().enqueue_req(conn)

    def _forget(self, conn: Conn) -> _Reading:
        state = self.reading.pop(conn)
        self.buffered -= len(state.framing.buf)
        return state

    def _send_nowait(self, conn: Conn, data: bytes) -> None:
        with contextlib.suppress(OSError):
            conn.sock.send(data)

    def _answer(self, conn: Conn, response: bytes) -> None:
        self._send_nowait(conn, response)
        self._drop(conn)

    def _drop(self, conn: Conn) -> None:
        self._forget(conn)
        self.poller.unregister(conn.sock)
        self.nr_conns -= 1
        TConn.close(conn)

    def murder_pending(self) -> None:
        super().murder_pending()
        now = time.monotonic()
        for conn in [c for c, state in self.reading.items() if state.deadline <= now]:
            self._answer(conn, TIMEOUT_408)
        for sock in [s for s, (deadline, _) in self.lingering.items() if deadline <= now]:
            self._unlinger(sock)

    # --- closing ------------------------------------------------------------------------

    def linger(self, conn: Conn) -> None:
        """Close after the client's end arrives (or enough bytes, or ``LINGER_S``), so
        unread bytes of its cannot make the kernel reset the response it is reading."""
        sock = conn.sock
        try:
            sock.shutdown(socket.SHUT_WR)
            sock.setblocking(False)
            self.poller.register(sock, selectors.EVENT_READ, self._drain)
        except (OSError, ValueError, KeyError):
            sock.close()
            return
        self.lingering[sock] = (time.monotonic() + LINGER_S, 0)

    def _drain(self, sock: socket.socket) -> None:
        try:
            data = sock.recv(_RECV)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            data = b""
        deadline, drained = self.lingering[sock]
        drained += len(data)
        if not data or drained > LINGER_BYTES:
            self._unlinger(sock)
        else:
            self.lingering[sock] = (deadline, drained)

    def _unlinger(self, sock: socket.socket) -> None:
        del self.lingering[sock]
        with contextlib.suppress(KeyError, ValueError):
            self.poller.unregister(sock)
        sock.close()


class InlineWorker(PolledWorker):
    """Serves each whole request on the polling thread (one thread, no pool)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.ready: deque[Conn] = deque()

    def serve(self, conn: Conn) -> None:
        # A queue, not recursion: serving one pipelined request can make the next whole.
        self.ready.append(conn)
        if len(self.ready) > 1:
            return
        while self.ready:
            ready = self.ready[0]
            done: futures.Future[Any] = futures.Future()
            done.set_result(self.handle(ready))
            self.finish_request(ready, done)
            self.ready.popleft()

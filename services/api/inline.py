"""``InlineWorker``: gunicorn's gthread worker without its thread pool, for one thread.

gthread polls connections on its main thread and hands each ready request to a pool
thread, which hands the connection back through a queue and a wake-up pipe when done.
With one pool thread that is two thread switches and two GIL hand-overs per request for
no overlap at all. This worker answers a request on the thread that polled it, and keeps
everything else of gthread: keep-alive, graceful shutdown, limits. Only the heartbeat
pauses while a request runs, as in gunicorn's sync worker: a request longer than
``--timeout`` would get its worker restarted. No wakemark route comes near that.

It also never waits on a connection that has sent nothing yet: gthread's pool thread
waits for a new connection's first bytes, which with a single thread stalls every other
client (a browser's speculative pre-connect is enough). A new connection joins the
poller and is served once readable.
"""

from __future__ import annotations

import errno
import selectors
import time
from concurrent import futures
from functools import partial
from typing import Any

from gunicorn.workers.gthread import TConn, ThreadWorker


class InlineWorker(ThreadWorker):
    def accept(self, listener: Any) -> None:
        try:
            sock, addr = listener.accept()
        except OSError as exc:
            if exc.errno not in (errno.EAGAIN, errno.ECONNABORTED, errno.EWOULDBLOCK):
                raise
            return
        self.nr_conns += 1
        conn = TConn(self.cfg, sock, addr, listener.getsockname())
        # As gthread parks a connection whose first bytes are late (finish_request).
        sock.setblocking(False)
        conn.timeout = time.monotonic() + self.cfg.keepalive
        self.pending_conns.append(conn)
        self.poller.register(
            sock, selectors.EVENT_READ, partial(self.on_pending_socket_readable, conn)
        )

    def enqueue_req(self, conn: Any) -> None:
        done: futures.Future[Any] = futures.Future()
        done.set_result(self.handle(conn))
        # Back to the poller, or, for requests already read in behind this one
        # (pipelining: at most one 8 KB read of them), straight back here.
        self.finish_request(conn, done)

"""The real app on a loopback port (werkzeug, in a thread), for clients in other processes."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

from werkzeug.serving import make_server

from wakemark.services.api import create_app
from wakemark.shared.runtime import Runtime


@contextmanager
def serving(runtime: Runtime, port: int, threaded: bool = False) -> Iterator[None]:
    """Serve ``runtime`` on 127.0.0.1:``port`` until the block ends."""
    httpd = make_server("127.0.0.1", port, create_app(runtime=runtime), threaded=threaded)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield
    finally:
        httpd.shutdown()
        thread.join()

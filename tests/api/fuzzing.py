"""Shared by the two fuzzers: a WSGI wrapper that tallies every response status and
times every request.

It sits outside Flask, so it sees every request the fuzzers send, schemathesis' own
probes included, and a 500 however it was produced. A request answered (body included)
in more than ``REQUEST_BOUND_S`` is kept for the example that sent it to fail on: input
that stalls a worker is as much a defect as input that crashes one.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterator
from contextlib import nullcontext
from typing import Any

import pytest

REQUEST_BOUND_S = 2.0


class Tally:
    def __init__(self) -> None:
        self.statuses: Counter[int] = Counter()
        self.slowest = 0.0
        self._slow: list[str] = []

    def wrap(self, app: Any) -> None:
        inner = app.wsgi_app

        def counted(environ: Any, start_response: Any) -> Iterator[bytes]:
            began = time.perf_counter()

            def start(status: str, headers: Any, exc_info: Any = None) -> Any:
                self.statuses[int(status.split(" ", 1)[0])] += 1
                return start_response(status, headers, exc_info)

            body = inner(environ, start)
            try:
                yield from body
            finally:
                if hasattr(body, "close"):
                    body.close()
                took = time.perf_counter() - began
                self.slowest = max(self.slowest, took)
                if took > REQUEST_BOUND_S:
                    where = f"{environ['REQUEST_METHOD']} {environ['PATH_INFO']}"
                    self._slow.append(f"{where} took {took:.2f} s")

        app.wsgi_app = counted

    def take_slow(self) -> list[str]:
        """Requests over the bound since the last call (the current example's)."""
        slow, self._slow = self._slow, []
        return slow

    @property
    def requests(self) -> int:
        return sum(self.statuses.values())

    @property
    def server_errors(self) -> int:
        return sum(n for status, n in self.statuses.items() if status >= 500)

    def report(self, config: pytest.Config, name: str) -> str:
        histogram = ", ".join(f"{status}: {n}" for status, n in sorted(self.statuses.items()))
        line = (
            f"{name}: {self.requests} requests; {histogram}; 5xx: {self.server_errors}; "
            f"slowest {self.slowest:.3f} s"
        )
        reporter = config.pluginmanager.get_plugin("terminalreporter")
        capture = config.pluginmanager.get_plugin("capturemanager")
        if reporter is not None:  # past the capture, so it shows without -s
            with capture.global_and_fixture_disabled() if capture else nullcontext():
                reporter.write_line("\n" + line)
        return line

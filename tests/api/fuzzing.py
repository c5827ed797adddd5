"""Shared by the two fuzzers: a WSGI wrapper that tallies every response status.

It sits outside Flask, so it sees every request the fuzzers send, schemathesis' own
probes included, and a 500 however it was produced.
"""

from __future__ import annotations

from collections import Counter
from contextlib import nullcontext
from typing import Any

import pytest


class Tally:
    def __init__(self) -> None:
        self.statuses: Counter[int] = Counter()

    def wrap(self, app: Any) -> None:
        inner = app.wsgi_app

        def counted(environ: Any, start_response: Any) -> Any:
            def start(status: str, headers: Any, exc_info: Any = None) -> Any:
                self.statuses[int(status.split(" ", 1)[0])] += 1
                return start_response(status, headers, exc_info)

            return inner(environ, start)

        app.wsgi_app = counted

    @property
    def requests(self) -> int:
        return sum(self.statuses.values())

    @property
    def server_errors(self) -> int:
        return sum(n for status, n in self.statuses.items() if status >= 500)

    def report(self, config: pytest.Config, name: str) -> str:
        histogram = ", ".join(f"{status}: {n}" for status, n in sorted(self.statuses.items()))
        line = f"{name}: {self.requests} requests; {histogram}; 5xx: {self.server_errors}"
        reporter = config.pluginmanager.get_plugin("terminalreporter")
        capture = config.pluginmanager.get_plugin("capturemanager")
        if reporter is not None:  # past the capture, so it shows without -s
            with capture.global_and_fixture_disabled() if capture else nullcontext():
                reporter.write_line("\n" + line)
        return line

"""Races for tests: threads released together, their exceptions handed back."""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence


def race(works: Sequence[Callable[[], object]]) -> list[BaseException]:
    """Run each of ``works`` on its own thread, all started together; wait for all and
    return what they raised: a failure inside a thread fails the test, not lost in it."""
    start = threading.Barrier(len(works))
    errors: list[BaseException] = []

    def run(work: Callable[[], object]) -> None:
        start.wait()
        try:
            work()
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(work,)) for work in works]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return errors

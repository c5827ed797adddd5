"""glibc's malloc arenas, capped in a threaded server process.

glibc gives each thread that meets a locked arena a new one, up to 8 per core, and an
arena keeps the memory its threads freed: a search server's request, search and leg
threads each end up holding their own high-water mark (bench/results/scale.md).
"""

from __future__ import annotations

import ctypes
import os

ARENAS = 2
_M_ARENA_MAX = -8  # malloc.h


def cap_arenas(arenas: int = ARENAS) -> None:
    """At most ``arenas`` malloc arenas for this process from now on: call it before the
    threads start. A ``MALLOC_ARENA_MAX`` in the environment wins; not glibc: nothing."""
    if "MALLOC_ARENA_MAX" in os.environ:
        return
    try:
        mallopt = ctypes.CDLL("libc.so.6").mallopt
    except (OSError, AttributeError):
        return
    mallopt(_M_ARENA_MAX, arenas)

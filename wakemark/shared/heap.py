"""Give freed heap back to the OS after a big load (glibc only; a no-op elsewhere)."""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import sys
from typing import Any


@functools.cache
def _libc() -> Any:
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        return libc if hasattr(libc, "malloc_trim") else None  # musl has none
    except OSError:
        return None


def release_free_memory() -> None:
    """``malloc_trim(0)``: loading a namespace frees thousands of row objects whose pages
    glibc would otherwise keep, so a warm process's RSS stays at what it really holds."""
    libc = _libc()
    if libc is not None:
        libc.malloc_trim(0)

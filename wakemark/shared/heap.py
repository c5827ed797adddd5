"""Give freed heap back to the OS (glibc only; a no-op elsewhere)."""

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


M_MMAP_THRESHOLD = -3  # malloc.h
# Blocks this large or larger get their own mapping, unmapped when freed. glibc's default
# threshold grows to the largest block freed so far, after which the big arrays of an
# index build land in the heap and leave it fragmented at the build's peak.
LARGE_BLOCK = 1 << 20


def map_large_blocks(size: int = LARGE_BLOCK) -> None:
    """Blocks of ``size`` bytes or more (numpy arrays) mapped on their own from now on, so
    freeing one gives its memory back: call it where the process starts serving."""
    libc = _libc()
    if libc is not None:
        libc.mallopt(M_MMAP_THRESHOLD, size)

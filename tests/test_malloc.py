"""The malloc settings of a server process (glibc): threads that allocate at once share
the capped arenas instead of each getting its own, and large blocks are mapped apart."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

# Eight threads allocating together, then the number of arenas glibc's malloc_info lists.
SCRIPT = """
import ctypes, sys, threading
import numpy as np
from wakemark.shared.malloc import cap_arenas
if sys.argv[1] == "cap":
    cap_arenas()
libc = ctypes.CDLL("libc.so.6")
libc.open_memstream.restype = ctypes.c_void_p
together = threading.Barrier(8)
def allocate():
    together.wait()
    for _ in range(200):
        held = [np.ones(1000) for _ in range(50)]
threads = [threading.Thread(target=allocate) for _ in range(8)]
for t in threads:
    t.start()
for t in threads:
    t.join()
text, size = ctypes.c_char_p(), ctypes.c_size_t()
stream = ctypes.c_void_p(libc.open_memstream(ctypes.byref(text), ctypes.byref(size)))
libc.malloc_info(0, stream)
libc.fclose(stream)
print(text.value.decode().count("<heap nr="))
"""


def _arenas(mode: str, **env: str) -> int:
    clean = {k: v for k, v in os.environ.items() if k != "MALLOC_ARENA_MAX"}
    out = subprocess.run(
        [sys.executable, "-c", SCRIPT, mode], env={**clean, **env},
        capture_output=True, text=True, check=True, timeout=60,
    )  # fmt: skip
    return int(out.stdout)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's malloc")
def test_threads_share_the_capped_arenas() -> None:
    assert _arenas("none") > 2  # uncapped, glibc gives the threads arenas of their own
    assert _arenas("cap") <= 2
    # An operator's MALLOC_ARENA_MAX wins over the cap.
    assert _arenas("cap", MALLOC_ARENA_MAX="4") > 2


# A 16 MB block freed (glibc's threshold then rises past it), then four of 2 MB held:
# how many blocks glibc mapped apart (mallinfo2's hblks).
MAPPED = """
import ctypes, sys
from wakemark.shared.heap import map_large_blocks
if sys.argv[1] == "map":
    map_large_blocks()
class Info(ctypes.Structure):
    _fields_ = [(n, ctypes.c_size_t) for n in ("arena", "ordblks", "smblks", "hblks", "hblkhd",
                "usmblks", "fsmblks", "uordblks", "fordblks", "keepcost")]
libc = ctypes.CDLL("libc.so.6")
libc.mallinfo2.restype = Info
big = bytearray(16 << 20)
del big
held = [bytearray(2 << 20) for _ in range(4)]
print(libc.mallinfo2().hblks)
"""


def _mapped(mode: str) -> int:
    out = subprocess.run(
        [sys.executable, "-c", MAPPED, mode], capture_output=True, text=True, check=True,
        timeout=60,
    )  # fmt: skip
    return int(out.stdout)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's malloc")
def test_large_blocks_are_mapped_apart_so_freeing_them_returns_the_memory() -> None:
    assert _mapped("none") < 4  # glibc's own threshold grew past 2 MB: heap blocks
    assert _mapped("map") >= 4

"""Files a hook payload names, opened by the server only when they are its user's own.

A path in a payload is client input: without these checks a request could make the
server read any file its user can read (and a network client could do so from another
machine). So the server looks at client paths at all only for its own user
(``local_client``: the bootstrap token on a loopback server; a scoped token is another
person on a team host), opens one only when the path resolves inside the home of the
user the server runs as (a symlink pointing out is judged by its target), and what it
opens is a regular file that user owns. Anything else is refused, counted, and the hook
goes on without the file.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable
from pathlib import Path
from typing import Any, BinaryIO

from wakemark.services.api.metrics import Counter
from wakemark.shared import tokens
from wakemark.shared.config import Settings
from wakemark.shared.tokens import Principal

LOOPBACK = frozenset({"127.0.0.1", "localhost", "::1"})
REFUSED = Counter(
    "wakemark_hook_file_reads_refused_total",
    "Files named in hook payloads the server would not read (not its own user on "
    "loopback, outside the server user's home, not a regular file of that user).",
)


def local_client(settings: Settings, principal: Principal) -> bool:
    """Whether the client is the server's own user on this machine: only then may its
    paths be looked at (a project root found, a transcript read)."""
    return settings.host in LOOPBACK and principal is tokens.BOOTSTRAP


def opener(local: bool) -> Callable[[Any], BinaryIO | None]:
    def open_client_file(path: Any) -> BinaryIO | None:
        fh = _open_own(path) if local else None
        if fh is None:
            REFUSED.inc()
        return fh

    return open_client_file


def _open_own(path: Any) -> BinaryIO | None:
    if not isinstance(path, str) or not os.path.isabs(path):
        return None
    try:
        home = Path.home().resolve()
        target = Path(path).resolve()
        if not target.is_relative_to(home):
            return None
        # No following a link swapped in after resolving; no blocking on a FIFO.
        fd = os.open(target, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except (OSError, ValueError, RuntimeError):  # RuntimeError: a symlink loop
        return None
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode) or info.st_uid != os.geteuid():
        os.close(fd)
        return None
    return os.fdopen(fd, "rb")

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

from collections.abc import Callable
from typing import Any, BinaryIO

from wakemark.services.api.metrics import Counter
from wakemark.shared import tokens
from wakemark.shared.config import Settings
from wakemark.shared.retrieval.staleness import local_install, open_own
from wakemark.shared.tokens import Principal

REFUSED = Counter(
    "wakemark_hook_file_reads_refused_total",
    "Files named in hook payloads the server would not read (not its own user on "
    "loopback, outside the server user's home, not a regular file of that user).",
)


def local_client(settings: Settings, principal: Principal) -> bool:
    """Whether the client is the server's own user on this machine: only then may its
    paths be looked at (a project root found, a transcript read)."""
    return local_install(settings) and principal is tokens.BOOTSTRAP


def opener(local: bool) -> Callable[[Any], BinaryIO | None]:
    def open_client_file(path: Any) -> BinaryIO | None:
        fh = open_own(path) if local else None
        if fh is None:
            REFUSED.inc()
        return fh

    return open_client_file

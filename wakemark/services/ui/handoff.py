"""One-time codes that hand the viewer the token without putting it on a command line.

``wakemark ui`` opens ``/ui#code=<code>``: a browser's command line is readable by every
local user (``/proc/*/cmdline``) and lands in shell history, so only the code goes there.
The page trades the code for the token once (``POST /ui/token``), from loopback only,
within ``CODE_TTL_S``. A code is a file under the home named by its SHA-256, written by
the CLI and removed by the first exchange: every worker process of the server sees it,
and removing it can succeed only once.
"""

from __future__ import annotations

import hashlib
import os
import re
import secrets
import time
from pathlib import Path

from wakemark.shared.config import Settings, prepare_home

CODE_TTL_S = 60.0  # time enough to start a browser, short enough to be useless later
CODE_RE = re.compile(r"^[A-Za-z0-9_-]{20,64}$")


def _folder(settings: Settings) -> Path:
    return settings.home / "ui-codes"


def _path(settings: Settings, code: str) -> Path:
    return _folder(settings) / hashlib.sha256(code.encode()).hexdigest()


def issue(settings: Settings) -> str:
    """A new code, valid once for ``CODE_TTL_S``; expired ones are removed."""
    folder = prepare_home(settings) / "ui-codes"
    folder.mkdir(mode=0o700, exist_ok=True)
    now = time.time()
    for old in folder.iterdir():
        try:
            if now - old.stat().st_mtime > CODE_TTL_S:
                old.unlink()
        except FileNotFoundError:
            pass  # redeemed or removed meanwhile
    code = secrets.token_urlsafe(24)
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
    os.close(os.open(_path(settings, code), flags, 0o600))
    return code


def redeem(settings: Settings, code: str) -> bool:
    """Whether ``code`` was issued, unused and unexpired; it is used up either way."""
    if not CODE_RE.match(code):
        return False
    path = _path(settings, code)
    try:
        issued = path.stat().st_mtime
        path.unlink()  # only one caller can remove it: the code is spent
    except FileNotFoundError:
        return False
    return time.time() - issued <= CODE_TTL_S

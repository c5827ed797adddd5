"""The product's former name, for what earlier installs left behind.

wakemark was called engram before its first release. This module is the one place that
still knows the old name: a data directory ``~/.engram`` is adopted on first start, and
the installer (``wakemark.services.agents.legacy``) recognises agent-config entries the old
``engram install`` wrote, so they are replaced rather than left as dead hooks.
"""

from __future__ import annotations

import logging
from pathlib import Path

log = logging.getLogger(__name__)

NAME = "engram"
HOME = Path("~/.engram").expanduser()
_DB_FILES = ("", "-wal", "-shm", "-writer")  # the database and its siblings


def adopt_home(home: Path, legacy: Path = HOME) -> bool:
    """Move the old data directory to ``home`` when only the old one exists; renames the
    SQLite database and its siblings too. True if it moved something."""
    if home.exists() or not legacy.is_dir():
        return False
    legacy.rename(home)
    for suffix in _DB_FILES:
        old = home / f"{NAME}.db{suffix}"
        if old.exists():
            old.rename(home / f"wakemark.db{suffix}")
    log.warning("moved the data directory of engram (wakemark's former name): %s -> %s",
                legacy, home)  # fmt: skip
    return True

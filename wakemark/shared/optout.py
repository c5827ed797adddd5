"""Opt-out per project: whether anything from a project may be stored (stdlib only).

A project is ignored when its root holds ``.wakemarkignore`` or its path matches a glob
of ``WAKEMARK_IGNORE_PROJECTS``. The API decides from the path the hook or client sent
(``X-Wakemark-Project``, the payload's cwd, ``source.project_path``); a path this process
cannot see (the API in a container) can still match a glob.
"""

from __future__ import annotations

import fnmatch
import os
from collections.abc import Sequence

from wakemark.shared import project

IGNORE_FILE = ".wakemarkignore"


def ignored(project_path: str | None, patterns: Sequence[str] = ()) -> str | None:
    """Why nothing from the project at ``project_path`` may be stored; None if it may."""
    if not project_path:
        return None
    path = os.path.normpath(project_path)
    root = project.find_root(path) if os.path.isdir(path) else None
    candidates = [p for p in dict.fromkeys([path, root]) if p]
    for pattern in patterns:
        if any(fnmatch.fnmatchcase(p, pattern) for p in candidates):
            return f"WAKEMARK_IGNORE_PROJECTS matches {pattern}"
    for p in candidates:
        if os.path.isfile(os.path.join(p, IGNORE_FILE)):
            return f"{os.path.join(p, IGNORE_FILE)} exists"
    return None


def ignore_file(root: str) -> str:
    return os.path.join(root, IGNORE_FILE)

"""Project root detection and the namespace of an actor's project (stdlib only).

Used by the hook forwarder, the server's hook view and the MCP server, so all three agree
on a namespace. The forwarder loads this file by its path (``services/forwarder/forward.py``), not
as part of the package, so it must import nothing but the standard library; and since
its start-up time matters, it uses ``os.path`` rather than ``pathlib`` and imports
``hashlib``/``getpass`` only when a project id or an actor is actually asked for (root
detection needs neither). It must also stay valid on Python 3.9, the oldest interpreter
the forwarder may run under.

``project_id`` is the first 16 hex digits (64 bits) of the SHA-256 of the resolved root
path: short enough to read in a namespace, and a collision between two projects of one
user is not a practical concern. A directory with no marker at or above it (up to, but
never including, ``$HOME``) belongs to the global project ``"global"``.
"""

from __future__ import annotations

import os

MARKERS = (
    ".git",
    ".kiro",
    ".claude",
    "package.json",
    "pyproject.toml",
    "Cargo.toml",
    "go.mod",
    "pom.xml",
    "build.gradle",
    "Gemfile",
    "composer.json",
    ".hg",
)
GLOBAL_PROJECT = "global"
PROJECT_ID_HEX = 16
MAX_ACTOR = 100


def find_root(start: str | None = None, home: str | None = None) -> str | None:
    """The nearest directory at or above ``start`` (default: the cwd) holding a marker.

    The walk stops at ``$HOME`` without checking it: a dotfiles repo or a stray
    ``package.json`` in the home directory must not swallow every project below it.
    """
    try:
        here = os.path.realpath(os.path.expanduser(start) if start else os.getcwd())
        home = os.path.realpath(home or os.path.expanduser("~"))
    except (OSError, ValueError):
        return None
    while True:
        if here == home:
            return None
        if any(os.path.lexists(os.path.join(here, marker)) for marker in MARKERS):
            return here
        parent = os.path.dirname(here)
        if parent == here:
            return None
        here = parent


def project_id(root: str | None) -> str:
    if root is None:
        return GLOBAL_PROJECT
    import hashlib

    digest = hashlib.sha256(root.encode("utf-8", "surrogateescape")).hexdigest()
    return digest[:PROJECT_ID_HEX]


def sanitize_actor(raw: str | None) -> str:
    """A namespace-safe actor: ``/``, whitespace and control characters become ``_``."""
    out = "".join("_" if c == "/" or c.isspace() or not c.isprintable() else c for c in raw or "")
    actor = out.strip("_.")[:MAX_ACTOR]
    return actor or "unknown"


def actor(environ: dict[str, str] | None = None) -> str:
    """``$WAKEMARK_ACTOR``, else the OS user name."""
    env = os.environ if environ is None else environ
    raw = env.get("WAKEMARK_ACTOR")
    if not raw:
        import getpass

        try:
            raw = getpass.getuser()
        except Exception:  # no passwd entry (some containers): fall back to the uid
            raw = f"uid{os.getuid()}"
    return sanitize_actor(raw)


def namespace_for(actor_name: str, pid: str) -> str:
    return f"/actor/{sanitize_actor(actor_name)}/project/{pid}/"


def agent_start_dir(environ: dict[str, str] | None = None) -> str:
    """Where a process started from an agent (or a terminal) stands: the agent's project
    directory when it exports one, else the cwd. The MCP server and the CLI share it."""
    env = os.environ if environ is None else environ
    return env.get("CLAUDE_PROJECT_DIR") or env.get("GEMINI_PROJECT_DIR") or os.getcwd()


def namespace(start: str | None = None, actor_name: str | None = None) -> str:
    """The namespace of the project containing ``start`` (default: the cwd)."""
    return namespace_for(actor_name or actor(), project_id(find_root(start)))

"""Memories checked against today's code.

At capture a record keeps its code anchors (``storage.ports.anchors``): the
project-relative files it touched or cited, each file's SHA-256 (and git blob id) as it
was, and the code identifiers it names that a cited file held. At injection, in search
results and in ``wakemark verify`` the record is checked against the files as they are:

- **current**: every cited file is as it was;
- **changed**: a cited file's content differs (the record may still hold);
- **gone**: a cited file that existed no longer does (deleted or renamed), or an
  identifier is in none of the cited files any more;
- **unchecked**: nothing to check, or the server may not read the project's files.

Only the server's own user's files are ever read (``open_own``): on a local install the
project is that user's. A team server takes its clients' paths from other machines, so
it reads nothing: a record's files take the hashes the client's forwarder sent just
after the turn's edits (``EDITED_HEADER``, kept in the tool-use event), the files the
turn did not edit the client's first report at a later prompt (``HASHES_HEADER``), and
prompts are checked against the hashes the forwarder sends with them; the retrieval
audit says which, or that nothing was checked.
"""

from __future__ import annotations

import hashlib
import os
import re
import stat
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, BinaryIO, Literal

from wakemark.shared.models import FILE_HASHES, JsonBody, MemoryRecord, check_file_hashes
from wakemark.shared.retrieval.gate import IDENTIFIER  # the gate's notion of one
from wakemark.shared.storage import Anchors, CodeAnchors, FileAnchor

LOOPBACK = frozenset({"127.0.0.1", "localhost", "::1"})
MAX_FILES = 50  # anchored per record; the rest of a sweeping edit adds little
MAX_IDENTIFIERS = 20
MAX_FILE_BYTES = 4 << 20  # a larger file is not hashed (generated or data, not code)
CACHE_ENTRIES = 20_000
# What the prompt path may read to check its candidates (about a millisecond of reading
# and hashing); the rest is hashed in the background for the next prompt.
PROMPT_READ_BYTES = 64 << 10
FILE_COST = 16 << 10  # opening a file costs about as much as reading this many bytes

State = Literal["current", "changed", "gone", "unchecked"]
NOT_READ = "code not checked: this server does not read the client's files"
FROM_CLIENT = "code checked from the hashes the client's forwarder sent"


HASHES_HEADER = "X-Wakemark-Hashes"  # the forwarder's: ``path=sha256`` (``-``: not there), ``;``
WATCH_HEADER = "X-Wakemark-Watch"  # the server's: the paths it asks about, ``;``-separated
# The forwarder's, with a tool use that wrote files: ``path=sha256`` (``-``: not there),
# ``;``-separated, each hashed just after the edit.
EDITED_HEADER = "X-Wakemark-Edited"
MAX_REPORTED = 32  # files a forwarder hashes per call (services/forwarder/forward.py)
_HEX64 = re.compile(r"[0-9a-f]{64}")


def _unescape(text: str) -> str:
    return text.replace("%3B", ";").replace("%3D", "=").replace("%25", "%")


def _escape(text: str) -> str:
    return text.replace("%", "%25").replace(";", "%3B").replace("=", "%3D")


def parse_reported(value: str | None) -> dict[str, str | None] | None:
    """A forwarder's hashes header, by project-relative path; None when absent. Entries
    that are not a relative path and a SHA-256 (or ``-``) are left out."""
    if value is None:
        return None
    out: dict[str, str | None] = {}
    for item in value.split(";")[:MAX_REPORTED]:
        path, _, digest = item.partition("=")
        path = _unescape(path.strip())
        if not path or path.startswith(("/", "../")) or "\0" in path:
            continue
        if digest == "-":
            out[path] = None
        elif _HEX64.fullmatch(digest):
            out[path] = digest
    return out


def parse_edited(value: str) -> dict[str, str | None]:
    """A forwarder's edited-files header, strictly (a forwarder never sends a bad one):
    ValueError, one line, for the first malformed entry."""
    out: dict[str, str | None] = {}
    for item in value.split(";"):
        path, sep, digest = item.strip().partition("=")
        if not sep:
            raise ValueError(f"{EDITED_HEADER}: expected path=sha256 or path=-, got {item[:80]!r}")
        out[_unescape(path)] = None if digest == "-" else digest
    try:
        return check_file_hashes(out)
    except ValueError as exc:
        raise ValueError(f"{EDITED_HEADER}: {exc}") from None


def edited_in(events: Sequence[Any]) -> dict[str, str | None]:
    """Each file's last hash the client sent with the events' tool uses (in order)."""
    out: dict[str, str | None] = {}
    for event in events:
        if isinstance(event.body, JsonBody) and isinstance(event.body.data.get(FILE_HASHES), dict):
            out.update(event.body.data[FILE_HASHES])
    return out


def watch_value(paths: Sequence[str]) -> str:
    return ";".join(_escape(p) for p in paths[:MAX_REPORTED])


def local_install(settings: Any) -> bool:
    """Whether the server listens on loopback only: then its clients are on this machine."""
    return settings.host in LOOPBACK


def in_home(path: Path) -> bool:
    """Whether a resolved path is inside the home of the user this process runs as: the
    only files a check reads (``open_own``)."""
    return path.is_relative_to(Path.home().resolve())


def open_own(path: Any) -> BinaryIO | None:
    """``path`` opened for reading when it is a regular file, inside the home of the user
    this process runs as (a symlink pointing out is judged by its target) and owned by
    that user; else None."""
    if not isinstance(path, str) or not os.path.isabs(path):
        return None
    try:
        target = Path(path).resolve()
        if not in_home(target):
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


def _read(root: str, rel: str) -> tuple[bytes, tuple[int, int]] | None:
    """The file's content and its (mtime_ns, size) taken before reading it: a write
    during the read moves the mtime, so the pair never vouches for newer content."""
    path = os.path.normpath(os.path.join(root, rel))
    if not path.startswith(os.path.normpath(root) + os.sep):
        return None  # "../" out of the project
    fh = open_own(path)
    if fh is None:
        return None
    with fh:
        info = os.fstat(fh.fileno())
        data = fh.read(MAX_FILE_BYTES + 1)
    return (data, (info.st_mtime_ns, info.st_size)) if len(data) <= MAX_FILE_BYTES else None


def _blob(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data, usedforsecurity=False).hexdigest()


def _name(identifier: str) -> bytes:
    # A dotted name (``Request.host``) is written as its last part where it is defined.
    return re.escape(identifier.rsplit(".", 1)[-1].encode())


def _holds(data: bytes, identifier: str) -> bool:
    return re.search(rb"\b" + _name(identifier) + rb"\b", data) is not None


def _defines(data: bytes, identifier: str) -> bool:
    """Whether ``data`` defines the name, in the usual forms of the common languages: a
    name only used there may go without the memory being wrong."""
    name = _name(identifier)
    keyword = rb"\b(?:def|class|function|func|fn|struct|enum|interface|trait|type|const|let|var)"
    pattern = keyword + rb"\s+" + name + rb"\b|^\s*(?:self\.|this\.)?" + name + rb"\s*[:=](?!=)"
    return re.search(pattern, data, re.MULTILINE) is not None


def capture(
    record: MemoryRecord,
    root: str | None,
    readable: bool,
    edited: Mapping[str, str | None] | None = None,
) -> CodeAnchors | None:
    """The record's anchors: None when it cites no project file. ``edited``: on a server
    that may not read the files, the hashes the client sent with the turn's edits
    (``edited_in``); a cited file the turn did not edit waits for the first report."""
    files = [
        f for f in dict.fromkeys(record.files_touched)
        if f and not os.path.isabs(f) and not f.startswith("../")
    ][:MAX_FILES]  # fmt: skip
    if not files:
        return None
    text = "\n".join([record.title, record.summary, *record.facts])
    names = [n for n in dict.fromkeys(IDENTIFIER.findall(text)) if not any(n in f for f in files)]
    if not readable or root is None:
        sent = edited or {}
        anchored = [FileAnchor(f, sent.get(f)) for f in files]
        taken = tuple(f for f in files if f in sent)
        waiting = len(taken) < len(files)
        return CodeAnchors(
            record.record_id, record.namespace, root, tuple(anchored), (), not waiting, taken
        )
    git = os.path.isdir(os.path.join(root, ".git"))
    anchored, contents = [], []
    for rel in files:
        read = _read(root, rel)
        if read is None:
            anchored.append(FileAnchor(rel, None))
            continue
        data, (mtime_ns, size) = read
        contents.append(data)
        digest = hashlib.sha256(data).hexdigest()
        anchored.append(FileAnchor(rel, digest, _blob(data) if git else None, mtime_ns, size))
    held = [n for n in names if any(_defines(d, n) for d in contents)][:MAX_IDENTIFIERS]
    return CodeAnchors(record.record_id, record.namespace, root, tuple(anchored), tuple(held), True)


@dataclass(frozen=True)
class Verdict:
    state: State
    paths: tuple[str, ...] = ()  # the changed or gone files
    identifiers: tuple[str, ...] = ()  # the identifiers no cited file holds now

    def marker(self) -> str:
        return f"(changed since: {', '.join(self.paths)})" if self.state == "changed" else ""

    def why(self) -> str:
        return ", ".join([*self.paths, *self.identifiers])


UNCHECKED = Verdict("unchecked")


class _Budget:
    """Bytes of files one check may still read; a file costs at least ``FILE_COST``."""

    def __init__(self, left: int | None) -> None:
        self.left = left

    def take(self, size: int) -> bool:
        if self.left is None:
            return True
        if self.left <= 0:
            return False
        self.left -= max(size, FILE_COST)
        return True


LATER = "later"  # a file left for the background: its state is not known yet


class CodeCheck:
    """Checks anchors against the files now. A file whose (mtime, size) is the one it had
    when hashed (at capture, or by an earlier check) is not read again, so a prompt
    usually pays a ``stat`` per cited file. What must be read is bounded per call by
    ``read_budget``: a record whose files would go past it is unchecked this time, and
    those files are hashed in the background for the next call."""

    def __init__(self, storage: Anchors) -> None:
        self._storage = storage
        # A record's anchors are written with it and never after, so they are read once.
        self._anchors: dict[str, CodeAnchors | None] = {}
        self._hashes: dict[str, tuple[int, int, str]] = {}
        self._held: dict[tuple[str, int, int, str], bool] = {}
        self._pending: set[str] = set()
        self._background: ThreadPoolExecutor | None = None

    def after_fork(self) -> None:
        self._background = None
        self._pending = set()

    def drain(self) -> None:
        """Wait for the background hashes asked so far (tests, benchmarks)."""
        if self._background is not None:
            self._background.submit(lambda: None).result()

    def verdicts(
        self,
        record_ids: Sequence[str],
        root: str | None = None,
        read_budget: int | None = None,
        reported: Mapping[str, str | None] | None = None,
        baselines: list[CodeAnchors] | None = None,
    ) -> dict[str, Verdict]:
        """The verdict of each record that has anchors; ``root`` (else the one at capture)
        is where the project is now; ``reported``: the client's own hashes of the files,
        by project-relative path, used instead of reading any (a team server), and the
        anchors that took their hashes from it appended to ``baselines`` (to store; without
        it, no report becomes a baseline)."""
        known = self._load(record_ids)
        budget = _Budget(read_budget)
        if reported is not None:
            for rid, a in known.items() if baselines is not None else ():
                kept = None if a is None else self.baseline(a, reported)
                if kept is not None:
                    known[rid] = kept
                    if baselines is not None:
                        baselines.append(kept)
            return {rid: self.reported(a, reported) for rid, a in known.items() if a is not None}
        return {rid: self.verdict(a, root, budget) for rid, a in known.items() if a is not None}

    def baseline(self, anchors: CodeAnchors, now: Mapping[str, str | None]) -> CodeAnchors | None:
        """Anchors a server that read nothing at capture takes from the client's first
        report of the cited files the turn did not edit (None: nothing new to keep). Such
        a file as first reported stands for the file at capture: a change between the
        two goes unseen. An edited file keeps the hash sent just after the edit."""
        waiting = [f for f in anchors.files if f.path not in anchors.edited]
        if anchors.hashed or not any(now.get(f.path) for f in waiting):
            return None
        files = tuple(
            f if f.path in anchors.edited else replace(f, sha256=now.get(f.path))
            for f in anchors.files
        )
        kept = replace(anchors, files=files, hashed=True)
        self._anchors[anchors.record_id] = kept
        return kept

    def client_note(self, record_ids: Sequence[str]) -> str:
        """What the audit row's reason says of a check from the client's hashes: how many
        records were anchored by their turn's edits, how many by a first report."""
        found = [a for a in self._load(record_ids).values() if a is not None]
        at_edit = sum(1 for a in found if a.edited)
        return (
            f"{FROM_CLIENT} ({at_edit} of {len(found)} anchored record(s) as their turn's "
            "edits left the files, the others as first reported; names not checked)"
        )

    def cited(self, record_ids: Sequence[str]) -> list[str]:
        """The files the records cite."""
        found = self._load(record_ids).values()
        return list(dict.fromkeys(f.path for a in found if a is not None for f in a.files))

    def _load(self, record_ids: Sequence[str]) -> dict[str, CodeAnchors | None]:
        missing = [rid for rid in record_ids if rid not in self._anchors]
        if missing:
            found = self._storage.get_anchors(missing)
            if len(self._anchors) + len(missing) > CACHE_ENTRIES:
                self._anchors.clear()
            self._anchors.update({rid: found.get(rid) for rid in missing})
        return {rid: self._anchors.get(rid) for rid in record_ids}

    def reported(self, anchors: CodeAnchors, now: Mapping[str, str | None]) -> Verdict:
        """The verdict from the client's hashes (None: the file is not there). Names are
        not checked: that needs the files' text, which the client does not send."""
        hashed = [f for f in anchors.files if f.sha256 is not None]
        known = [f for f in hashed if f.path in now]
        gone = tuple(f.path for f in known if now[f.path] is None)
        if gone:
            return Verdict("gone", gone)
        if not known or len(known) < len(hashed):
            return UNCHECKED
        changed = tuple(f.path for f in known if now[f.path] != f.sha256)
        return Verdict("changed", changed) if changed else Verdict("current")

    def verdict(
        self, anchors: CodeAnchors, root: str | None = None, budget: _Budget | None = None
    ) -> Verdict:
        root = root or anchors.root
        budget = budget or _Budget(None)
        hashed = [f for f in anchors.files if f.sha256 is not None]
        # A project moved or unmounted says nothing about its files: every record of it
        # would otherwise be gone at once.
        if not hashed or root is None or not os.path.isdir(root):
            return UNCHECKED
        gone, changed, now, later = [], [], [], False
        for f in hashed:  # a file not there at capture has nothing to lose
            key = os.path.join(root, f.path)
            digest = self._hash(root, f, key, budget)
            if digest is None:
                gone.append(f.path)
            elif digest == LATER:
                later = True
            elif digest != f.sha256:
                changed.append(f.path)
                now.append(key)
            else:
                now.append(key)
        if later and not gone:
            return UNCHECKED
        lost = []
        for name in anchors.identifiers if changed and not later else ():
            held = self._held_now(root, now, name, budget)
            if held == LATER and not gone:
                return UNCHECKED
            if not held:
                lost.append(name)
        if gone or lost:
            return Verdict("gone", tuple(gone), tuple(lost))
        if changed:
            return Verdict("changed", tuple(changed))
        return Verdict("current")

    def _stat(self, path: str) -> tuple[int, int] | None:
        try:
            info = os.stat(path)
        except (OSError, ValueError):
            return None
        return (info.st_mtime_ns, info.st_size) if stat.S_ISREG(info.st_mode) else None

    def _hash(self, root: str, anchor: FileAnchor, key: str, budget: _Budget) -> str | None:
        seen = self._stat(key)
        if seen is None:
            return None
        cached = self._hashes.get(key)
        if cached is not None and cached[:2] == seen:
            return cached[2]
        if anchor.sha256 is not None and (anchor.mtime_ns, anchor.size) == seen:
            return anchor.sha256
        if not budget.take(seen[1]):
            self._later(root, anchor.path, key)
            return LATER
        return self._read_hash(root, anchor.path, key, seen)

    def _read_hash(self, root: str, rel: str, key: str, seen: tuple[int, int]) -> str:
        read = _read(root, rel)
        # There but not readable (grown too large, not the user's any more): it cannot be
        # the file as captured, and it is not gone.
        digest = "" if read is None else hashlib.sha256(read[0]).hexdigest()
        if len(self._hashes) >= CACHE_ENTRIES:
            self._hashes.clear()
        self._hashes[key] = (*(seen if read is None else read[1]), digest)
        return digest

    def _later(self, root: str, rel: str, key: str) -> None:
        if key in self._pending or len(self._pending) >= CACHE_ENTRIES:
            return
        self._pending.add(key)
        if self._background is None:
            self._background = ThreadPoolExecutor(1, thread_name_prefix="wakemark-code-check")

        def run() -> None:
            try:
                seen = self._stat(key)
                if seen is not None:
                    self._read_hash(root, rel, key, seen)
            finally:
                self._pending.discard(key)

        self._background.submit(run)

    def _held_now(
        self, root: str, paths: list[str], identifier: str, budget: _Budget
    ) -> bool | str:
        for path in paths:
            seen = self._stat(path)
            if seen is None:
                continue
            key = (path, *seen, identifier)
            if key not in self._held:
                if not budget.take(seen[1]):
                    return LATER
                read = _read(root, os.path.relpath(path, root))
                if len(self._held) >= CACHE_ENTRIES:
                    self._held.clear()
                # An unreadable file is no evidence that the name went.
                self._held[key] = read is None or _holds(read[0], identifier)
            if self._held[key]:
                return True
        return False

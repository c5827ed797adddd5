"""Markdown memory files (``CLAUDE.md``, Claude Code auto-memory, Cursor rules ``.mdc``,
Cline memory-bank files) as manual records: each section (a heading and the text under
it, up to the next heading) becomes one record of the file's project.

A record's id is derived from its namespace, file, heading and text, so importing the
same file twice writes nothing new, and an edited section arrives as a new record.
"""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

from ulid import ULID

from wakemark.shared.models import MemoryRecord
from wakemark.shared.privacy import scrub

SUFFIXES = (".md", ".mdc", ".markdown")
_HEADING = re.compile(r"^(#{1,3})\s+(.+?)\s*#*\s*$")
_FENCE = re.compile(r"^\s*(```|~~~)")
_BULLET = re.compile(r"^\s*(?:[-*+]|\d+[.)])\s+(.+)$")
_FRONTMATTER = re.compile(r"\A---\n(.*?)\n---\n", re.S)


def files(path: str) -> list[str]:
    """A markdown file, or every one under a directory (hidden ones like ``.cursor``
    included, ``.git`` and ``node_modules`` not)."""
    if os.path.isfile(path):
        return [path]
    found = []
    for root, dirs, names in os.walk(path):
        dirs[:] = sorted(d for d in dirs if d not in (".git", "node_modules"))
        found += [os.path.join(root, n) for n in sorted(names) if n.endswith(SUFFIXES)]
    return found


def sections(text: str) -> Iterator[tuple[list[str], str]]:
    """(heading path, body) per section with a body; ``#`` in code fences is text."""
    text = text.replace("\r\n", "\n")
    preamble: list[str] = []
    match = _FRONTMATTER.match(text)
    if match:  # Cursor rules: its description names the text before the first heading
        text = text[match.end() :]
        for line in match.group(1).splitlines():
            if line.startswith("description:") and line[12:].strip():
                preamble = [line[12:].strip().strip("\"'")]
    path: list[str] = preamble
    body: list[str] = []
    fenced = False
    for line in text.split("\n"):
        if _FENCE.match(line):
            fenced = not fenced
        heading = None if fenced else _HEADING.match(line)
        if heading is None:
            body.append(line)
            continue
        if "\n".join(body).strip():
            yield path, "\n".join(body).strip()
        level = len(heading.group(1))
        path = [*path[: level - 1], heading.group(2)]
        body = []
    if "\n".join(body).strip():
        yield path, "\n".join(body).strip()


def records(file: str, namespace: str) -> list[MemoryRecord]:
    file = os.path.abspath(file)
    raw = Path(file).read_text(encoding="utf-8", errors="replace")
    created = datetime.fromtimestamp(os.stat(file).st_mtime, UTC)
    name = os.path.basename(file)
    out = []
    for path, body in sections(raw):
        title = " › ".join(path) if path else name
        facts = [m.group(1).strip() for line in body.split("\n") if (m := _BULLET.match(line))]
        digest = hashlib.sha256("\0".join((namespace, file, title, body)).encode()).digest()
        fields = scrub(
            {
                "title": f"{title} ({name})"[:200],
                "summary": body[:4000],
                "facts": [f[:2000] for f in facts[:100]],
            }
        )
        out.append(
            MemoryRecord(
                record_id="mr_" + str(ULID.from_bytes(digest[:16])),
                namespace=namespace,
                files_touched=[file[:1000]],
                observation_type="note",
                strategy="manual",
                created_at=created,
                **fields,
            )
        )
    return out

"""Staleness on real git history: precision and recall of ``gone`` and ``changed``.

Each non-merge commit of a public project (a bare mirror fetched with the search tool's
``fetch``, ``/work/.mirror/<owner>+<name>/repo``; ``WAKEMARK_MIRRORS`` overrides the
root) is replayed as a turn: its message is the record, the Python files it added or
modified are the cited files, written as they were at that commit into a scratch project
under a temporary home, and its anchors are captured as extraction does
(``staleness.capture``). ``LATER`` commits on, the same paths are written as they are at
that commit into a second scratch project and the record is checked (``CodeCheck``).

Truth from git, judged apart from the checker:

- **gone**: a cited file is not in the later tree (deleted or renamed), or a name the
  message cites and a cited file *defined* at capture (``def``/``class``/assignment) is
  defined in none of them later;
- **changed**: not gone, and a cited file's blob differs.

Derived data stays in a temporary directory. Run: ``python -m bench staleness_history``.
"""

from __future__ import annotations

import os
import re
import subprocess
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any

PROJECTS = ("pallets+itsdangerous", "marshmallow-code+marshmallow")
LATER = 100  # commits between capture and check
MAX_FILES = 5


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(
        ["git", f"--git-dir={repo}", *args], check=True, capture_output=True, text=True
    ).stdout


def _show(repo: Path, commit: str, path: str) -> bytes | None:
    done = subprocess.run(
        ["git", f"--git-dir={repo}", "show", f"{commit}:{path}"], capture_output=True
    )
    return done.stdout if done.returncode == 0 else None


def _defines(data: bytes, name: str) -> bool:
    last = re.escape(name.rsplit(".", 1)[-1].encode())
    pattern = rb"(?m)^\s*(?:async\s+def|def|class)\s+" + last + rb"\b|^\s*" + last + rb"\s*[:=]"
    return re.search(pattern, data) is not None


def _write(root: Path, files: dict[str, bytes | None]) -> None:
    for path, data in files.items():
        if data is not None:
            (root / path).parent.mkdir(parents=True, exist_ok=True)
            (root / path).write_bytes(data)


def _project(repo: Path, scratch: Path) -> Counter[str]:
    from wakemark.shared.models import MemoryRecord
    from wakemark.shared.retrieval.staleness import CodeCheck, capture

    check = CodeCheck(None)  # type: ignore[arg-type]  # verdicts of given anchors only
    commits = _git(repo, "rev-list", "--reverse", "--no-merges", "--first-parent", "HEAD").split()
    counts: Counter[str] = Counter()
    for i, commit in enumerate(commits[:-LATER]):
        later = commits[i + LATER]
        changed = _git(repo, "diff-tree", "--no-commit-id", "-r", "--name-only",
                       "--diff-filter=AM", commit).split()  # fmt: skip
        paths = [p for p in changed if p.endswith(".py")][:MAX_FILES]
        if not paths:
            continue
        message = _git(repo, "log", "-1", "--format=%B", commit).strip()
        subject, _, body = message.partition("\n")
        record = MemoryRecord(namespace="/actor/b/project/p/", title=subject[:200] or "commit",
                              summary=body[:4000], files_touched=paths)  # fmt: skip
        before = {p: _show(repo, commit, p) for p in paths}
        after = {p: _show(repo, later, p) for p in paths}
        then, now = scratch / f"{i}-then", scratch / f"{i}-now"
        (then / ".git").mkdir(parents=True)
        now.mkdir()
        _write(then, before)
        _write(now, after)
        anchors = capture(record, str(then), readable=True)
        assert anchors is not None
        verdict = check.verdict(anchors, str(now))
        defined = [n for n in anchors.identifiers
                   if any(d is not None and _defines(d, n) for d in before.values())]  # fmt: skip
        gone = any(after[p] is None for p in paths) or any(
            not any(d is not None and _defines(d, n) for d in after.values()) for n in defined
        )
        differs = not gone and any(after[p] != before[p] for p in paths)
        truth = "gone" if gone else "changed" if differs else "current"
        counts[f"{truth}->{verdict.state}"] += 1
    return counts


def _pr(counts: Counter[str], state: str) -> dict[str, float | int]:
    tp = sum(n for k, n in counts.items() if k == f"{state}->{state}")
    said = sum(n for k, n in counts.items() if k.endswith(f"->{state}"))
    true = sum(n for k, n in counts.items() if k.startswith(f"{state}->"))
    return {
        "true": true,
        "said": said,
        "precision": round(tp / said, 3) if said else 0.0,
        "recall": round(tp / true, 3) if true else 0.0,
    }


def run() -> dict[str, Any]:
    root = Path(os.environ.get("WAKEMARK_MIRRORS", "/work/.mirror"))
    out: dict[str, Any] = {"later_commits": LATER, "projects": {}}
    total: Counter[str] = Counter()
    with tempfile.TemporaryDirectory() as tmp:
        home = Path(tmp) / "user"
        os.environ["HOME"] = str(home)  # only the user's own files are read
        for name in PROJECTS:
            repo = root / name / "repo"
            if not repo.is_dir():
                out["projects"][name] = "mirror missing"
                continue
            counts = _project(repo, home / name)
            total += counts
            out["projects"][name] = {
                "records": sum(counts.values()),
                "gone": _pr(counts, "gone"),
                "changed": _pr(counts, "changed"),
                "confusion": dict(sorted(counts.items())),
            }
    out["all"] = {
        "records": sum(total.values()),
        "gone": _pr(total, "gone"),
        "changed": _pr(total, "changed"),
        "confusion": dict(sorted(total.items())),
    }
    return out

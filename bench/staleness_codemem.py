"""The share of injected records that are gone at query time, on the codemem-dev replay
(``bench/_codemem.py``), with the code check off and on.

The replay's records cite the files their commit changed, but were captured under a root
that does not exist. Here each record's anchors are captured again as extraction does
(``staleness.capture``), with the files as they were at its commit: the project's public
history (a bare mirror fetched with the search tool's ``fetch``,
``/work/.mirror/<owner>+<name>/repo``; ``WAKEMARK_MIRRORS`` overrides the root) is
written, commit by commit in time order, into a scratch project under a temporary home.
Query time is the dataset's snapshot (``SNAPSHOT``): that tree is written into the
project, and each query and negative is answered by the prompt path with the check off
(``read_files=False``) and on.

Truth from git, judged apart from the checker: an injected record is **gone** when a file
it cites existed at its commit and is not in the snapshot tree (deleted or renamed).
Derived data stays in a temporary directory. Run: ``python -m bench staleness_codemem``.
"""

from __future__ import annotations

import os
import subprocess
import tempfile
from pathlib import Path
from typing import Any

from bench import _codemem

SNAPSHOT = {"werkzeug": "1b00618e", "jinja": "5ef70112"}
MIRRORS = Path(os.environ.get("WAKEMARK_MIRRORS", "/work/.mirror"))


class _Blobs:
    """``git cat-file --batch``: one process for every file read."""

    def __init__(self, repo: Path) -> None:
        self._proc = subprocess.Popen(
            ["git", f"--git-dir={repo}", "cat-file", "--batch"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
        )

    def read(self, commit: str, path: str) -> bytes | None:
        assert self._proc.stdin is not None and self._proc.stdout is not None
        self._proc.stdin.write(f"{commit}:{path}\n".encode())
        self._proc.stdin.flush()
        head = self._proc.stdout.readline().split()
        if len(head) != 3 or head[1] != b"blob":
            return None
        data = self._proc.stdout.read(int(head[2]) + 1)[:-1]
        return data

    def close(self) -> None:
        assert self._proc.stdin is not None
        self._proc.stdin.close()
        self._proc.wait()


def _write(root: Path, files: dict[str, bytes | None]) -> None:
    for path, data in files.items():
        target = root / path
        if data is None:
            target.unlink(missing_ok=True)
        else:
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(data)


def _project(name: str, tmp: Path, model: Path) -> dict[str, Any]:
    from wakemark.shared.retrieval.staleness import capture

    repo = MIRRORS / f"pallets+{name}" / "repo"
    project = _codemem.open_project(name, model, scratch=tmp / "db")
    rt = project.runtime
    root = Path.home() / name
    root.mkdir()
    blobs = _Blobs(repo)
    try:
        rows = sorted(_codemem._rows(_codemem.directory(name) / "memories.jsonl"),
                      key=lambda r: r["date"])  # fmt: skip
        gold = _codemem._gold_ids(rt, name)
        records = {r.record_id: r for r in rt.storage.get_memory_records(list(gold.values()))}
        existed: dict[str, set[str]] = {}  # record id -> cited files there at its commit
        for row in rows:
            record = records.get(gold.get(row["id"], ""))
            if record is None:
                continue
            files = {p: blobs.read(row["id"], p) for p in record.files_touched}
            _write(root, files)
            anchors = capture(record, str(root), readable=True)
            if anchors is None:
                continue
            with rt.storage.transaction() as tx:
                tx.put_anchors(anchors)
            existed[record.record_id] = {p for p, d in files.items() if d is not None}
        cited = {p for paths in existed.values() for p in paths}
        now = {p: blobs.read(SNAPSHOT[name], p) for p in cited}
        _write(root, now)
        gone_truth = {rid for rid, paths in existed.items() if any(now[p] is None for p in paths)}
        out: dict[str, Any] = {
            "records_anchored": len(existed),
            "gone_at_snapshot": len(gone_truth),
        }
        rt.embedder.warm()  # no query of either pass may run without the vector leg
        prompts = project.queries + project.negatives
        for q in prompts[:20]:
            rt.retriever.for_prompt(project.namespace, q.text, audit=False, read_files=True)
        for label, read in (("check_off", False), ("check_on", True)):
            injected = gone = found = 0
            for q in prompts:
                ids = rt.retriever.for_prompt(project.namespace, q.text, audit=False,
                                              read_files=read).records  # fmt: skip
                injected += len(ids)
                gone += sum(rid in gone_truth for rid in ids)
                found += bool(q.gold & set(ids))
            out[label] = {
                "injected": injected,
                "gone": gone,
                "share_gone": round(gone / injected, 4) if injected else 0.0,
                # Gold of a query can be gone too: a changelog entry describes work whose
                # files later moved; the check then leaves it out.
                "queries_with_gold_injected": round(found / len(project.queries), 4),
            }
        out["prompts"] = len(prompts)
        out["gold_gone_at_snapshot"] = round(
            sum(bool(q.gold & gone_truth) for q in project.queries) / len(project.queries), 4
        )
        return out
    finally:
        blobs.close()
        rt.close()


def run() -> dict[str, Any]:
    reason = _codemem.missing()
    if reason:
        return {"skipped": reason}
    names = [n for n in _codemem.PROJECTS if (MIRRORS / f"pallets+{n}" / "repo").is_dir()]
    names = [n for n in names if n in os.environ.get("WAKEMARK_CODEMEM_ONLY", n).split(",")]
    out: dict[str, Any] = {"load": os.getloadavg()}
    from wakemark.shared.config import Settings

    model = Settings.from_env().onnx_model_path  # found in the real home, before it moves
    home = os.environ.get("HOME")
    with tempfile.TemporaryDirectory() as tmp:
        os.environ["HOME"] = str(Path(tmp) / "user")  # only the user's own files are read
        (Path(tmp) / "user").mkdir()
        try:
            for name in names:
                out[name] = _project(name, Path(tmp), model)
        finally:
            if home is not None:
                os.environ["HOME"] = home
    return out

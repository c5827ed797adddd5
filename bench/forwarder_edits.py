"""What hashing each edited file costs the forwarder (``X-Wakemark-Edited``).

The forwarder of this tree (**new**) against the one before it hashed edits (**old**,
commit ``BEFORE``, taken with ``git show``), each run as installed
(``<python> -S -E -s hook.py claude-code`` with the payload on stdin), paired run by run
(old, new, old, new …) after warm-ups, the whole process timed from outside. No server
listens (the connect is refused at once), so the figures are the forwarder's own work.
Payloads, in a project root of their own:

- **edit**: Claude Code's PostToolUse of an ``Edit`` of a file of about 8.7 KB: the new
  forwarder reads and hashes it;
- **edit_1mib**: the same of a file of 1 MiB, the largest it hashes;
- **command**: a PostToolUse of ``Bash`` (no file): the new forwarder only scans the
  payload for an edit tool's name.

Run alone: ``python -m bench forwarder_edits``.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any

from bench._stats import nearest_rank
from bench.hook import timed_run
from wakemark.services.agents.configs import forwarder_python

BEFORE = "a93e812"  # main before the forwarder hashed edited files
PAIRS = 60
WARMUPS = 3
ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "tests" / "fixtures" / "hooks" / "claude-code"
TREE_FILES = (
    "wakemark/services/forwarder/hook.py",
    "wakemark/services/forwarder/forward.py",  # not in BEFORE: hook.py was all of it
    "wakemark/shared/project.py",
)


def _tree(where: Path, commit: str | None) -> str:
    """The forwarder and the project detection it loads by path, as of ``commit`` (None:
    this working tree); returns the hook's path."""
    for rel in TREE_FILES:
        target = where / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        if commit is None:
            shutil.copy(ROOT / rel, target)
        else:
            shown = subprocess.run(["git", "-C", str(ROOT), "show", f"{commit}:{rel}"],
                                   capture_output=True)  # fmt: skip
            if shown.returncode == 0:
                target.write_bytes(shown.stdout)
    return str(where / TREE_FILES[0])


def _payloads(project: Path) -> dict[str, bytes]:
    (project / ".git").mkdir(parents=True)
    (project / "shop").mkdir()
    line = b"        return (total * (1 - rate)).quantize(Decimal('0.01'))  # rounding\n"
    (project / "shop" / "cart.py").write_bytes(line * (8700 // len(line)))
    (project / "shop" / "big.py").write_bytes(b"x" * (1 << 20))
    edit = json.loads((FIXTURES / "PostToolUse.edit.json").read_text())
    edit["cwd"] = str(project)
    out = {}
    for name, file in (("edit", "cart.py"), ("edit_1mib", "big.py")):
        path = str(project / "shop" / file)
        payload = {**edit, "tool_input": {**edit["tool_input"], "file_path": path}}
        payload["tool_response"] = {**edit["tool_response"], "filePath": path}
        out[name] = json.dumps(payload).encode()
    command = json.loads((FIXTURES / "PostToolUse.json").read_text())
    command["cwd"] = str(project)
    out["command"] = json.dumps(command).encode()
    return out


def _summary(values: list[float], digits: int = 4) -> dict[str, float]:
    return {
        "min": round(min(values), digits),
        "median": round(nearest_rank(values, 0.5), digits),
        "max": round(max(values), digits),
    }


def run(pairs: int = PAIRS) -> dict[str, Any]:
    work = Path(tempfile.mkdtemp(prefix="wakemark-fwd-"))
    try:
        python = forwarder_python()
        hooks = {"old": _tree(work / "old", BEFORE), "new": _tree(work / "new", None)}
        project = work / "project"
        payloads = _payloads(project)
        env = {k: v for k, v in os.environ.items() if not k.startswith(("WAKEMARK_", "CLAUDE_"))}
        env.update(WAKEMARK_HOME=str(work / "home"), WAKEMARK_PORT="9", WAKEMARK_TOKEN="t",
                   CLAUDE_PROJECT_DIR=str(project))  # fmt: skip
        load_before = os.getloadavg()
        result: dict[str, Any] = {}
        for name, payload in payloads.items():
            samples: dict[str, list[tuple[float, float]]] = {"old": [], "new": []}
            for i in range(WARMUPS + pairs):
                for which in ("old", "new"):
                    taken = timed_run([python, "-S", "-E", "-s", hooks[which], "claude-code"],
                                 payload, env)  # fmt: skip
                    if i >= WARMUPS:
                        samples[which].append(taken)
            old, new = samples["old"], samples["new"]
            result[name] = {
                "old_cpu_s": _summary([c for _, c in old]),
                "new_cpu_s": _summary([c for _, c in new]),
                "old_wall_s": _summary([w for w, _ in old]),
                "new_wall_s": _summary([w for w, _ in new]),
                "new_over_old_cpu": _summary(
                    [n[1] / o[1] for o, n in zip(old, new, strict=True) if o[1] > 0]
                ),
                "new_over_old_wall": _summary([n[0] / o[0] for o, n in zip(old, new, strict=True)]),
            }
    finally:
        shutil.rmtree(work, ignore_errors=True)
    done = subprocess.run([python, "--version"], capture_output=True, text=True)
    result["config"] = {
        "pairs": pairs,
        "warmups": WARMUPS,
        "before": BEFORE,
        "python": f"{python} ({done.stdout.strip()})",
        "cpus": os.cpu_count(),
        "loadavg_before": [round(x, 2) for x in load_before],
        "loadavg_after": [round(x, 2) for x in os.getloadavg()],
    }
    return {"name": "forwarder_edits", **result}


def markdown(result: dict[str, Any]) -> str:
    cfg = result["config"]
    lines = [
        "# forwarder_edits",
        "",
        "What hashing each edited file (`X-Wakemark-Edited`) costs the forwarder: this "
        f"tree's forwarder (new) against commit `{cfg['before']}`'s (old), "
        f"{cfg['pairs']} paired runs (old, new, …) after {cfg['warmups']} warm-ups per "
        "payload, each run as installed (`<python> -S -E -s hook.py claude-code`, payload on "
        "stdin), no server listening: the forwarder's own work. Payloads: `edit` (an `Edit` "
        "of an 8.7 KB file, hashed by new), `edit_1mib` (a 1 MiB file, the largest hashed), "
        "`command` (a `Bash` PostToolUse: nothing to hash).",
        "",
        f"Python {cfg['python']}, {cfg['cpus']} CPUs shared, load average "
        f"{' / '.join(map(str, cfg['loadavg_before']))} before and "
        f"{' / '.join(map(str, cfg['loadavg_after']))} after.",
        "",
        "| payload | figure | min | median | max |",
        "|---|---|---|---|---|",
    ]
    for name in ("edit", "edit_1mib", "command"):
        for figure in ("old_cpu_s", "new_cpu_s", "old_wall_s", "new_wall_s",
                       "new_over_old_cpu", "new_over_old_wall"):  # fmt: skip
            s = result[name][figure]
            lines.append(f"| {name} | {figure} | {s['min']} | {s['median']} | {s['max']} |")
    return "\n".join(lines) + "\n"

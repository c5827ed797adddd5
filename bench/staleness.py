"""What the code check costs a prompt (``shared/retrieval/staleness.py``), SQLite.

A synthetic project of ``FILES`` source files under a temporary home, ``RECORDS`` records
each citing one to three of them (anchors captured as extraction does). Per prompt, in
the same run: the check alone on the prompt's candidates the first time the process sees
them (cold: their anchors read from the database, their files not yet hashed by this
process) and once more (warm: a ``stat`` per file), as the prompt path runs it (the
files' (mtime, size) at capture vouch for their hash; reads bounded by
``PROMPT_READ_BYTES``) and as before that (``before_*``: every file read and hashed the
first time, no bound), the two interleaved; the same cold check after every file's
mtime moved (as a ``git checkout`` leaves them), with the share of candidates left
unchecked by the bound; then, on fresh prompts, the gated prompt retrieval with the
check (``read_files=True``) and without, interleaved.
Run: ``python -m bench staleness``.
"""

from __future__ import annotations

import os
import random
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

FILES = 300
RECORDS = 5000
PROMPTS = 400
WORDS = [
    "cache",
    "invoice",
    "address",
    "billing",
    "retry",
    "token",
    "parser",
    "session",
    "worker",
    "queue",
]


TIMES = ("now_cold", "now_warm", "before_cold", "before_warm", "now_touched", "before_touched")


class _Unstat:
    """The anchors as stored before they kept each file's (mtime, size)."""

    def __init__(self, storage: Any) -> None:
        self._storage = storage

    def get_anchors(self, record_ids: Any) -> Any:
        from dataclasses import replace

        found = self._storage.get_anchors(record_ids)
        return {
            rid: replace(a, files=tuple(replace(f, mtime_ns=None, size=None) for f in a.files))
            for rid, a in found.items()
        }


def _p(values: list[float], q: float) -> float:
    return statistics.quantiles(values, n=100)[q - 1] if len(values) > 1 else values[0]


def run() -> dict[str, Any]:
    from wakemark.shared.config import Settings, prepare_home
    from wakemark.shared.models import MemoryRecord
    from wakemark.shared.retrieval.retriever import PROMPT_CANDIDATES
    from wakemark.shared.retrieval.staleness import PROMPT_READ_BYTES, CodeCheck, capture
    from wakemark.shared.runtime import Runtime
    from wakemark.shared.storage import migrate

    rng = random.Random(7)
    with tempfile.TemporaryDirectory() as tmp:
        home = Path(tmp) / "user"
        root = home / "proj"
        (root / "src").mkdir(parents=True)
        os.environ["HOME"] = str(home)  # only the user's own files are read
        names = [f"src/mod_{i}.py" for i in range(FILES)]
        for i, name in enumerate(names):
            body = "".join(f"def {w}_{i}_{j}(x):\n    return x\n" for j, w in enumerate(WORDS))
            (root / name).write_text(body * 20)
        settings = Settings(home=Path(tmp) / "wm", embedder="off")
        prepare_home(settings)
        migrate(settings)
        rt = Runtime.build(settings)
        ns = "/actor/b/project/p/"
        try:
            for start in range(0, RECORDS, 500):
                with rt.storage.transaction() as tx:
                    for n in range(start, start + 500):
                        i, w = rng.randrange(FILES), rng.choice(WORDS)
                        cited = [names[i], *rng.sample(names, rng.randrange(3))]
                        record = MemoryRecord(
                            namespace=ns,
                            title=f"{w}_{i}_{WORDS.index(w)} {w} handling {n}",
                            summary=f"The {w} path in {names[i]} returns early for {n}.",
                            files_touched=cited,
                        )
                        tx.put_memory_record(record)
                        anchors = capture(record, str(root), readable=True)
                        assert anchors is not None
                        tx.put_anchors(anchors)
            prompts = [
                f"why does {w}_{i}_{WORDS.index(w)} handle the {w} that way?"
                for i, w in ((rng.randrange(FILES), rng.choice(WORDS)) for _ in range(PROMPTS))
            ]
            retriever = rt.retriever
            with_check, without = [], []
            times: dict[str, list[float]] = {k: [] for k in TIMES}
            cpu: dict[str, list[float]] = {k: [] for k in TIMES}  # this thread's CPU: less noise
            unchecked = [0, 0]
            checks = {"now": CodeCheck(rt.storage), "before": CodeCheck(_Unstat(rt.storage))}
            budget = {"now": PROMPT_READ_BYTES, "before": None}
            ids_of = [
                [h.record.record_id for h in retriever.search(ns, p, PROMPT_CANDIDATES).items]
                for p in prompts[: PROMPTS // 2]
            ]
            for n, ids in enumerate(ids_of):
                for how in ("now", "before") if n % 2 else ("before", "now"):
                    for when in ("cold", "warm"):
                        t0, c0 = time.perf_counter(), time.thread_time()
                        checks[how].verdicts(ids, read_budget=budget[how])
                        times[f"{how}_{when}"].append((time.perf_counter() - t0) * 1e3)
                        cpu[f"{how}_{when}"].append((time.thread_time() - c0) * 1e3)
            for name in names:  # every file rewritten as it was: only its mtime moves
                info = (root / name).stat()
                os.utime(root / name, ns=(info.st_atime_ns, info.st_mtime_ns + 10**9))
            checks = {"now": CodeCheck(rt.storage), "before": CodeCheck(_Unstat(rt.storage))}
            for n, ids in enumerate(ids_of):
                for how in ("now", "before") if n % 2 else ("before", "now"):
                    t0, c0 = time.perf_counter(), time.thread_time()
                    found = checks[how].verdicts(ids, read_budget=budget[how])
                    times[f"{how}_touched"].append((time.perf_counter() - t0) * 1e3)
                    cpu[f"{how}_touched"].append((time.thread_time() - c0) * 1e3)
                    if how == "now":
                        unchecked[0] += sum(v.state == "unchecked" for v in found.values())
                        unchecked[1] += len(found)
                        checks["now"].drain()  # as between two prompts, and out of the other's time
            for n, prompt in enumerate(prompts[PROMPTS // 2 :]):
                order = (True, False) if n % 2 else (False, True)
                for read in order:
                    t0 = time.perf_counter()
                    retriever.for_prompt(ns, prompt, audit=False, read_files=read)
                    (with_check if read else without).append((time.perf_counter() - t0) * 1e3)
        finally:
            rt.close()
    p95 = {k: _p(v, 95) for k, v in (("with", with_check), ("without", without))}
    return {
        "records": RECORDS,
        "files": FILES,
        "prompts": PROMPTS,
        "load": os.getloadavg(),
        **{f"check_{k}_ms": {"p50": _p(v, 50), "p95": _p(v, 95)} for k, v in times.items()},
        **{f"check_{k}_cpu_ms": {"p50": _p(v, 50), "p95": _p(v, 95)} for k, v in cpu.items()},
        "touched_share_unchecked": unchecked[0] / max(unchecked[1], 1),
        "prompt_with_check_ms": {"p50": _p(with_check, 50), "p95": p95["with"]},
        "prompt_without_check_ms": {"p50": _p(without, 50), "p95": p95["without"]},
        "p95_ratio_with_over_without": p95["with"] / p95["without"],
    }

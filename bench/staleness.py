"""What the code check costs a prompt (``shared/retrieval/staleness.py``), SQLite.

A synthetic project of ``FILES`` source files under a temporary home, ``RECORDS`` records
each citing one to three of them (anchors captured as extraction does). Per prompt, in
the same run: the check alone on the prompt's candidates the first time the process sees
them (cold: their anchors read from the database, their files not yet hashed by this
process) and once more (warm: a ``stat`` per file); then, on fresh prompts, the gated
prompt retrieval with the check (``read_files=True``) and without, interleaved.
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


def _p(values: list[float], q: float) -> float:
    return statistics.quantiles(values, n=100)[q - 1] if len(values) > 1 else values[0]


def run() -> dict[str, Any]:
    from wakemark.shared.config import Settings, prepare_home
    from wakemark.shared.models import MemoryRecord
    from wakemark.shared.retrieval.retriever import PROMPT_CANDIDATES
    from wakemark.shared.retrieval.staleness import capture
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
            with_check, without, cold, warm = [], [], [], []
            for prompt in prompts[: PROMPTS // 2]:
                hits = retriever.search(ns, prompt, PROMPT_CANDIDATES).items
                ids = [h.record.record_id for h in hits]
                for times in (cold, warm):
                    t0 = time.perf_counter()
                    retriever.code_verdicts(ids)
                    times.append((time.perf_counter() - t0) * 1e3)
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
        "check_cold_ms": {"p50": _p(cold, 50), "p95": _p(cold, 95)},
        "check_warm_ms": {"p50": _p(warm, 50), "p95": _p(warm, 95)},
        "prompt_with_check_ms": {"p50": _p(with_check, 50), "p95": p95["with"]},
        "prompt_without_check_ms": {"p50": _p(without, 50), "p95": p95["without"]},
        "p95_ratio_with_over_without": p95["with"] / p95["without"],
    }

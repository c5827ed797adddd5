"""The hook forwarder (``hook.py``): what agents run on every prompt and tool use.

A room of its own because it must import nothing of the package (it runs as a bare
script, see its docstring); the packages that write it into agent configs or dispatch to
it import it, never the other way round.
"""

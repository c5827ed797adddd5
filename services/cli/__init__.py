"""The ``engram`` command."""

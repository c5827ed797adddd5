"""The ``wakemark`` command."""

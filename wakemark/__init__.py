"""wakemark: local-first persistent memory for AI coding agents.

The one import package of the distribution. Its parts live in the repository's
top-level folders and are linked in here: ``wakemark.shared`` (the library: storage,
jobs, retrieval, extraction), ``wakemark.services`` (API, CLI, MCP server, Celery
worker) and ``wakemark.migrations`` (the SQL files, package data).
"""

__version__ = "0.2.0"

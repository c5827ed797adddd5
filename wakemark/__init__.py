"""wakemark: local-first persistent memory for AI coding agents.

The one import package of the distribution, holding its real files (the repository's
top-level ``shared/``, ``services/`` and ``migrations/`` are links into it):
``wakemark.shared`` (the library: storage, jobs, retrieval, extraction),
``wakemark.services`` (API, CLI, MCP server, Celery worker) and ``wakemark.migrations``
(the SQL files, package data).
"""

__version__ = "0.2.0"

"""wakemark's domain: models, settings, storage, retrieval, jobs — shared by every service."""

from wakemark import __version__  # one version for /health, status, the viewer and MCP

__all__ = ["__version__"]

"""The MCP tests run in the hook tests' project folder and namespace."""

from tests.hooks.conftest import namespace, project_dir

__all__ = ["namespace", "project_dir"]

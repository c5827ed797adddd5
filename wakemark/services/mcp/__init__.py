"""wakemark's MCP server (stdio): memory tools for agents that prefer to pull."""

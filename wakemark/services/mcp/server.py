"""The stdio MCP server: tool listing, argument validation, and errors as tool results.

Stdout carries the protocol and nothing else; logs go to stderr and
``$WAKEMARK_HOME/logs/mcp.log``. No tool call can end the session: every failure,
including the API being down, comes back as an ``isError`` result.
"""

from __future__ import annotations

import logging
import logging.handlers
import os
import sys
from dataclasses import dataclass
from typing import Any

import anyio
import anyio.to_thread
import mcp_types as types
from jsonschema import Draft202012Validator
from jsonschema.exceptions import best_match
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel import Server
from mcp.server.stdio import stdio_server

from wakemark.services.mcp.client import ApiClient, ApiError, ApiUnavailable
from wakemark.services.mcp.schemas import TOOLS
from wakemark.services.mcp.tools import HANDLERS, Output, Scope, ToolFailure
from wakemark.shared import __version__

log = logging.getLogger("wakemark.mcp")
LOG_CAP = 1024 * 1024

INSTRUCTIONS = (
    "wakemark is this project's persistent memory of past coding sessions. Call `search` "
    "before re-investigating a problem, `get_records` for details, and `remember` to keep "
    "a decision or a hard-won fix for future sessions."
)


@dataclass(frozen=True)
class Wakemark:
    """What every tool call needs: the API client, the namespaces, the validators."""

    api: ApiClient
    scope: Scope
    validators: dict[str, Draft202012Validator]

    @classmethod
    def build(cls, api: ApiClient, scope: Scope) -> Wakemark:
        validators = {name: Draft202012Validator(schema) for name, (_, schema, _) in TOOLS.items()}
        return cls(api, scope, validators)

    def list_tools(self) -> list[types.Tool]:
        return [
            types.Tool(
                name=name,
                description=description,
                input_schema=schema,
                annotations=types.ToolAnnotations(
                    read_only_hint=read_only,
                    destructive_hint=name == "forget",
                    idempotent_hint=name != "remember",
                    open_world_hint=False,
                ),
            )
            for name, (description, schema, read_only) in TOOLS.items()
        ]

    def call(self, name: str, arguments: dict[str, Any] | None) -> types.CallToolResult:
        """Run one tool; never raises."""
        args = arguments or {}
        try:
            if name not in HANDLERS:
                raise ToolFailure(f"unknown tool {name!r}; the tools are {', '.join(TOOLS)}")
            error = best_match(self.validators[name].iter_errors(args))
            if error is not None:
                where = "/".join(str(p) for p in error.absolute_path) or "arguments"
                raise ToolFailure(f"invalid arguments for {name}: {where}: {error.message}")
            return _result(HANDLERS[name](self.api, self.scope, args))
        except (ToolFailure, ApiUnavailable) as exc:
            log.info("tool %s failed: %s", name, exc)
            return _error(str(exc))
        except ApiError as exc:
            log.info("tool %s: API %s %s: %s", name, exc.status, exc.code, exc.message)
            return _error(f"wakemark API refused the call ({exc.status} {exc.code}): {exc.message}")
        except Exception as exc:  # a bug here must not end the agent's session
            log.exception("tool %s crashed", name)
            return _error(f"internal error in wakemark's {name} tool: {exc.__class__.__name__}")

    def server(self) -> Server[Any]:
        async def on_list_tools(
            ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None
        ) -> types.ListToolsResult:
            return types.ListToolsResult(tools=self.list_tools())

        async def on_call_tool(
            ctx: ServerRequestContext[Any], params: types.CallToolRequestParams
        ) -> types.CallToolResult:
            # Blocking HTTP runs in a worker thread so the session keeps answering pings.
            return await anyio.to_thread.run_sync(self.call, params.name, params.arguments)

        return Server(
            "wakemark",
            version=__version__,
            instructions=INSTRUCTIONS,
            on_list_tools=on_list_tools,
            on_call_tool=on_call_tool,
        )


def _result(output: Output) -> types.CallToolResult:
    return types.CallToolResult(
        content=[types.TextContent(type="text", text=output.text)],
        structured_content=output.data,
    )


def _error(message: str) -> types.CallToolResult:
    return types.CallToolResult(
        content=[types.TextContent(type="text", text=message)], is_error=True
    )


def scope_for(project_dir: str | None = None) -> Scope:
    """The namespace of the project holding ``project_dir`` (default: as the hooks see it)."""
    from wakemark.shared import project

    start = project_dir or project.agent_start_dir()
    actor = project.actor()
    return Scope(namespace=project.namespace(start, actor), actor_prefix=f"/actor/{actor}/")


def setup_logging(log_dir: str, level: str = "info") -> None:
    handlers: list[logging.Handler] = [logging.StreamHandler()]  # stderr
    try:
        os.makedirs(log_dir, mode=0o700, exist_ok=True)
        handlers.append(
            logging.handlers.RotatingFileHandler(
                os.path.join(log_dir, "mcp.log"), maxBytes=LOG_CAP, backupCount=1
            )
        )
    except OSError as exc:  # an unwritable home must not stop the tools
        print(f"wakemark mcp: no log file in {log_dir}: {exc}", file=sys.stderr)
    logging.basicConfig(
        level=level.upper(),
        format="%(asctime)s %(name)s %(levelname)s %(message)s",
        handlers=handlers,
        force=True,
    )


def serve(wakemark: Wakemark) -> None:
    server = wakemark.server()

    async def main() -> None:
        async with stdio_server() as (read_stream, write_stream):
            await server.run(read_stream, write_stream, server.create_initialization_options())

    log.info("wakemark mcp: namespace %s, API %s", wakemark.scope.namespace, wakemark.api.base_url)
    anyio.run(main)

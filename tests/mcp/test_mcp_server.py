"""`wakemark mcp` end to end: a real MCP client session (the SDK's stdio client spawning
`wakemark mcp`) against the real API served over HTTP on a free port."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tomllib
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import mcp_types as types
import pytest
from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client

from tests.conftest import free_port
from tests.hooks.conftest import ACTOR
from tests.served import serving
from wakemark.services.api.security import ensure_token
from wakemark.services.mcp.schemas import TOOLS
from wakemark.shared import tokens
from wakemark.shared.config import Settings
from wakemark.shared.models import MemoryRecord
from wakemark.shared.runtime import Runtime

pytestmark = pytest.mark.slow  # every test here starts a wakemark process

WAKEMARK = str(Path(sys.executable).with_name("wakemark"))


@dataclass
class Served:
    """A running API: its port, token and runtime (to look behind the API's back)."""

    port: int
    token: str
    runtime: Runtime
    home: Path


@pytest.fixture
def served(backend_settings: Settings) -> Iterator[Served]:
    port = free_port()
    settings = backend_settings.replace(port=port)
    runtime = Runtime.build(settings)
    try:
        with serving(runtime, port, threaded=True):
            yield Served(port, ensure_token(settings), runtime, settings.home)
    finally:
        runtime.close()


def mcp_env(home: Path, port: int, token: str | None = None) -> dict[str, str]:
    env = {"WAKEMARK_HOME": str(home), "WAKEMARK_PORT": str(port), "WAKEMARK_ACTOR": ACTOR}
    env["HF_HUB_OFFLINE"] = "1"
    if token is not None:
        env["WAKEMARK_TOKEN"] = token
    return env


@asynccontextmanager
async def mcp_session(env: dict[str, str], cwd: Path, errlog: Path) -> AsyncIterator[ClientSession]:
    """A real MCP session with a spawned `wakemark mcp` (stderr captured to ``errlog``)."""
    params = StdioServerParameters(command=WAKEMARK, args=["mcp"], env=env, cwd=str(cwd))
    with errlog.open("a") as err:
        async with (
            stdio_client(params, errlog=err) as (read, write),
            ClientSession(read, write) as session,
        ):
            await session.initialize()
            yield session


TOOL_NAMES = {"search", "timeline", "get_records", "remember", "forget", "pin"}


def run(test: Any) -> None:
    anyio.run(test)


def text(result: types.CallToolResult) -> str:
    return "\n".join(c.text for c in result.content if isinstance(c, types.TextContent))


async def ok(session: ClientSession, name: str, args: dict[str, Any]) -> dict[str, Any]:
    result = await session.call_tool(name, args)
    assert not result.is_error, text(result)
    assert isinstance(result.structured_content, dict)
    return result.structured_content


async def failed(session: ClientSession, name: str, args: dict[str, Any]) -> str:
    result = await session.call_tool(name, args)
    assert result.is_error, text(result)
    return text(result)


def test_lists_the_tools_with_strict_schemas(served: Served, project_dir: Path) -> None:
    async def main() -> None:
        async with mcp_session(
            mcp_env(served.home, served.port), project_dir, project_dir.parent / "err.log"
        ) as session:
            tools = {t.name: t for t in (await session.list_tools()).tools}
            assert set(tools) == TOOL_NAMES
            for tool in tools.values():
                schema = tool.input_schema
                assert schema["type"] == "object"
                assert schema["additionalProperties"] is False
                assert set(schema["required"]) <= set(schema["properties"])
                assert tool.description and len(tool.description) > 40
            assert tools["search"].input_schema["required"] == ["query"]
            assert tools["search"].input_schema["properties"]["limit"]["maximum"] == 50
            assert tools["pin"].input_schema["required"] == ["record_id", "pinned"]
            assert tools["forget"].annotations and tools["forget"].annotations.destructive_hint
            assert tools["search"].annotations and tools["search"].annotations.read_only_hint

    run(main)


def test_remember_search_get_timeline_pin_forget(
    served: Served, project_dir: Path, namespace: str
) -> None:
    async def main() -> None:
        async with mcp_session(
            mcp_env(served.home, served.port), project_dir / "src", project_dir / "err.log"
        ) as s:
            ids = []
            for i, title in enumerate(["Pick the queue", "Kafka retention fix", "Tidy logs"]):
                stored = await ok(
                    s,
                    "remember",
                    {
                        "title": title,
                        "summary": f"step {i}: kafka retention <private>hunter2</private> set",
                        "facts": [f"fact {i}"],
                        "concepts": ["kafka"],
                        "files": [f"src/f{i}.py"],
                        "type": "decision",
                    },
                )
                assert stored["namespace"] == namespace  # detected from cwd's project root
                ids.append(stored["record_id"])

            found = await ok(s, "search", {"query": "retention fix", "limit": 5})
            assert found["namespace"] == namespace
            hit = next(h for h in found["items"] if h["id"] == ids[1])
            assert hit["title"] == "Kafka retention fix"
            assert hit["type"] == "decision"
            assert hit["match_source"] in {"fts", "semantic", "hybrid"}
            assert len(hit["date"]) == 10 and "[REDACTED]" in hit["summary"]
            assert 0 < hit["relevance"] <= 1
            result = await s.call_tool("search", {"query": "retention fix"})
            assert ids[1] in text(result) and "Kafka retention fix" in text(result)
            assert f"relevance {hit['relevance']}" in text(result)
            strict = await ok(s, "search", {"query": "retention fix", "min_relevance": 1})
            assert strict["items"] == []
            typed = await ok(s, "search", {"query": "retention", "type": "bugfix"})
            assert typed["items"] == []

            full = await ok(s, "get_records", {"ids": [ids[1], "mr_" + "0" * 26]})
            (record,) = full["records"]
            assert record["facts"] == ["fact 1"] and record["files_touched"] == ["src/f1.py"]
            assert record["strategy"] == "manual" and "hunter2" not in str(record)
            assert full["not_found"] == ["mr_" + "0" * 26]
            result = await s.call_tool("get_records", {"ids": [ids[1]]})
            assert "Facts:" in text(result) and "Provenance: manual" in text(result)

            around = await ok(s, "timeline", {"record_id": ids[1], "before": 1, "after": 1})
            assert [i["id"] for i in around["items"]] == ids

            assert (await ok(s, "pin", {"record_id": ids[0], "pinned": True}))["pinned"] is True
            assert served.runtime.storage.get_memory_record(ids[0]).pinned  # type: ignore[union-attr]
            assert (await ok(s, "pin", {"record_id": ids[0], "pinned": False}))["pinned"] is False

            assert (await ok(s, "forget", {"record_id": ids[1]}))["deleted"] is True
            assert served.runtime.storage.get_memory_record(ids[1]) is None
            found = await ok(s, "search", {"query": "retention fix"})
            assert ids[1] not in [h["id"] for h in found["items"]]

            # By query: the matches first, deleted only when confirmed.
            listed = await ok(s, "forget", {"query": "queue"})
            matched = [m["id"] for m in listed["matches"]]
            assert listed["deleted"] == 0 and matched == [ids[0]]
            assert served.runtime.storage.get_memory_record(ids[0]) is not None
            gone = await ok(s, "forget", {"query": "queue", "confirm": True})
            assert gone["deleted"] == len(matched)
            assert all(served.runtime.storage.get_memory_record(i) is None for i in matched)

            # Unknown ids: an actionable error, and the session carries on.
            message = await failed(s, "forget", {"record_id": ids[1]})
            assert f"no memory record {ids[1]}" in message and "search" in message
            assert "no memory record" in await failed(
                s, "pin", {"record_id": ids[1], "pinned": True}
            )
            assert "no memory record" in await failed(s, "timeline", {"record_id": ids[1]})
            assert (await ok(s, "search", {"query": "kafka"}))["items"]

        log = (served.home / "logs" / "mcp.log").read_text()
        assert namespace in log and "hunter2" not in log

    run(main)


def test_all_projects_widens_to_the_actor(
    served: Served, project_dir: Path, namespace: str
) -> None:
    other = f"/actor/{ACTOR}/project/elsewhere/"
    stranger = "/actor/mallory/project/elsewhere/"
    for ns in (other, stranger):
        served.runtime.storage.put_memory_record(
            MemoryRecord(namespace=ns, title="Zebra migration plan", summary="zebra")
        )

    async def main() -> None:
        async with mcp_session(
            mcp_env(served.home, served.port), project_dir, project_dir / "err.log"
        ) as s:
            assert (await ok(s, "search", {"query": "zebra"}))["items"] == []
            wide = await ok(s, "search", {"query": "zebra", "all_projects": True})
            assert wide["namespace"] == f"/actor/{ACTOR}/"
            assert [h["title"] for h in wide["items"]] == ["Zebra migration plan"]

    run(main)


@pytest.mark.parametrize("token", ["bootstrap", "scoped"])
def test_record_ids_are_checked_against_the_servers_scope(
    served: Served, project_dir: Path, namespace: str, token: str
) -> None:
    """Whatever its token reaches (the bootstrap token: every namespace; a scoped one: the
    actor's), a record id from outside the MCP server's scope is missing to its tools.
    Reads reach the actor's other projects (as ``all_projects`` search does), changes
    only this project."""
    secret = None
    if token == "scoped":
        _, secret = tokens.create(
            served.runtime.storage, actor=ACTOR, project=None, read_only=False, expires=None,
            name="mcp", who="test",
        )  # fmt: skip
    ids = {}
    for name, ns in {"here": namespace, "mine": f"/actor/{ACTOR}/project/elsewhere/",
                     "stranger": "/actor/mallory/project/elsewhere/"}.items():  # fmt: skip
        record = MemoryRecord(namespace=ns, title=f"Zebra plan {name}", summary="zebra")
        served.runtime.storage.put_memory_record(record)
        ids[name] = record.record_id

    async def main() -> None:
        async with mcp_session(
            mcp_env(served.home, served.port, secret), project_dir, project_dir / "err.log"
        ) as s:
            got = await ok(s, "get_records", {"ids": list(ids.values())})
            assert [r["record_id"] for r in got["records"]] == [ids["here"], ids["mine"]]
            assert got["not_found"] == [ids["stranger"]]
            assert "mallory" not in text(
                await s.call_tool("get_records", {"ids": [ids["stranger"]]})
            )
            assert "no memory record" in await failed(s, "timeline", {"record_id": ids["stranger"]})
            around = await ok(s, "timeline", {"record_id": ids["mine"]})
            assert ids["mine"] in [i["id"] for i in around["items"]]
            for other in ("mine", "stranger"):
                rid = ids[other]
                assert "no memory record" in await failed(s, "forget", {"record_id": rid})
                assert "no memory record" in await failed(
                    s, "pin", {"record_id": rid, "pinned": True}
                )
                kept = served.runtime.storage.get_memory_record(rid)
                assert kept is not None and not kept.pinned
            assert (await ok(s, "pin", {"record_id": ids["here"], "pinned": True}))["pinned"]
            assert (await ok(s, "forget", {"record_id": ids["here"]}))["deleted"] is True

    run(main)


def test_invalid_arguments_are_error_results(served: Served, project_dir: Path) -> None:
    bad: list[tuple[str, dict[str, Any], str]] = [
        ("search", {}, "'query' is a required property"),
        ("search", {"query": "x", "limit": 0}, "limit"),
        ("search", {"query": "x", "limit": 51}, "limit"),
        ("search", {"query": "x", "type": "poem"}, "type"),
        ("search", {"query": "x", "extra": 1}, "'extra' was unexpected"),
        ("search", {"query": "x", "min_relevance": 2}, "min_relevance"),
        ("timeline", {"record_id": "42"}, "record_id"),
        ("get_records", {"ids": []}, "ids"),
        ("remember", {"title": "", "summary": "s"}, "title"),
        ("remember", {"title": "t"}, "'summary' is a required property"),
        ("pin", {"record_id": "mr_" + "0" * 26, "pinned": "yes"}, "pinned"),
        ("nope", {}, "unknown tool"),
    ]

    async def main() -> None:
        async with mcp_session(
            mcp_env(served.home, served.port), project_dir, project_dir / "err.log"
        ) as s:
            for name, args, expected in bad:
                message = await failed(s, name, args)
                assert expected in message, (name, args, message)
            assert (await ok(s, "search", {"query": "anything"}))["items"] == []

    run(main)


def test_server_down_is_an_error_result_not_a_crash(tmp_path: Path, project_dir: Path) -> None:
    port = free_port()  # nobody listens here
    home = tmp_path / "home"

    async def main() -> None:
        async with mcp_session(mcp_env(home, port), project_dir, tmp_path / "err.log") as s:
            # No token file yet: says how to get one.
            assert "wakemark serve" in await failed(s, "search", {"query": "x"})
        async with mcp_session(mcp_env(home, port, token="t0k"), project_dir, tmp_path / "e") as s:
            for _ in range(2):  # the session survives the failure
                message = await failed(s, "search", {"query": "x"})
                assert message == (
                    f"wakemark server is not running at http://127.0.0.1:{port}: "
                    "start it with `wakemark serve`"
                )
            assert "not running" in await failed(s, "forget", {"record_id": "mr_" + "0" * 26})
            assert {t.name for t in (await s.list_tools()).tools} == TOOL_NAMES

    run(main)


def test_wrong_token_is_reported(served: Served, project_dir: Path) -> None:
    async def main() -> None:
        env = mcp_env(served.home, served.port, token="not-the-token")
        async with mcp_session(env, project_dir, project_dir / "err.log") as s:
            assert "rejected the token" in await failed(s, "search", {"query": "x"})

    run(main)


def test_every_declared_tool_has_a_handler() -> None:
    from wakemark.services.mcp.tools import HANDLERS

    assert set(TOOLS) == set(HANDLERS) == TOOL_NAMES


def _install(home: Path, agent: str, **env: str) -> None:
    base = {k: v for k, v in os.environ.items() if not k.startswith("WAKEMARK_")}
    base.update(HOME=str(home), **env)
    done = subprocess.run(
        [WAKEMARK, "install", agent], env=base, cwd=home, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr


def _registered(home: Path, agent: str) -> dict[str, Any]:
    """The `wakemark` MCP server entry `wakemark install <agent>` wrote."""
    if agent == "codex":
        config = tomllib.loads((home / ".codex" / "config.toml").read_text())
        return dict(config["mcp_servers"]["wakemark"])
    path = {
        "claude-code": home / ".claude.json",
        "kiro-cli": home / ".kiro" / "agents" / "wakemark.json",
        "gemini-cli": home / ".gemini" / "settings.json",
        "cursor": home / ".cursor" / "mcp.json",
    }[agent]
    return dict(json.loads(path.read_text())["mcpServers"]["wakemark"])


@pytest.mark.parametrize("agent", ["claude-code", "kiro-cli", "gemini-cli", "codex", "cursor"])
def test_install_registers_wakemark_mcp(tmp_path: Path, agent: str) -> None:
    home = tmp_path / "home"
    home.mkdir()
    _install(home, agent, WAKEMARK_HOME=str(home / ".wakemark"))  # all defaults
    server = _registered(home, agent)
    assert (server["command"], server["args"]) == (WAKEMARK, ["mcp"])
    assert "env" not in server

    other = tmp_path / "other"
    other.mkdir()
    _install(other, agent, WAKEMARK_HOME=str(tmp_path / "data"), WAKEMARK_PORT="38001")
    server = _registered(other, agent)
    assert server["env"] == {"WAKEMARK_PORT": "38001", "WAKEMARK_HOME": str(tmp_path / "data")}


def test_the_registered_server_works_with_a_scrubbed_environment(
    served: Served, tmp_path: Path, project_dir: Path
) -> None:
    # Codex starts MCP servers without the user's WAKEMARK_* variables: the entry must carry them.
    home = tmp_path / "user"
    home.mkdir()
    _install(home, "codex", WAKEMARK_HOME=str(served.home), WAKEMARK_PORT=str(served.port))
    server = _registered(home, "codex")
    params = StdioServerParameters(
        command=server["command"], args=server["args"], env=server["env"], cwd=str(project_dir)
    )

    async def main() -> None:
        with (tmp_path / "err.log").open("a") as err:
            async with (
                stdio_client(params, errlog=err) as (read, write),
                ClientSession(read, write) as s,
            ):
                await s.initialize()
                assert await ok(s, "remember", {"title": "Codex note", "summary": "works"})
                assert (await ok(s, "search", {"query": "codex"}))["items"]

    run(main)

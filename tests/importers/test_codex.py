"""``wakemark import --from codex``: real Codex rollouts replayed as events."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.importers.twice import import_twice, store_twice_extract_once
from tests.test_cli import _env
from tests.test_cli_transfer import _wakemark
from wakemark.services.agents.codex import exit_code
from wakemark.services.importers.codex import session_events
from wakemark.shared import project
from wakemark.shared.extraction.tools import parse_tool_use
from wakemark.shared.jobs import tasks
from wakemark.shared.runtime import Runtime

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "importers" / "codex"
DESKTOP = FIXTURES / "rollout-2026-02-23T20-34-25-019c8bfe-ec25-79e0-97d7-bda6a9c575ff.jsonl"
EXEC = FIXTURES / "rollout-2026-06-05T04-58-20-019e9625-802f-7e91-840a-cfe88d14117a.jsonl"
TUI = FIXTURES / "rollout-2026-05-11T11-26-55-019e1625-789d-76c0-80ab-3724b5ddb799.jsonl"


def events(path: Path) -> list:
    with path.open("rb") as lines:
        return list(session_events(lines, "me"))


def test_a_rollout_becomes_a_prompt_its_tool_calls_and_the_answer() -> None:
    evs = events(DESKTOP)
    assert [e.kind for e in evs] == ["prompt", *["tool_use"] * 5, "session_summary"]
    cwd = "/redacted/path/ea96e59ed9"  # not on this machine: the project is the path as given
    assert {e.namespace for e in evs} == {project.namespace_for("me", project.project_id(cwd))}
    assert {e.session_id for e in evs} == {"019c8bfe-ec25-79e0-97d7-bda6a9c575ff"}
    assert evs[0].body.model_dump()["content"] == "[REDACTED_MESSAGE len=98 sha=c002ff99]"
    assert evs[0].valid_time.isoformat() == "2026-02-23T19:34:26.099000+00:00"
    tools = [e.body.model_dump()["data"] for e in evs[1:6]]
    assert tools[0]["tool_name"] == "mcp__cloud-associates__search_workflows"
    assert tools[0]["tool_input"] == "[REDACTED_ARGUMENTS len=46 sha=4cb9a2fc]"
    assert tools[0]["tool_response"] == "[REDACTED_OUTPUT len=4215 sha=9a9d94de]"
    assert [t["tool_name"] for t in tools[2:]] == ["mcp__cloud-associates__execute_workflow"] * 3
    # The final answer, not the commentary messages between the tool calls.
    assert evs[-1].body.model_dump()["content"] == "[REDACTED_TEXT len=647 sha=10502814]"
    assert evs[0].source.surface == "codex" and evs[0].source.version == "0.104.0-alpha.1"
    assert [e.valid_time for e in evs] == sorted(e.valid_time for e in evs)
    assert [e.event_id for e in events(DESKTOP)] == [e.event_id for e in evs]


def test_injected_context_is_not_a_prompt() -> None:
    # codex exec 0.135: a developer message and an <environment_context> user message come
    # before the prompt; only the user_message event is what the user typed.
    evs = events(EXEC)
    assert [(e.kind, e.body.model_dump()["content"]) for e in evs] == [
        ("prompt", "[REDACTED_PROMPT]"),
        ("session_summary", "[REDACTED_ASSISTANT_TEXT]"),
    ]
    assert evs[0].source.version == "0.135.0"


def test_unified_exec_commands_become_one_tool_use_each_with_their_exit_code() -> None:
    # codex-tui 0.125, unredacted: every exec_command is still running after its 1 s
    # yield, so its output and exit code come in write_stdin polls and exec_command_end.
    evs = events(TUI)
    kinds = [e.kind for e in evs]
    assert kinds == ["prompt", "tool_use", "session_summary", "prompt", *["tool_use"] * 10,
                     "session_summary"]  # fmt: skip
    assert [e.body.model_dump()["content"] for e in evs if e.kind == "prompt"] == [
        "show tools", "let's update the defailt context compart to 90 in env var",
    ]  # fmt: skip
    assert {e.session_id for e in evs} == {"019e1625-789d-76c0-80ab-3724b5ddb799"}
    assert evs[0].source.version == "0.125.0"
    assert evs[0].source.project_path == "/Users/Sample_User/repos/codemie-ai/codemie-code"
    tools = [e.body.model_dump()["data"] for e in evs if e.kind == "tool_use"]
    # No write_stdin poll is a tool use of its own.
    assert [t["tool_name"] for t in tools] == [
        "exec_command", "exec_command", "update_plan", "exec_command", "apply_patch",
        "exec_command", "apply_patch", "apply_patch", "update_plan", "exec_command",
        "exec_command",
    ]  # fmt: skip
    uses = [parse_tool_use(e.body) for e in evs if e.kind == "tool_use"]
    test = "npm test -- --run src/agents/plugins/__tests__/codemie-code-reasoning.test.ts"
    shell = [(u.command, u.exit_code) for u in uses if u.kind == "shell"]
    assert shell[1] == ("git status --short", 0)  # its last poll, then its end event
    assert shell[3:] == [
        (f'{test} -t "Compaction Config"', 1),  # the red run of the test written first
        (f'{test} -t "Compaction Config"', 0),
        (test, 0),
    ]
    assert shell[0] == (
        "sed -n '1,180p' /Users/Sample_User/.codex/plugins/cache/openai-curated/superpowers/"
        "63976030/skills/using-superpowers/SKILL.md",
        0,
    )
    assert shell[2][0] is not None and shell[2][0].startswith("sed -n '220,420p' src/agents")
    assert [t.get("exit_code") for t in tools] == [0, 0, None, 0, 0, 1, 0, 0, None, 0, 0]
    # The failing run's output: the whole of it, from its end event.
    red = tools[5]["tool_response"]
    assert "1 failed" in red and "expected undefined to deeply equal" in red
    assert [u.files for u in uses if u.kind == "write"] == [
        [("edited", "src/agents/plugins/__tests__/codemie-code-reasoning.test.ts")],
        [("edited", "src/agents/plugins/codemie-code.plugin.ts")],
        [("edited", "src/agents/plugins/opencode/opencode.plugin.ts")],
    ]
    assert (
        evs[-1]
        .body.model_dump()["content"]
        .startswith("Implemented the default context compaction setting as `threshold: 0.9`")
    )
    assert [e.valid_time for e in evs] == sorted(e.valid_time for e in evs)
    assert [e.event_id for e in events(TUI)] == [e.event_id for e in evs]


def test_exit_codes_in_each_shape_codex_writes() -> None:
    assert (
        exit_code("Chunk ID: 922caa\nWall time: 0.0000 seconds\nProcess exited with code 1\n") == 1
    )
    assert exit_code('{"output":"Success.","metadata":{"exit_code":0,"duration_seconds":2.2}}') == 0
    assert exit_code("Exit code: 2\nWall time: 1.2 seconds\nOutput:\n") == 2
    assert exit_code("Chunk ID: a21e41\nProcess running with session ID 48230\n") is None
    assert exit_code('{"metadata": {"exit_code": true}}') is None


def test_replayed_rollouts_are_extracted_as_usual_and_import_once(runtime: Runtime) -> None:
    evs, rec = store_twice_extract_once(runtime, lambda: events(DESKTOP))
    # Provenance: the prompt, the answer and the tool calls that gave a fact.
    assert {evs[0].event_id, evs[-1].event_id} <= set(rec.source_event_ids)
    assert set(rec.source_event_ids) <= {e.event_id for e in evs}


@pytest.mark.slow
def test_the_command_imports_a_sessions_directory(tmp_path: Path) -> None:
    day = tmp_path / "sessions" / "2026" / "02" / "23"
    later = tmp_path / "sessions" / "2026" / "06" / "05"
    tui = tmp_path / "sessions" / "2026" / "05" / "11"
    for folder, log in ((day, DESKTOP), (later, EXEC), (tui, TUI)):
        folder.mkdir(parents=True)
        shutil.copy(log, folder / log.name)
    env = _env(tmp_path)
    first = b"3 session log(s), 24 event(s) in 3 project(s); stored 24 new"
    import_twice(env, "codex", str(tmp_path / "sessions"), first=first, again=b"stored 0 new")
    missing = _wakemark("import", "--from", "codex", str(tmp_path / "nothing"), env=env)
    assert missing.returncode == 2 and b"no session log" in missing.stderr


def test_an_unredacted_rollout_is_extracted_with_its_commands_and_files(runtime: Runtime) -> None:
    storage = runtime.storage
    evs = events(TUI)
    assert all(r.stored for r in storage.put_events(evs))
    pending = storage.pending_turns()
    assert len(pending) == 2  # each answer closed its turn
    records = [storage.get_memory_record(i) for i in tasks.extract_turns(runtime, pending)]
    edit = next(r for r in records if r is not None and r.files_touched)
    assert set(edit.files_touched) >= {
        "src/agents/plugins/codemie-code.plugin.ts",
        "src/agents/plugins/opencode/opencode.plugin.ts",
    }
    red = next(
        e for e in evs if e.kind == "tool_use" and e.body.model_dump()["data"].get("exit_code") == 1
    )
    assert red.event_id in edit.source_event_ids

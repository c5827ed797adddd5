"""``wakemark import --from codex``: real Codex rollouts replayed as events."""

from __future__ import annotations

import shutil
from pathlib import Path

from tests.test_cli import _env
from tests.test_cli_transfer import _wakemark
from wakemark.services.importers.codex import session_events
from wakemark.shared import project
from wakemark.shared.jobs import tasks
from wakemark.shared.runtime import Runtime

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "importers" / "codex"
DESKTOP = FIXTURES / "rollout-2026-02-23T20-34-25-019c8bfe-ec25-79e0-97d7-bda6a9c575ff.jsonl"
EXEC = FIXTURES / "rollout-2026-06-05T04-58-20-019e9625-802f-7e91-840a-cfe88d14117a.jsonl"


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


def test_replayed_rollouts_are_extracted_as_usual_and_import_once(runtime: Runtime) -> None:
    storage = runtime.storage
    evs = events(DESKTOP)
    assert all(r.stored for r in storage.put_events(evs))
    assert not any(r.stored for r in storage.put_events(events(DESKTOP)))
    pending = storage.pending_turns()
    assert len(pending) == 1  # the answer closed the turn
    written = tasks.extract_turns(runtime, pending)
    assert len(written) == 1
    rec = storage.get_memory_record(written[0])
    assert rec is not None and rec.namespace == evs[0].namespace
    # Provenance: the prompt, the answer and the tool calls that gave a fact.
    assert {evs[0].event_id, evs[-1].event_id} <= set(rec.source_event_ids)
    assert set(rec.source_event_ids) <= {e.event_id for e in evs}


def test_the_command_imports_a_sessions_directory(tmp_path: Path) -> None:
    day = tmp_path / "sessions" / "2026" / "02" / "23"
    later = tmp_path / "sessions" / "2026" / "06" / "05"
    day.mkdir(parents=True)
    later.mkdir(parents=True)
    shutil.copy(DESKTOP, day / DESKTOP.name)
    shutil.copy(EXEC, later / EXEC.name)
    env = _env(tmp_path)
    done = _wakemark("import", "--from", "codex", str(tmp_path / "sessions"), env=env)
    assert done.returncode == 0, done.stderr
    assert b"2 session log(s), 9 event(s) in 2 project(s); stored 9 new" in done.stderr
    again = _wakemark("import", "--from", "codex", str(tmp_path / "sessions"), env=env)
    assert b"stored 0 new" in again.stderr
    missing = _wakemark("import", "--from", "codex", str(tmp_path / "nothing"), env=env)
    assert missing.returncode == 2 and b"no session log" in missing.stderr

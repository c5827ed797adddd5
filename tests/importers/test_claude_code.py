"""``wakemark import --from claude-code``: a real transcript replayed as events."""

from __future__ import annotations

import shutil
from pathlib import Path

from tests.importers.twice import import_twice, store_twice_extract_once
from tests.test_cli import _env
from wakemark.services.importers.claude_code import session_events, transcripts
from wakemark.shared import project
from wakemark.shared.runtime import Runtime

FIXTURE = (
    Path(__file__).resolve().parents[1] / "fixtures" / "importers" / "claude-code-session.jsonl"
)
CWD = "/home/USER/projects/spotter-worktrees/spotter-dov"


def events() -> list:
    with FIXTURE.open("rb") as lines:
        return list(session_events(lines, "me"))


def test_a_transcript_becomes_prompt_tool_uses_and_an_answer() -> None:
    evs = events()
    assert [e.kind for e in evs] == ["prompt", *["tool_use"] * 4, "session_summary"]
    # The transcript's directory does not exist here: the project is that path as given.
    assert {e.namespace for e in evs} == {project.namespace_for("me", project.project_id(CWD))}
    assert {e.session_id for e in evs} == {"4d5611e5-241a-462a-8d15-5122611a9569"}
    assert evs[0].body.model_dump()["content"].startswith("Work on bead spotter-dov.")
    first_tool = evs[1].body.model_dump()["data"]
    assert first_tool["tool_name"] == "Bash"
    assert first_tool["tool_input"]["command"] == "bd show spotter-dov"
    assert "spotter-dov [EPIC]" in first_tool["tool_response"]["stdout"]
    assert evs[0].valid_time.isoformat() == "2026-02-12T16:02:25.284000+00:00"
    assert [e.valid_time for e in evs] == sorted(e.valid_time for e in evs)
    assert evs[0].source.surface == "claude-code" and evs[0].source.version == "2.1.39"
    assert [e.event_id for e in events()] == [e.event_id for e in evs]  # deterministic


def test_replayed_events_are_extracted_as_usual_and_import_once(runtime: Runtime) -> None:
    evs, rec = store_twice_extract_once(runtime, events)
    assert set(rec.source_event_ids) == {e.event_id for e in evs}


def test_the_command_imports_a_projects_directory(tmp_path: Path) -> None:
    projects = tmp_path / "projects" / "-home-USER-projects-spotter"
    (projects / "subagents").mkdir(parents=True)
    shutil.copy(FIXTURE, projects / "session.jsonl")
    shutil.copy(FIXTURE, projects / "subagents" / "agent-1.jsonl")  # left out
    assert transcripts(str(tmp_path / "projects")) == [str(projects / "session.jsonl")]
    env = _env(tmp_path)
    first = b"1 session log(s), 6 event(s) in 1 project(s); stored 6 new"
    import_twice(env, "claude-code", str(tmp_path / "projects"), first=first, again=b"stored 0 new")

"""The capture set's replay (``bench/_capture_set.py``): what the hooks post of a turn the
user interrupted, in two of the export formats it reads."""

from __future__ import annotations

import json

from bench import _capture_set


def _blocks2(*messages: tuple[str, object]) -> str:
    """A brightdigit/MistKit-style export: ``## User`` / ``## Assistant`` sections."""
    return "".join(
        f"## {role}\n*2025-09-26 23:28:{i:02d}*\n\n"
        + (body if isinstance(body, str) else json.dumps(body))
        + "\n\n"
        for i, (role, body) in enumerate(messages)
    )


def _kinds(turn: _capture_set.Turn) -> list[str]:
    return [e["kind"] for e in _capture_set.events(turn, "s")]


def test_an_interrupted_turn_has_no_answer_and_its_marker_is_no_turn() -> None:
    # The shape of MistKit 20250926-232711: a build the user stopped, then asked again.
    build = {"type": "tool_use", "id": "t1", "name": "Bash", "input": {"command": "swift build"}}
    stopped = {"type": "tool_result", "tool_use_id": "t1", "is_error": True,
               "content": "[Request interrupted by user for tool use]"}  # fmt: skip
    text = _blocks2(
        ("User", "Try to build the package"),
        ("Assistant", [{"type": "text", "text": "I'll build the package."}, build]),
        ("User", [stopped]),
        ("User", [{"type": "text", "text": "[Request interrupted by user for tool use]"}]),
        ("User", "build the MistKitExamples package"),
        ("Assistant", [{"type": "text", "text": "The build fails in MistDemo.swift."}]),
    )
    first, again = _capture_set.replay("r:p", text, "blocks2")
    # Numbered as before the marker stopped being a turn: the labels keep their keys.
    assert (first.turn_id, again.turn_id) == ("r:p#0", "r:p#2")
    assert _kinds(first) == ["prompt", "tool_use"]  # no Stop: no session_summary
    assert first.tools[0]["is_interrupt"] is True
    assert _kinds(again)[-1] == "session_summary"
    assert again.answer() == "The build fails in MistDemo.swift."


def test_what_the_agent_says_after_an_interrupt_is_the_answer() -> None:
    # Randroids-Dojo/UnrealFrog's transcripts: the agent going on after the interrupt
    # (a background task's notice), its tool uses listed under the marker.
    text = (
        "## User (04:15 UTC)\n\nFix the death puff\n\n"
        "## Assistant (04:15 UTC)\n\nLet me look.\n\n- **Used Read** on `Source/VFX.cpp`\n\n"
        "## User (04:15 UTC)\n\n[Request interrupted by user]\n\n- **Used Bash**: Build Game\n\n"
        "- **Used Edit** on `Source/VFX.cpp`\n\n"
        "## Assistant (04:16 UTC)\n\nThe puff now spawns above the ground.\n\n"
    )
    [turn] = _capture_set.replay("r:p", text, "prose")
    assert turn.answer() == "The puff now spawns above the ground."
    assert [t["tool_input"] for t in turn.tools] == [
        {"file_path": "Source/VFX.cpp"},
        {"description": "Build Game"},
        {"file_path": "Source/VFX.cpp"},
    ]


def test_tool_calls_listed_under_the_users_heading_are_the_agents() -> None:
    # UnrealFrog's transcript clean-up session: the agent's first tool call, made before
    # it said anything, is listed under the user's "4 messages?"; the hook posts the
    # message alone.
    text = (
        "## User (06:15 UTC)\n\n4 messages?\n\n"
        "- **Used Bash**: Sample 4-message transcripts to assess value\n\n"
        "## Assistant (06:15 UTC)\n\n82 transcripts, all subagent.\n\n"
    )
    [turn] = _capture_set.replay("r:p", text, "prose")
    assert turn.prompt == "4 messages?"
    assert turn.tools == [
        {"tool_name": "Bash",
         "tool_input": {"description": "Sample 4-message transcripts to assess value"}}
    ]  # fmt: skip
    assert turn.answer() == "82 transcripts, all subagent."

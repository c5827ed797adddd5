"""Clean capture on real Claude Code turns (``tests/fixtures/capture``) and the rules
behind it: no record from a turn without work, the user's request as the title, the
outcome as the summary."""

from __future__ import annotations

import json

import pytest

from wakemark.shared.config import Settings
from wakemark.shared.extraction import extract, extract_turn, joined_turns
from wakemark.shared.extraction.capture import (
    carries_on,
    clean_prompt,
    follows_up,
    is_retry,
    probe,
    reports,
    request_line,
    skip_reason,
    substance,
)

from .turns import FIXTURES, data, event, make_turn, text, turn_of

CAPTURED = [json.loads(line) for line in (FIXTURES / "capture" / "turns.jsonl").open()]


def _turn(captured: dict) -> object:
    return turn_of([{**event(e["kind"], e["body"], i), "valid_time": e["valid_time"]}
                    for i, e in enumerate(captured["events"])])  # fmt: skip


@pytest.mark.parametrize("captured", CAPTURED, ids=lambda c: f"{c['repo']}#{c['turn']}")
def test_real_turns(captured: dict, settings: Settings) -> None:
    turn = _turn(captured)
    out = extract_turn(turn, settings)
    if "skip" in captured["expect"]:
        assert out.records == [] and out.skipped == captured["expect"]["skip"]
        assert extract(turn, settings) == []
    else:
        [record] = out.records
        assert out.skipped is None
        assert record.title == captured["expect"]["title"]


def test_the_fixtures_cover_every_reason_and_work() -> None:
    reasons = {c["expect"].get("skip", "work") for c in CAPTURED}
    assert reasons == {"command", "meta", "trivial", "error", "work"}


def test_continue_after_a_long_task_is_work(settings: Settings) -> None:
    shell = {"type": "json", "data": {"tool_name": "Bash", "tool_input": {"command": "make"}}}
    turn = make_turn(("prompt", text("continue")), ("tool_use", shell),
                     ("session_summary", text("Built the release tarball in dist.")))  # fmt: skip
    [record] = extract_turn(turn, settings).records
    assert record.title == "Built the release tarball in dist."  # the outcome, not "continue"


def test_a_long_answer_to_yes_is_work_and_greetings_are_not() -> None:
    long_answer = "The plan has three phases. " * 30
    assert skip_reason("yes", long_answer, []) is None
    assert skip_reason("yes", "Great.", []) == "trivial"
    assert skip_reason("Hello!", long_answer, []) == "trivial"
    assert skip_reason("Reply with exactly: OK", "OK", []) == "trivial"
    assert skip_reason("why does the cart round twice?", "", []) is None


def test_an_empty_turn_is_skipped_as_empty(settings: Settings) -> None:
    blank = make_turn(("prompt", text("   ")), ("tool_use", {"type": "json", "data": {}}))
    out = extract_turn(blank, settings)
    assert out.records == [] and out.skipped == "empty"


def test_notes_are_never_skipped(settings: Settings) -> None:
    note = turn_of([event("note", {"type": "json", "data": {"title": "hello", "note": "ok"}})])
    out = extract_turn(note, settings)
    assert [r.title for r in out.records] == ["hello"] and out.skipped is None


@pytest.mark.parametrize(
    "prompt",
    [
        # Codex sends these as user messages (documented by parsers of its rollout files;
        # no real capture of them was found to commit).
        "<user_instructions>\nUse tabs.\n</user_instructions>",
        "<environment_context>\n  <cwd>/w</cwd>\n  <shell>zsh</shell>\n</environment_context>",
        "# AGENTS.md instructions for /w\n\n<INSTRUCTIONS>\nUse tabs.\n</INSTRUCTIONS>",
        "<turn_aborted>interrupted</turn_aborted>",
        "<system-reminder>The TodoWrite tool hasn't been used recently.</system-reminder>",
    ],
)
def test_injected_context_alone_is_meta(prompt: str) -> None:
    assert clean_prompt(prompt) == ""
    assert skip_reason(prompt, "", []) == "meta"


def test_gemini_referenced_files_are_not_the_request() -> None:
    prompt = (
        "explain @shop/cart.py\n--- Content from referenced files ---\n"
        "Content from @shop/cart.py:\n# totals\n--- End of content ---"
    )
    assert request_line(clean_prompt(prompt)) == "explain @shop/cart.py"


def test_request_line_skips_what_was_pasted() -> None:
    assert request_line("## Context\n\nfix the login redirect") == "fix the login redirect"
    assert request_line("```\nTraceback (most recent call last):\n```\nwhy?") == "why?"
    assert request_line("> quoted\n/home/dev/shop/cart.py\n- round half up") == "round half up"
    assert request_line("## Only a heading") == "Only a heading"


def test_substance_skips_interim_narration() -> None:
    assert substance("Perfect! All 161 tests pass. Let me commit.") == (
        "All 161 tests pass. Let me commit."
    )
    assert substance("Now let me summarise:\n\n---\n\n## Summary\n- done") == "## Summary\n- done"
    assert substance("Let me now commit the changes with an appropriate message.") == ""
    assert substance("No response requested.") == ""


def test_narration_gives_way_to_an_earlier_conclusion(settings: Settings) -> None:
    turn = make_turn(
        ("prompt", text("bump the version")),
        ("session_summary", text("Bumped the version to 0.3 in pyproject.toml.")),
        ("session_summary", text("Let me now commit the changes with an appropriate message.")),
    )
    [record] = extract_turn(turn, settings).records
    assert record.summary == "Bumped the version to 0.3 in pyproject.toml."


def _tool(name: str, tool_input: dict, **result: object) -> tuple[str, dict]:
    return (
        "tool_use",
        {"type": "json", "data": {"tool_name": name, "tool_input": tool_input, **result}},
    )


PROBE = _tool(
    "Bash", {"command": "echo wakemark-probe-7"}, tool_response="wakemark-probe-7", exit_code=0
)
READ = _tool("Read", {"file_path": "/home/dev/projects/shop/billing/address.py"})
EDIT_OUTSIDE = _tool("Edit", {"file_path": "/home/dev/.claude/plans/p.md", "new_string": "x"})
EDIT_IN_CWD = _tool(
    "Edit", {"file_path": "/tmp/scratch/x.py", "new_string": "x"}, cwd="/tmp/scratch"
)
EDIT_INSIDE = _tool(
    "Edit", {"file_path": "/home/dev/projects/shop/billing/address.py", "new_string": "x"}
)
FAILING = _tool(
    "Bash",
    {"command": "python -m invoicer render 42"},
    tool_response={"stderr": "Traceback (most recent call last):\nKeyError: 'shipping'"},
    exit_code=1,
)


@pytest.mark.parametrize(
    ("items", "reason"),
    [
        ((), "unanswered"),
        ((PROBE,), "unanswered"),
        ((READ,), "unanswered"),
        ((EDIT_OUTSIDE,), "unanswered"),
        ((EDIT_IN_CWD,), "unanswered"),
        ((PROBE, READ, ("session_summary", text("No response requested."))), "unanswered"),
        ((("session_summary", text("Done.")),), "trivial"),
        ((READ, ("session_summary", text("I've completed the task."))), "trivial"),
        ((("session_summary", text("OK")),), "trivial"),
    ],
    ids=[
        "bare",
        "probe",
        "read",
        "edit-outside",
        "edit-in-cwd",
        "placeholder",
        "done",
        "completed",
        "ok",
    ],
)
def test_turns_without_answer_or_outcome_are_skipped_with_their_reason(
    items: tuple, reason: str, settings: Settings
) -> None:
    turn = make_turn(("prompt", text("Fix the invoice PDF crash for customers.")), *items)
    out = extract_turn(turn, settings)
    assert out.records == [] and out.skipped == reason
    assert extract(turn, settings) == []


@pytest.mark.parametrize(
    ("items", "summary"),
    [
        ((EDIT_INSIDE,), "edited billing/address.py"),
        ((FAILING,), "KeyError: 'shipping'"),
        ((EDIT_INSIDE, ("session_summary", text("Done."))), "edited billing/address.py"),
    ],
    ids=["project-edit", "failing-command", "done-after-edit"],
)
def test_an_outcome_that_says_something_is_the_summary(
    items: tuple, summary: str, settings: Settings
) -> None:
    turn = make_turn(("prompt", text("Fix the invoice PDF crash for customers.")), *items)
    [record] = extract_turn(turn, settings).records
    assert summary in record.summary and "Done" not in record.summary
    assert record.title == "Fix the invoice PDF crash for customers."


def _run(command: str, exit_code: int = 0) -> tuple[str, dict]:
    return _tool("Bash", {"command": command}, tool_response="", exit_code=exit_code)


def test_a_run_that_looked_at_nothing_is_no_fact_of_a_record(settings: Settings) -> None:
    turn = make_turn(
        ("prompt", text("Fix the invoice PDF crash for customers.")),
        PROBE,
        _run("sleep 3"),
        _run("which uv && echo $PATH"),
        _run("ls -la billing/ 2>/dev/null | head -20"),  # says what the turn looked at
        EDIT_INSIDE,
        _run('echo "RATE = 0.2" > billing/tax.py'),  # writes a file
        _run("echo $INVOICER_HOME", 1),  # failed: kept, as a failed read is
        ("session_summary", text("The crash came from a missing billing address; fixed.")),
    )
    [record] = extract_turn(turn, settings).records
    assert [f for f in record.facts if f.startswith("ran `")] == [
        "ran `ls -la billing/ 2>/dev/null | head -20` → exit 0",
        'ran `echo "RATE = 0.2" > billing/tax.py` → exit 0',
        "ran `echo $INVOICER_HOME` → exit 1",
    ]


# Commands of the capture set's records (bench/_capture_set.py).
@pytest.mark.parametrize(
    ("command", "kind"),
    [
        ("sleep 60", "idle"),
        ("env | grep PATH", "look"),
        ('echo "ANTHROPIC_API_KEY set: $([ -n "$ANTHROPIC_API_KEY" ] && echo yes)"', "idle"),
        ('ls -la ~/.claude/meta/presets/ 2>/dev/null || echo "Directory does not exist"', "look"),
        ('find /home/chris -name ".mcp.json" -type f 2>/dev/null | head -20', "look"),
        ('grep -A 5 "NEO4J" docker-compose.yml 2>/dev/null || grep -A 5 "neo4j" x.yml', "look"),
        ('echo "ies" > /home/chris/dev/projects/codex/brain_explore/.active-project', None),
        ('find Sources -name "*.swift" -exec grep -l "public" {} \\;', None),
        ("env CI=1 ./Scripts/lint.sh | head -50", None),
        ("sleep 3 && curl -s http://localhost:8081/health", None),
        ("cat > /tmp/ies-test.html << 'EOF'", None),
        ("date-fns --version", None),
    ],
)
def test_a_probe_only_looks_around(command: str, kind: str | None) -> None:
    assert probe(command) == kind


# Real turns of public sessions (bench/_capture_set.py): brightdigit/MistKit, a build the
# user interrupted and asked again; Randroids-Dojo/UnrealFrog, a bug report the context
# ran out on, fixed after the continuation.
INTERRUPTED_BUILD = _tool(
    "Bash",
    {"command": "swift build", "description": "Build the Swift package"},
    error="[Request interrupted by user for tool use]",
    is_error=True,
)
RESPAWN_ANSWER = (
    "Game is launching. Here's what was wrong and what I fixed:\n\n**Bug**: After filling a "
    "home slot, `OnSpawningComplete` only called `Frog->Respawn()` if `bIsDead` was true. But "
    "when the frog successfully lands on a home slot, it's alive — so `Respawn()` was never "
    "called.\n\n**Fix**: `OnSpawningComplete` now always calls `Frog->Respawn()`."
)


def _session(*turns: tuple) -> list:
    """Turns of one session, each ``(offset_s, items…)``, their events in that order."""
    out = []
    for start, *items in turns:
        out.append(turn_of([event(k, b, start + i) for i, (k, b) in enumerate(items)]))
    return out


def test_a_real_interrupted_build_joins_its_re_ask(settings: Settings) -> None:
    first, again = _session(
        (0, ("prompt", text("Try to build the package")), INTERRUPTED_BUILD),
        (
            20,
            ("prompt", text("build the MistKitExamples package")),
            ("session_summary", text("The build failed because the `MistDemo.swift` file is "
                                     "still trying to call `testSignatureGeneration()` which "
                                     "no longer exists. I need to remove that call.")),
        ),
    )  # fmt: skip
    assert extract_turn(first, settings).skipped == "unanswered"
    assert joined_turns([first], again, settings.turn_idle_s) == [first]
    [record] = extract_turn(again, settings, [first]).records
    assert record.title == "build the MistKitExamples package"
    assert "earlier request: Try to build the package" in record.facts
    assert "testSignatureGeneration()" in record.summary


def test_a_retry_is_typed_by_the_request_it_retries(settings: Settings) -> None:
    question, retry = _session(
        (0, ("prompt", text("what does country_line return when the country is missing?"))),
        (
            5,
            ("prompt", text("try again")),
            ("session_summary", text("`country_line` returns an empty string when the address "
                                     "has no `country` key.")),
        ),
    )  # fmt: skip
    [record] = extract_turn(retry, settings, [question]).records
    assert record.observation_type == "discovery"  # a question answered, as asked


def test_a_real_bug_report_the_context_ran_out_on_joins_the_fix(settings: Settings) -> None:
    report, fix = _session(
        (0, ("prompt", text("Sound is working. But the level didn't restart or anything."))),
        (
            3000,  # after the idle window: the continuation is not a retry, but follows
            ("prompt", text("This session is being continued from a previous conversation.")),
            ("tool_use", {"type": "json", "data": {"tool_name": "Edit", "tool_input": {
                "file_path": "/home/dev/projects/shop/Private/Core/UnrealFrogGameMode.cpp",
                "new_string": "Frog->Respawn();"}}}),
            ("session_summary", text(RESPAWN_ANSWER)),
        ),
    )  # fmt: skip
    assert joined_turns([report], fix, 3600) == [report]
    assert joined_turns([report], fix, 600) == []  # too late, and not a retry
    [record] = extract_turn(fix, settings, [report]).records
    # What was found, not the lead-in "Here's what was wrong and what I fixed:".
    assert record.title.startswith("After filling a home slot, `OnSpawningComplete`")
    assert record.observation_type == "bugfix"
    assert any(f.startswith("earlier request: Sound is working.") for f in record.facts)


def test_a_reply_that_names_nothing_takes_the_answers_title(settings: Settings) -> None:
    # goodsch/brain_explore: "do whatever is optimal", answered with the status.
    turn = make_turn(
        ("prompt", text("do whatever is optimal")),
        ("session_summary", text("**Status: 23 books extracting in parallel**\n\nBooks in "
                                 "progress:\n- Behave (Sapolsky), Being You (Seth)")),
    )  # fmt: skip
    [record] = extract_turn(turn, settings).records
    assert record.title == "23 books extracting in parallel"


@pytest.mark.parametrize(
    ("prompt", "retry"),
    [("try again", True), ("Same error.", True), ("still failing", True),
     ("continue", True), ("fix the rounding in cart totals", False)],
)  # fmt: skip
def test_retry_prompts(prompt: str, retry: bool) -> None:
    assert is_retry(prompt) is retry


def _teammate(who: str, summary: str, body: str) -> dict:
    return text(f'<teammate-message teammate_id="{who}" summary="{summary}">\n{body}\n'
                "</teammate-message>")  # fmt: skip


def test_agent_team_shutdown_is_meta_and_a_teammate_report_is_work(settings: Settings) -> None:
    # Randroids-Dojo/UnrealFrog's agent teams, as their transcripts have them.
    update = ("tool_use", data({"tool_name": "TaskUpdate", "tool_input": {"taskId": "21"}}))
    send = ("tool_use", data({"tool_name": "SendMessage", "tool_input": {}}))
    shutdown = make_turn(
        ("prompt", _teammate("team-lead", "Sprint 1 complete, requesting shutdown",
                             "Sprint 1 is complete. All tasks done, retrospective logged. "
                             "Please shut down.")),
        update, send,
        ("session_summary", text("Understood. Sprint 1 complete. Shutting down.")),
    )  # fmt: skip
    acknowledged = make_turn(
        ("prompt", _teammate("engine-architect-2", "Acknowledging shutdown, signing off",
                             "Acknowledged. Scoring subsystem delivered, memory updated. "
                             "Shutting down now.")),
        ("session_summary", text("All teammates are done. Cleaning up the team.")),
    )  # fmt: skip
    assert extract_turn(shutdown, settings).skipped == "meta"
    assert extract_turn(acknowledged, settings).skipped == "meta"
    report = make_turn(
        ("prompt", _teammate("devops-engineer", "Build baseline done",
                             "Task 8 done: the build runs headless in CI, shutdown of the "
                             "editor process is now clean.")),
        ("tool_use", data({"tool_name": "Bash", "tool_input": {"command": "make build"}})),
        ("session_summary", text("Merged the headless build; CI runs it on every push.")),
    )  # fmt: skip
    out = extract_turn(report, settings)
    assert out.skipped is None and out.records
    assert not out.follows_up  # a teammate reports its own task: no session lineage


@pytest.mark.parametrize(
    ("prompt", "follows"),
    [("well now the button does nothing", True), ("yes", True),
     ("forward request failed: Post http://127.0.0.1:8081/session/start", True),
     ("b and d mostly", False), ("2", False), ("option a", False),
     ("# Session Handoff\n\nPrepare for ending this session", False),
     ("<command-name>/review</command-name>", False)],
)  # fmt: skip
def test_a_turn_follows_up_the_one_before_unless_it_starts_its_own(
    prompt: str, follows: bool, settings: Settings
) -> None:
    turn = make_turn(("prompt", text(prompt)), ("session_summary", text("Fixed the handler.")))
    assert follows_up(turn) is follows
    note = make_turn(("note", text("the invoice font is DejaVu Sans")))
    assert not follows_up(note)


@pytest.mark.parametrize(
    ("prompt", "carries"),
    [("nope", True), ("that works", True), ("spinning", True),
     ("Nope. Exact same problem. Death has already happened.", True),
     ("well now the button does nothing", True), ("lets move to phase 4", False),
     ("This session is being continued from a previous conversation that ran out of "
      "context.", False),
     ("b and d mostly", False), ("Let's add and commit", True),
     ("add, commit and push what we have so far", True),
     ("Update PR105-FEEDBACK-TODO.md and add, commit, and push", False),
     ("Commit and then do a retrospective.", False),
     ("Are any of those valauble?", True), ("Just move them below the Swift Testing "
      "migration", True), ("ok use the second one", True),
     ("Give me an example of one with 4 messages", True),
     ("No one with admin rights can log in since the upgrade", False),
     ("Write a parser that accepts one with a trailing comma and reports the rest", False),
     ("Delete those old transcripts and make sure we never create transcripts this short "
      "again going forward", False)],
)  # fmt: skip
def test_a_follow_up_naming_nothing_of_its_own_carries_on(
    prompt: str, carries: bool, settings: Settings
) -> None:
    turn = make_turn(("prompt", text(prompt)), ("session_summary", text("Fixed the handler.")))
    assert carries_on(turn) is carries


@pytest.mark.parametrize(
    ("request_", "reported"),
    [("well now the button does nothing", True), ("it isnt showing up", True),
     ("empty response from proxy", True),
     ("Error: null is not an object (evaluating 'l.session_id') v3.4.1", True),
     ("TypeError: null is not an object", True),
     ("it worked on docker but on ios it says forward request failed", True),
     ("main-1  | E 2025/12/01 23:32:32 package.go:493: parse theme.json failed", True),
     ('{"code": -1, "msg": "", "data": null, "ts": 1733011200}', True),
     ("Traceback (most recent call last):\n  File \"app.py\", line 3", True),
     ("fix the crash in the export", False), ("why does the upload fail?", False),
     ("can you check the error in the log", False),
     ("arent we working on the plugin here though", False),
     ("well yes, except for the major exception of the chat", False),
     ("https://github.com/example/agentic-systems", False),
     ("add a health check endpoint", False),
     ("I think the processor should only throw CloudKitError", False)],
)  # fmt: skip
def test_a_report_on_the_last_change_asks_for_nothing_of_its_own(
    request_: str, reported: bool
) -> None:
    assert reports(request_) is reported

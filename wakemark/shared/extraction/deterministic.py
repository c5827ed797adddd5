"""The default extractor: one memory record per closed turn, by rule, offline."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime

from wakemark.shared.extraction.capture import (
    answer_title,
    clean_prompt,
    command_of,
    in_project,
    is_ack_answer,
    is_placeholder,
    probe,
    request_line,
    says_little,
    substance,
    summary_of,
    tidy_title,
)
from wakemark.shared.extraction.classify import classify, concepts
from wakemark.shared.extraction.outcomes import is_test_command, parse_output
from wakemark.shared.extraction.text import (
    body_text,
    clip,
    collapse,
    first_sentence,
    trim_to_sentence,
)
from wakemark.shared.extraction.tools import ToolUse, parse_tool_use
from wakemark.shared.models import MemoryRecord, StoredEvent
from wakemark.shared.storage import Turn

MAX_FACTS = 30
MAX_FACT_CHARS = 300
MAX_SUMMARY = 4000
MAX_TITLE = 200
ANSWER_HEAD = 300  # characters of the answer whose words type a turn its prompt does not


class _Facts:
    def __init__(self) -> None:
        self.items: dict[str, None] = {}

    def add(self, fact: str | None) -> bool:
        if not fact:
            return False
        fact = clip(collapse(fact), MAX_FACT_CHARS)
        if fact and fact not in self.items and len(self.items) < MAX_FACTS:
            self.items[fact] = None
        return True


EARLIER = "earlier request: "


def extract_deterministic(
    turn: Turn, quality: str = "full", joined: Sequence[Turn] = ()
) -> MemoryRecord | None:
    """A record for the turn, or None when the turn holds nothing usable. ``joined`` are
    the session's unanswered turns just before it that this one continues: their
    requests are kept as facts (context, never the title), their tool uses as the turn's."""
    events = [e for e in turn.events if e.kind != "note"]
    prompt, answers, used = "", [], []
    facts, files = _Facts(), dict[str, None]()
    error_names: list[str] = []
    commands: list[str] = []
    test_runs: list[str] = []  # "pass" | "fail", in order
    earlier = [e for t in joined for e in t.events if e.kind in ("prompt", "tool_use")]
    roots = [e.source.project_path for e in [*earlier, *events] if e.source.project_path]
    edits = False
    context: list[str] = []
    for event in earlier:
        if event.kind == "prompt":
            asked = request_line(clean_prompt(body_text(event.body, role="user")))
            if asked and facts.add(EARLIER + first_sentence(asked, MAX_FACT_CHARS)):
                context.append(asked)
                used.append(event)
        elif _tool_facts(parse_tool_use(event.body), facts, files, roots, error_names, test_runs):
            used.append(event)
    for event in events:
        if event.kind == "prompt":
            text = body_text(event.body, role="user").strip()
            if text and not prompt:
                prompt = text
                used.append(event)
        elif event.kind == "session_summary":
            text = body_text(event.body, role="assistant").strip()
            if text:
                answers.append(text)
                used.append(event)
        elif event.kind == "tool_use":
            use = parse_tool_use(event.body)
            contributed = _tool_facts(use, facts, files, roots, error_names, test_runs)
            if use.command:
                commands.append(use.command.lower())
            edits = edits or any(verb != "read" for verb, _ in use.files)
            if contributed:
                used.append(event)
    asked, prompt = prompt, clean_prompt(prompt)
    answer = _outcome(answers)
    if summary_of(asked) and not answer:
        answer = prompt  # a teammate's message is its own outcome
    if not answer or is_ack_answer(answer):  # "Done." says less than what was done
        answer = "; ".join(f for f in facts.items if not f.startswith(("ran `", EARLIER)))
    asking = request_line(prompt)
    # "try again" after an unanswered request: that request says what the turn is.
    typed = context[-1] if context and (not asking or says_little(asking)) else prompt
    if asking and says_little(asking):  # "yes", "option a": what was done says more
        asking = first_sentence(answer_title(answer)) or asking
    title = summary_of(asked) or tidy_title(first_sentence(asking, MAX_TITLE)) or command_of(asked)
    title = title or first_sentence(answer_title(answer) or answer, MAX_TITLE)
    own = [f for f in facts.items if not f.startswith(EARLIER)]
    title = clip(title, MAX_TITLE) or next(iter(own), "")[:MAX_TITLE]
    if not title:
        return None
    fail_then_pass = "fail" in test_runs and "pass" in test_runs[test_runs.index("fail") :]
    if not events or (len(used) == 1 and prompt):
        kind = "discovery"  # a prompt and nothing else: what was asked is the memory
    else:
        head = clip(collapse(answer), ANSWER_HEAD)  # "Here's what was wrong and what I fixed:"
        kind = classify(typed, head, edits=edits, fail_then_pass=fail_then_pass)
    return MemoryRecord(
        namespace=turn.namespace,
        title=title,
        summary=trim_to_sentence(answer, MAX_SUMMARY),
        facts=list(facts.items),
        concepts=concepts("\n".join([prompt, *context]), answer, error_names, files, commands),
        files_touched=list(files)[:200],
        observation_type=kind,  # type: ignore[arg-type]
        source_event_ids=[e.event_id for e in used],
        strategy="deterministic",
        quality=quality,  # type: ignore[arg-type]
        created_at=_created_at(used),
    )


def _outcome(answers: list[str]) -> str:
    """The last answer with substance, from where its interim narration ends; the last
    answer as it is when all of them are narration."""
    for text in reversed(answers):
        found = substance(text)
        if found:
            return found
    return next((a for a in reversed(answers) if not is_placeholder(a)), "")


def _tool_facts(
    use: ToolUse,
    facts: _Facts,
    files: dict[str, None],
    roots: list[str],
    error_names: list[str],
    test_runs: list[str],
) -> bool:
    contributed = False
    for verb, raw in use.files:
        path = in_project(raw, roots, use.cwd)
        if path is None:
            continue
        path = path[:1000]
        files.setdefault(path, None)
        contributed = True
        if verb != "read":
            facts.add(f"{verb} {path}")
    failed = bool(use.failed) or (use.exit_code is not None and use.exit_code != 0)
    # A run that looked at nothing says nothing; one that looked at files says which.
    if use.command and probe(use.command) == "idle" and not failed:
        return contributed
    if use.command:
        status = ""
        if use.exit_code is not None:
            status = f" → exit {use.exit_code}"
        elif use.failed:
            status = " → failed"
        contributed = facts.add(f"ran `{clip(use.command, 200)}`{status}")
    if use.kind in ("shell", "other") or failed:
        outcome = parse_output(use.output, use.command, failed)
        for fact in outcome.facts:
            contributed = facts.add(fact) or contributed
        if outcome.error:
            contributed = facts.add(outcome.error) or contributed
            error_names += outcome.error_names[:3]
        tests = outcome.tests
        if tests is None and is_test_command(use.command) and use.exit_code is not None:
            tests = "fail" if failed else "pass"
        if tests:
            test_runs.append(tests)
    return contributed


def _created_at(used: list[StoredEvent]) -> datetime:
    if not used:
        return datetime.now(UTC)
    return max(e.valid_time for e in used).astimezone(UTC)

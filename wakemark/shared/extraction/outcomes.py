"""Facts parsed from command output: test summaries, lint counts, build and error lines."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

_PYTEST = re.compile(
    r"\b(\d+ (?:failed|passed|errors?|skipped|xfailed|xpassed|deselected)"
    r"(?:, \d+ (?:failed|passed|errors?|skipped|xfailed|xpassed|deselected|warnings?))*)"
    r" in [\d.]+m?s\b"
)
_JEST = re.compile(r"(?m)^Tests:\s+(.*\d+ total)\s*$")
_CARGO = re.compile(r"test result: (?:FAILED|ok)\. (\d+ passed; \d+ failed)")
_GO_FAIL = re.compile(r"(?m)^--- FAIL: (\S+)")
_FAILED_TEST = re.compile(r"(?m)^FAILED (\S+)")
_LINT_FOUND = re.compile(r"(?m)^Found (\d+ errors?(?: in \d+ files?)?)")
_LINT_CLEAN = re.compile(r"(?m)^(All checks passed!|Success: no issues found)")
_ESLINT = re.compile(r"✖ (\d+ problems? \(\d+ errors?, \d+ warnings?\))")
_MAKE = re.compile(r"(?m)^(make(?:\[\d+\])?: \*\*\* .+?)\s*$")
_TRACEBACK = "Traceback (most recent call last)"
_EXCEPTION = re.compile(
    r"(?m)(?:^|[\s>-])((?:[A-Za-z_]\w*\.)*[A-Z]\w*(?:Error|Exception|Failure|Interrupt|Exit)"
    r"(?:: [^\n]{0,250}|$))"
)
_OTHER_ERROR = re.compile(
    r"(?m)^((?:error(?:\[\w+\])?|fatal|npm ERR!)[: ][^\n]{1,250}"
    r"|\S+:\d+(?::\d+)?: error: [^\n]{1,250})"
)
_TEST_COMMAND = re.compile(
    r"\b(pytest|py\.test|unittest|tox|nox|jest|vitest|mocha|rspec|phpunit|ctest)\b"
    r"|\b(go|cargo|npm|pnpm|yarn|bun|make|mvn|gradle|dotnet)\s+(?:run\s+)?test"
)
_MAX_SUMMARY_LINE = 400
_SUMMARY_HINT = re.compile(r"\d (?:passed|failed|errors?|skipped)|^Tests:|test result:", re.M)
_LINTERS = ("ruff", "mypy", "flake8", "pylint", "pyright", "eslint", "tsc", "clippy", "black")


@dataclass
class Outcome:
    facts: list[str] = field(default_factory=list)
    error: str | None = None
    error_names: list[str] = field(default_factory=list)
    failed_tests: list[str] = field(default_factory=list)
    tests: str | None = None  # "pass" | "fail" when test results were seen


def is_test_command(command: str | None) -> bool:
    return bool(command and _TEST_COMMAND.search(command))


def _linter(command: str | None) -> str:
    words = re.findall(r"[\w-]+", command or "")
    return next((w for w in words if w in _LINTERS), "lint")


def parse_output(output: str, command: str | None, failed: bool) -> Outcome:
    out = Outcome()
    if not output:
        return out
    summary = _last_summary(output)
    if summary:
        out.facts.append(f"tests: {summary}")
        out.tests = "fail" if re.search(r"[1-9]\d* (?:failed|errors?)\b", summary) else "pass"
    out.failed_tests = (_FAILED_TEST.findall(output) + _GO_FAIL.findall(output))[:5]
    if out.failed_tests:
        out.tests = "fail"
    out.facts += [f"failed {t}" for t in out.failed_tests]
    if m := _LINT_FOUND.search(output) or _ESLINT.search(output):
        out.facts.append(f"{_linter(command)}: {m.group(1)}")
    elif m := _LINT_CLEAN.search(output):
        out.facts.append(f"{_linter(command)}: {m.group(1).rstrip('!').lower()}")
    if m := _MAKE.search(output):
        out.facts.append(m.group(1))
    exceptions = [m.group(1).strip() for m in _EXCEPTION.finditer(output)]
    out.error_names = [e.split(":", 1)[0].rsplit(".", 1)[-1] for e in exceptions]
    if failed or out.tests == "fail":
        if exceptions:
            # A traceback ends with the exception that was finally raised; pytest and
            # most tools print the most useful line first. A line with a message beats
            # a bare class name (pytest's "tests/x.py:22: AssertionError").
            ranked = [e for e in exceptions if ": " in e] or exceptions
            out.error = ranked[-1] if _TRACEBACK in output else ranked[0]
        elif m := _OTHER_ERROR.search(output):
            out.error = m.group(1).strip()
    return out


def _last_summary(output: str) -> str | None:
    """The last test summary line. Summaries are one short line: the full patterns run
    only on short lines that a cheap hint found, which keeps the cost linear even on
    adversarial output (a long run of "1 passed, " would backtrack quadratically)."""
    seen = -1
    for hint in reversed(list(_SUMMARY_HINT.finditer(output))):
        start = output.rfind("\n", 0, hint.start()) + 1
        if start == seen:
            continue
        seen = start
        end = output.find("\n", hint.end())
        line = output[start : end if end >= 0 else len(output)]
        if len(line) <= _MAX_SUMMARY_LINE and (found := _summary(line)):
            return found
    return None


def _summary(line: str) -> str | None:
    for pattern in (_PYTEST, _JEST, _CARGO):
        found = pattern.findall(line)
        if found:
            return str(found[-1])
    return None

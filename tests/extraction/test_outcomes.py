"""Facts parsed from command output: test summaries, lint counts, build and error lines."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from wakemark.shared.extraction import record_from_note
from wakemark.shared.extraction.outcomes import is_test_command, parse_output
from wakemark.shared.models import Event

from .turns import event

TRACEBACK = """Traceback (most recent call last):
  File "/home/dev/projects/shop/manage.py", line 3, in <module>
    from shop.app import create_app
  File "/home/dev/projects/shop/src/shop/app.py", line 1, in <module>
    import flask_cors
ModuleNotFoundError: No module named 'flask_cors'
"""

CHAINED = """Traceback (most recent call last):
  File "x.py", line 2, in <module>
KeyError: 'sku'

During handling of the above exception, another exception occurred:

Traceback (most recent call last):
  File "x.py", line 4, in <module>
shop.errors.PricingError: unknown sku A1
"""


@pytest.mark.parametrize(
    ("command", "output", "facts", "error"),
    [
        ("python manage.py", TRACEBACK, [], "ModuleNotFoundError: No module named 'flask_cors'"),
        ("python x.py", CHAINED, [], "shop.errors.PricingError: unknown sku A1"),
        (
            "pytest -q",
            "FAILED tests/a.py::test_x - ValueError: bad\n"
            "FAILED tests/a.py::test_y - KeyError: 'k'\n"
            "===== 2 failed, 12 passed, 1 warning in 1.20s =====\n",
            [
                "tests: 2 failed, 12 passed, 1 warning",
                "failed tests/a.py::test_x",
                "failed tests/a.py::test_y",
            ],
            "ValueError: bad",
        ),
        (
            "npx jest",
            "Tests:       1 failed, 5 passed, 6 total\n",
            ["tests: 1 failed, 5 passed, 6 total"],
            None,
        ),
        (
            "cargo test",
            "test result: ok. 9 passed; 0 failed; 0 ignored\n",
            ["tests: 9 passed; 0 failed"],
            None,
        ),
        (
            "uv run ruff check .",
            "x.py:1:1: F401 unused\nFound 2 errors.\n",
            ["ruff: 2 errors"],
            None,
        ),
        (
            "mypy shared",
            "a.py:3: error: Incompatible types\n"
            "Found 3 errors in 2 files (checked 9 source files)\n",
            ["mypy: 3 errors in 2 files"],
            "a.py:3: error: Incompatible types",
        ),
        ("ruff check", "All checks passed!\n", ["ruff: all checks passed"], None),
        (
            "pytest",
            "E   ImportError: cannot import name 'x'\n== 2 errors in 0.31s ==\n",
            ["tests: 2 errors"],
            "ImportError: cannot import name 'x'",
        ),
        (
            "npx eslint src",
            "✖ 5 problems (3 errors, 2 warnings)\n",
            ["eslint: 5 problems (3 errors, 2 warnings)"],
            None,
        ),
        (
            "make build",
            "cc -c main.c\nmake: *** [Makefile:12: build] Error 2\n",
            ["make: *** [Makefile:12: build] Error 2"],
            None,
        ),
        (
            "cargo build",
            "error[E0308]: mismatched types\n --> src/main.rs:4:5\n",
            [],
            "error[E0308]: mismatched types",
        ),
        ("git push", "fatal: not a git repository\n", [], "fatal: not a git repository"),
    ],
)
def test_parse_output(command: str, output: str, facts: list[str], error: str | None) -> None:
    outcome = parse_output(output, command, failed=True)
    assert outcome.facts == facts
    assert outcome.error == error


def test_errors_only_reported_for_failures() -> None:
    assert parse_output(TRACEBACK, "python manage.py", failed=False).error is None
    passing = parse_output("14 passed in 0.47s\n", "pytest", failed=False)
    assert (passing.tests, passing.facts) == ("pass", ["tests: 14 passed"])


def test_is_test_command() -> None:
    assert is_test_command("pytest -q tests/test_cart.py")
    assert is_test_command("cd web && npm test")
    assert is_test_command("go test ./...")
    assert not is_test_command("git status")
    assert not is_test_command("ls tests")


def test_adversarial_output_is_handled() -> None:
    outcome = parse_output("1 passed, " * 2000 + " in 1s", "pytest", failed=True)
    assert outcome.facts == []  # a 20,000-char line is no summary


bodies = st.one_of(
    st.builds(lambda c: {"type": "text", "content": c}, st.text(max_size=300)),
    st.builds(
        lambda d: {"type": "json", "data": d},
        st.dictionaries(st.sampled_from(["title", "text", "content", "x"]), st.text(max_size=50)),
    ),
)


@given(bodies)
def test_any_note_body_gives_a_valid_record(body: dict) -> None:
    ev = Event.model_validate(event("note", body))
    record = record_from_note(ev)
    assert 1 <= len(record.title) <= 200 and len(record.summary) <= 4000
    assert record.observation_type == "note" and record.source_event_ids == [ev.event_id]

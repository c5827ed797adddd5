"""The deterministic extractor on realistic turns, on every adapter's tool shape, and on
arbitrary bodies (it must never raise)."""

from __future__ import annotations

import json

from hypothesis import HealthCheck, given
from hypothesis import settings as hsettings
from hypothesis import strategies as st

from wakemark.shared.config import Settings
from wakemark.shared.extraction import extract
from wakemark.shared.extraction.deterministic import extract_deterministic

from .turns import FIXTURES, PROJECT, data, event, fixture_turn, make_turn, text, turn_of


def test_bugfix_turn(settings: Settings) -> None:
    turn = fixture_turn("bugfix")
    [record] = extract(turn, settings)
    assert record.title == "the checkout total is wrong when a coupon is applied"
    assert record.observation_type == "bugfix"
    assert record.facts == [
        "ran `pytest -q` → exit 1",
        "tests: 1 failed, 13 passed",
        "failed tests/test_cart.py::test_coupon",
        "AssertionError: assert 90 == 81",
        "edited src/shop/cart.py",
        "ran `pytest -q` → exit 0",
        "tests: 14 passed",
    ]
    assert record.files_touched == ["src/shop/cart.py"]
    assert record.summary.startswith("The coupon was applied twice:")
    assert record.summary.endswith("(14 passed).")
    assert {"AssertionError", "Cart.total", "pytest"} <= set(record.concepts)
    assert record.concepts[0] == "AssertionError"
    assert record.strategy == "deterministic" and record.quality == "full"
    assert record.namespace == turn.namespace
    assert record.source_event_ids == [e.event_id for e in turn.events]
    assert record.created_at == max(e.valid_time for e in turn.events)


def test_refactor_turn(settings: Settings) -> None:
    turn = fixture_turn("refactor")
    [record] = extract(turn, settings)
    assert record.title == (
        "Rename CartService to CheckoutService and move it into src/shop/checkout.py."
    )
    assert record.observation_type == "refactor"
    assert record.files_touched == [
        "src/shop/checkout.py",
        "src/shop/service.py",
        "src/shop/api.py",
        "tests/test_service.py",
    ]
    for fact in (
        "wrote src/shop/checkout.py",
        "edited src/shop/api.py",
        "ran `ruff check src tests` → exit 1",
        "ruff: 2 errors",
        "tests: 14 passed",
    ):
        assert fact in record.facts
    assert record.concepts[:2] == ["CartService", "CheckoutService"]
    assert record.summary.startswith("Renamed `CartService` to `CheckoutService`")


def test_question_turn(settings: Settings) -> None:
    turn = fixture_turn("question")
    [record] = extract(turn, settings)
    assert record.title == "Why does the cart round discounts with ROUND_HALF_EVEN?"
    assert record.observation_type == "discovery"
    assert record.facts == []
    # The grep's path is a search scope, not a touched file: only the read file counts.
    assert record.files_touched == ["src/shop/pricing.py"]
    grep_event = turn.events[1].event_id
    assert grep_event not in record.source_event_ids
    assert record.source_event_ids == [turn.events[i].event_id for i in (0, 2, 3)]
    assert "ROUND_HALF_EVEN" in record.concepts


def test_extraction_is_deterministic() -> None:
    a = extract_deterministic(fixture_turn("refactor"))
    b = extract_deterministic(fixture_turn("refactor"))
    assert a is not None and b is not None
    assert a.model_dump(exclude={"record_id"}) == b.model_dump(exclude={"record_id"})


def test_prompt_only_turn_is_a_discovery() -> None:
    record = extract_deterministic(make_turn(("prompt", text("add a retry to the HTTP client"))))
    assert record is not None
    assert record.title == "add a retry to the HTTP client"
    assert record.observation_type == "discovery"
    assert record.summary == "" and record.facts == []


def test_empty_turns_give_no_record(settings: Settings) -> None:
    assert extract(turn_of([]), settings) == []
    blank = make_turn(("prompt", text("   ")), ("tool_use", data({"tool_name": "TodoWrite"})))
    assert extract(blank, settings) == []


def test_title_from_answer_when_no_prompt_and_limits() -> None:
    long_answer = ("Moved the cache epoch bump into the storage transaction. " * 120).strip()
    record = extract_deterministic(make_turn(("session_summary", text(long_answer))))
    assert record is not None
    assert record.title == "Moved the cache epoch bump into the storage transaction."
    assert len(record.summary) <= 4000 and record.summary.endswith("transaction.")
    long_prompt = "word " * 100 + "end."
    record = extract_deterministic(make_turn(("prompt", text(long_prompt))))
    assert record is not None and len(record.title) <= 200 and record.title.endswith("…")


def test_fact_limits_and_dedup() -> None:
    runs = [
        ("tool_use", data({"tool_name": "Bash", "tool_input": {"command": f"make step{i % 40}"}}))
        for i in range(80)
    ]
    record = extract_deterministic(make_turn(("prompt", text("build it")), *runs))
    assert record is not None
    assert len(record.facts) == 30
    assert record.facts[0] == "ran `make step0`" and len(set(record.facts)) == 30
    huge = "x" * 5000
    record = extract_deterministic(
        make_turn(("tool_use", data({"tool_name": "Bash", "tool_input": {"command": huge}})))
    )
    assert record is not None and all(len(f) <= 300 for f in record.facts)


def test_types_by_rule() -> None:
    def kind(prompt: str, *tools: dict) -> str:
        items = [("tool_use", data(t)) for t in tools]
        record = extract_deterministic(make_turn(("prompt", text(prompt)), *items))
        assert record is not None
        return record.observation_type

    edit = {"tool_name": "Edit", "tool_input": {"file_path": f"{PROJECT}/src/a.py"}}
    assert kind("fix the crash on empty carts", edit) == "bugfix"
    assert kind("extract the pricing rules into their own module", edit) == "refactor"
    assert kind("implement CSV export for orders", edit) == "feature"
    assert kind("we will keep SQLite as the default backend", edit) == "decision"
    assert kind("bump the version to 0.3", edit) == "change"
    assert kind("how is the token generated?", {**edit, "tool_name": "Read"}) == "discovery"
    assert kind("what's the token made of", {**edit, "tool_name": "Read"}) == "discovery"
    assert kind("where's the retry configured", {**edit, "tool_name": "Read"}) == "discovery"
    failing = {"tool_name": "Bash", "tool_input": {"command": "pytest"}, "exit_code": 1}
    passing = {"tool_name": "Bash", "tool_input": {"command": "pytest"}, "exit_code": 0}
    assert kind("update the cart", failing, edit, passing) == "bugfix"
    assert kind("update the cart", passing, edit) == "change"


def _hook(agent: str, name: str) -> dict:
    return json.loads((FIXTURES / "hooks" / agent / name).read_text())


def _tool_body(payload: dict) -> dict:
    # The shape agent adapters post: tool name, input and response, plus extras.
    keys = ("tool_name", "tool_input", "tool_response", "error", "exit_code", "cwd")
    return data({k: payload[k] for k in keys if k in payload})


def test_every_agents_failing_pytest_shape() -> None:
    shapes = {
        "claude-code": _tool_body(_hook("claude-code", "PostToolUseFailure.json")),
        "codex": _tool_body(_hook("codex", "PostToolUse.json")),
        "gemini-cli": _tool_body(_hook("gemini-cli", "AfterTool.json")),
        "kiro-cli": _tool_body(_hook("kiro-cli", "postToolUse.json")),
        "cursor": data({"tool_name": "shell", **_hook("cursor", "afterShellExecution.json")}),
    }
    for agent, body in shapes.items():
        record = extract_deterministic(make_turn(("tool_use", body)))
        assert record is not None, agent
        assert record.facts[0].startswith("ran `pytest -q`"), agent
        assert "tests: 1 failed, 7 passed" in record.facts, agent
        assert "failed tests/test_cart.py::test_apply_discount" in record.facts, agent
        errors = [f for f in record.facts if f.startswith("AssertionError: assert Decimal(")]
        assert len(errors) == 1, agent
        if agent != "cursor":  # Cursor's hook carries no exit status
            assert record.facts[0] == "ran `pytest -q` → exit 1", agent


def test_every_agents_edit_shape() -> None:
    shapes = {
        "claude-code": _tool_body(_hook("claude-code", "PostToolUse.edit.json")),
        "codex": _tool_body(_hook("codex", "PostToolUse.apply_patch.json")),
        "gemini-cli": _tool_body(_hook("gemini-cli", "AfterTool.replace.json")),
        "kiro-cli": _tool_body(_hook("kiro-cli", "postToolUse.fs_write.json")),
        "cursor": data({"tool_name": "edit", **_hook("cursor", "afterFileEdit.json")}),
    }
    for agent, body in shapes.items():
        turn = make_turn(("prompt", text("round like the pricing code")), ("tool_use", body))
        record = extract_deterministic(turn)
        assert record is not None, agent
        assert record.files_touched == ["shop/cart.py"], agent
        assert "edited shop/cart.py" in record.facts, agent


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=40),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner, max_size=4)
    ),
    max_leaves=12,
)
tool_keys = st.sampled_from(
    ["tool_name", "tool", "tool_input", "input", "tool_response", "output", "result",
     "exit_code", "exitCode", "error", "success", "command", "file_path", "path", "cwd"]
)  # fmt: skip
bodies = st.one_of(
    st.builds(text, st.text(max_size=200)),
    st.builds(
        lambda turns: {"type": "message", "turns": turns},
        st.lists(
            st.fixed_dictionaries({"role": st.sampled_from(["user", "assistant", "x"]),
                                   "content": st.text(max_size=80)}),
            min_size=1, max_size=3,
        ),
    ),
    st.builds(data, st.dictionaries(tool_keys | st.text(max_size=10), json_values, max_size=6)),
)  # fmt: skip
events = st.lists(
    st.tuples(st.sampled_from(["prompt", "tool_use", "session_summary"]), bodies), max_size=6
)


@hsettings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(events)
def test_arbitrary_bodies_never_raise(items: list) -> None:
    turn = turn_of([event(kind, body, i) for i, (kind, body) in enumerate(items)])
    record = extract_deterministic(turn)
    if record is None:
        return
    ids = [e.event_id for e in turn.events]
    assert 1 <= len(record.title) <= 200
    assert len(record.facts) <= 30 and all(len(f) <= 300 for f in record.facts)
    assert len(record.concepts) <= 12
    assert record.source_event_ids == [i for i in ids if i in record.source_event_ids]
    assert record.source_event_ids


def test_files_touched_stay_inside_the_project() -> None:
    def edit(path: str) -> tuple[str, dict]:
        return ("tool_use", data({"tool_name": "Edit", "tool_input": {"file_path": path}}))

    record = extract_deterministic(make_turn(
        ("prompt", text("fix the crash on empty carts")),
        edit("src/../../outside.py"),  # relative, climbing out
        edit(f"{PROJECT}/src/../../other/x.py"),  # under the root as written, out of it
        edit(f"{PROJECT}/src/../lib/./a.py"),
        edit("./src/b.py"),
        ("session_summary", text("Fixed the crash in lib/a.py and src/b.py.")),
    ))  # fmt: skip
    assert record is not None
    assert record.files_touched == ["lib/a.py", "src/b.py"]
    assert not [f for f in record.facts if ".." in f]


def test_paths_outside_every_project_root_are_no_files_of_the_project() -> None:
    def edit(path: str, **use: str) -> tuple[str, dict]:
        return ("tool_use", data({"tool_name": "Edit", "tool_input": {"file_path": path}, **use}))

    items = (
        ("prompt", text("fix the crash on empty carts")),
        edit("/home/dev/.claude/plans/p.md"),  # the agent's own plan file
        edit("/tmp/scratch/x.py", cwd="/tmp/scratch"),  # under the tool's cwd, not the project
        edit("~/notes.md"),
        edit(PROJECT),
        edit(f"{PROJECT}/src/a.py"),
        ("session_summary", text("Fixed the crash in src/a.py.")),
    )
    record = extract_deterministic(make_turn(*items))
    assert record is not None and record.files_touched == ["src/a.py"]
    assert [f for f in record.facts if f.startswith("edited")] == ["edited src/a.py"]
    # The global project (no root): nothing to be outside of, a path under the cwd is
    # taken relative to it.
    alone = [event(kind, body, i, source={"surface": "test"}) for i, (kind, body) in
             enumerate(items)]  # fmt: skip
    record = extract_deterministic(turn_of(alone))
    assert record is not None
    assert record.files_touched == [
        "/home/dev/.claude/plans/p.md",
        "x.py",
        "~/notes.md",
        PROJECT,
        f"{PROJECT}/src/a.py",
    ]

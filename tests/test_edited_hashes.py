"""A team server's records anchored to the files as the turn's edits left them: the
forwarder hashes each file an edit tool use wrote (``X-Wakemark-Edited``), the hook
route keeps the hashes in the tool-use event, extraction takes each file's last one."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests import test_staleness
from tests.conftest import free_port
from tests.hooks.conftest import ACTOR, FIXTURES, Hooks, _hooks, load
from tests.hooks.test_forwarder import _env, _hook
from tests.served import serving
from tests.test_staleness import ANSWER, ASK, edit
from wakemark.services.api.security import ensure_token
from wakemark.shared import project
from wakemark.shared.config import Settings, prepare_home
from wakemark.shared.jobs import extract_turns
from wakemark.shared.models import FILE_HASHES, MemoryRecord
from wakemark.shared.retrieval import staleness
from wakemark.shared.retrieval.staleness import CodeCheck
from wakemark.shared.runtime import Runtime
from wakemark.shared.storage import CodeAnchors, migrate
from wakemark.shared.storage.anchors_codec import from_body, to_body

repo = test_staleness.repo  # the fixture: a git repository in the server user's home
FIX = "format_address prints nothing for orders without a billing address. Fix it."
SHOP = "/home/dev/projects/shop"  # the fixtures' project root
EDITS = {
    "claude-code": "PostToolUse.edit",
    "codex": "PostToolUse.apply_patch",
    "cursor": "afterFileEdit",
    "gemini-cli": "AfterTool.replace",
    "kiro-cli": "postToolUse.fs_write",
}
CART = "x = 1\n" * 1500  # about the size of a source file


def sha(data: bytes | str) -> str:
    return hashlib.sha256(data.encode() if isinstance(data, str) else data).hexdigest()


@pytest.fixture
def team(settings: Settings) -> Iterator[Runtime]:
    """A server bound to all interfaces (its clients' files are never read), serving on
    loopback for the test's forwarder."""
    settings = settings.replace(port=free_port(), host="0.0.0.0", min_prompt_relevance=0.0,
                                min_relevance=0.05)  # fmt: skip
    prepare_home(settings)
    migrate(settings)
    rt = Runtime.build(settings)
    with serving(rt, settings.port):
        yield rt
    rt.close()


def forward(rt: Runtime, home: Path, root: Path, agent: str, payload: Any) -> str:
    env = _env(home, rt.settings.port, ensure_token(rt.settings))
    env["CLAUDE_PROJECT_DIR"] = str(root)
    text = payload if isinstance(payload, str) else json.dumps(payload)
    done = _hook(env, root, agent, stdin=text.encode())
    assert (done.returncode, done.stderr) == (0, b"")
    assert not (home / "logs" / "hook.log").exists()  # the server took it (2xx)
    return done.stdout.decode()


def tool_events(rt: Runtime, root: Path) -> list[Any]:
    ns = project.namespace_for(ACTOR, project.project_id(str(root)))
    return [e for e in rt.storage.list_events(namespace=ns) if e.kind == "tool_use"]


@pytest.mark.parametrize("agent", list(EDITS))
def test_the_forwarder_sends_the_hash_of_each_agents_edited_file(
    team: Runtime, tmp_path: Path, agent: str
) -> None:
    root = tmp_path / "shop"
    (root / "shop").mkdir(parents=True)
    (root / ".git").mkdir()
    (root / "shop" / "cart.py").write_text(CART)
    text = (FIXTURES / agent / f"{EDITS[agent]}.json").read_text().replace(SHOP, str(root))
    forward(team, tmp_path / "client", root, agent, text)
    [event] = tool_events(team, root)
    assert event.body.data[FILE_HASHES] == {"shop/cart.py": sha(CART)}  # type: ignore[union-attr]


def test_only_an_edit_after_it_ran_inside_the_project_is_hashed(
    team: Runtime, tmp_path: Path
) -> None:
    root = tmp_path / "shop"
    (root / ".git").mkdir(parents=True)
    (root / "big.bin").write_bytes(b"\0" * ((1 << 20) + 1))
    home = tmp_path / "client"
    outside = tmp_path / "elsewhere.py"
    outside.write_text("y = 2\n")
    bash = load("claude-code", "PostToolUse", root)  # a command: it edits nothing
    forward(team, home, root, "claude-code", bash)
    edit_of = load("claude-code", "PostToolUse.edit", root)
    for i, path in enumerate([outside, root / "big.bin", root / "gone.py"]):
        edit_of.update(tool_use_id=f"toolu_{i}", tool_input={"file_path": str(path)},
                       tool_response={"filePath": str(path)})  # fmt: skip
        forward(team, home, root, "claude-code", edit_of)
    before = {**edit_of, "hook_event_name": "PreToolUse", "tool_use_id": "toolu_pre"}
    forward(team, home, root, "claude-code", before)  # the file is not edited yet
    found = {e.event_id: e.body.data.get(FILE_HASHES) for e in tool_events(team, root)}  # type: ignore[union-attr]
    # Outside the root and over 1 MiB: not reported; a file the edit deleted: "-" (None).
    assert sorted(found.values(), key=str) == [None, None, None, {"gone.py": None}]


def test_hashing_an_edit_imports_nothing_heavy(tmp_path: Path) -> None:
    import re
    import subprocess
    import sys

    from tests.hooks.test_forwarder import HOOK

    root = tmp_path / "shop"
    (root / "shop").mkdir(parents=True)
    (root / "shop" / "cart.py").write_text(CART)
    text = (FIXTURES / "claude-code" / "PostToolUse.edit.json").read_text().replace(SHOP, str(root))
    env = _env(tmp_path / "home", free_port(), "t")
    env["CLAUDE_PROJECT_DIR"] = str(root)
    out = subprocess.run(
        [sys.executable, "-S", "-E", "-s", "-X", "importtime", HOOK, "claude-code"],
        input=text.encode(), env=env, cwd=root, capture_output=True, timeout=10,
    )  # fmt: skip
    assert (out.returncode, out.stdout) == (0, b"")
    modules = set(re.findall(r"^import time:\s+\d+ \|\s+\d+ \| +(\S+)$", out.stderr.decode(), re.M))
    assert modules & {"_sha2", "_sha256"}  # it hashed the file, with the C module alone
    assert not modules & {"hashlib", "re", "json", "pathlib", "typing", "socket"}
    assert "ConnectionRefusedError" in (tmp_path / "home" / "logs" / "hook.log").read_text()


def test_a_local_server_reads_the_files_itself_and_drops_the_hashes(
    settings: Settings, tmp_path: Path
) -> None:
    settings = settings.replace(port=free_port())  # loopback, the bootstrap token
    prepare_home(settings)
    migrate(settings)
    rt = Runtime.build(settings)
    try:
        with serving(rt, settings.port):
            root = tmp_path / "shop"
            (root / "shop").mkdir(parents=True)
            (root / ".git").mkdir()
            (root / "shop" / "cart.py").write_text(CART)
            text = (FIXTURES / "claude-code" / "PostToolUse.edit.json").read_text()
            forward(rt, tmp_path / "client", root, "claude-code", text.replace(SHOP, str(root)))
            [event] = tool_events(rt, root)
            assert FILE_HASHES not in event.body.data  # type: ignore[union-attr]
    finally:
        rt.close()


# --- the route ----------------------------------------------------------------------------


@pytest.fixture
def team_hooks(backend_settings: Settings) -> Iterator[Hooks]:
    """The hook routes of a server that does not read its clients' files, each backend."""
    settings = backend_settings.replace(host="0.0.0.0", min_prompt_relevance=0.0,
                                        min_relevance=0.05)  # fmt: skip
    yield from _hooks(settings)


BAD = {
    "no digest": "billing/address.py",
    "absolute": f"/etc/passwd={'a' * 64}",
    "up and out": f"../secrets.py={'a' * 64}",
    "up inside": f"billing/../../x.py={'a' * 64}",
    "not hex": "billing/address.py=abc",
    "upper hex": f"billing/address.py={'A' * 64}",
    "too many": ";".join(f"f{i}.py={'a' * 64}" for i in range(33)),
}


@pytest.mark.parametrize("case", list(BAD))
def test_the_route_refuses_bad_edited_hashes_with_one_line(
    team_hooks: Hooks, repo: Path, case: str
) -> None:
    payload = load("claude-code", "PostToolUse.edit", repo)
    res = team_hooks.post("claude-code", payload, **{staleness.EDITED_HEADER: BAD[case]})
    assert res.status_code == 400
    body = res.get_json()
    assert body["error"] == "bad_edited_hashes"
    assert body["message"].startswith(staleness.EDITED_HEADER) and "\n" not in body["message"]
    ns = project.namespace_for(ACTOR, project.project_id(str(repo)))
    assert team_hooks.runtime.storage.list_events(namespace=ns) == []


def test_the_events_route_refuses_bad_file_hashes(team_hooks: Hooks, repo: Path) -> None:
    ns = project.namespace_for(ACTOR, project.project_id(str(repo)))
    event = {
        "event_id": "01JB0000000000000000000000",
        "session_id": "s",
        "actor_id": ACTOR,
        "namespace": ns,
        "kind": "tool_use",
        "body": {"type": "json", "data": {"tool_name": "Edit", FILE_HASHES: {"/abs.py": None}}},
        "valid_time": "2026-01-01T00:00:00Z",
        "source": {"surface": "test"},
    }
    headers = {"Authorization": f"Bearer {team_hooks.token}", "Host": "127.0.0.1:37800"}
    res = team_hooks.client.post("/v1/events", json=event, headers=headers)
    assert 400 <= res.status_code < 500
    assert "project-relative path" in json.dumps(res.get_json())
    assert team_hooks.runtime.storage.list_events(namespace=ns) == []


# --- extraction ---------------------------------------------------------------------------


def post(hooks: Hooks, name: str, repo: Path, headers: dict[str, str] | None = None,
         **fields: Any) -> None:  # fmt: skip
    payload = load("claude-code", name, repo)
    payload.update(session_id="s1", **fields)
    res = hooks.post("claude-code", payload, **(headers or {}))
    assert res.status_code in (200, 204), res.data


def team_turn(hooks: Hooks, repo: Path, hashes: list[str]) -> MemoryRecord:
    """A turn that edits billing/address.py once per hash (each sent as the forwarder
    sends it) and reads billing/tax.py, extracted: its record."""
    post(hooks, "UserPromptSubmit", repo, prompt=FIX)
    path = str(repo / "billing" / "address.py")
    for i, digest in enumerate(hashes):
        sent = {staleness.EDITED_HEADER: f"billing/address.py={digest}"}
        post(hooks, "PostToolUse.edit", repo, sent, tool_use_id=f"toolu_e{i}",
             tool_input={"file_path": path, "old_string": "a", "new_string": "b"},
             tool_response={"filePath": path})  # fmt: skip
    tax = str(repo / "billing" / "tax.py")
    post(hooks, "PostToolUse.edit", repo, tool_use_id="toolu_r", tool_name="Read",
         tool_input={"file_path": tax}, tool_response={"filePath": tax})  # fmt: skip
    post(hooks, "Stop", repo, last_assistant_message=ANSWER, transcript_path="")
    storage = hooks.runtime.storage
    # Here or by the runtime's own worker, whichever takes the closed turn first.
    extract_turns(hooks.runtime.tasks, storage.pending_turns())
    assert hooks.runtime.jobs.wait_idle(30)
    ns = project.namespace_for(ACTOR, project.project_id(str(repo)))
    [record] = storage.list_memory_records(namespace=ns).items
    return record


def test_extraction_anchors_edited_files_to_their_last_reported_hash(
    team_hooks: Hooks, repo: Path
) -> None:
    first, last, later, tax = sha("first"), sha("last"), sha("later"), sha("tax")
    record = team_turn(team_hooks, repo, [first, last])
    storage = team_hooks.runtime.storage
    anchors = storage.get_anchors([record.record_id])[record.record_id]
    files = {f.path: f.sha256 for f in anchors.files}
    assert files == {"billing/address.py": last, "billing/tax.py": None}
    assert anchors.edited == ("billing/address.py",) and not anchors.hashed
    # The first report of the files: the edited one keeps the turn's hash (so it is
    # changed), the one the turn only read takes the report's.
    baselines: list[Any] = []
    check = CodeCheck(storage)
    reported = {"billing/address.py": later, "billing/tax.py": tax}
    [verdict] = check.verdicts([record.record_id], reported=reported, baselines=baselines).values()
    assert (verdict.state, verdict.paths) == ("changed", ("billing/address.py",))
    [kept] = baselines
    assert {f.path: f.sha256 for f in kept.files} == {
        "billing/address.py": last,
        "billing/tax.py": tax,
    }
    assert kept.hashed and kept.edited == ("billing/address.py",)
    with storage.transaction() as tx:
        tx.put_anchors(kept)
    assert storage.get_anchors([record.record_id])[record.record_id] == kept


def test_anchors_stored_before_edited_hashes_have_no_edited_files() -> None:
    body = to_body(CodeAnchors("mr_x", "/actor/a/project/p/", "/r", (), (), False))
    del body["edited"]  # a row written before the key existed
    assert from_body("mr_x", "/actor/a/project/p/", body).edited == ()


# --- end to end ---------------------------------------------------------------------------


def test_a_team_record_whose_file_changes_before_the_next_prompt_is_changed(
    team: Runtime, repo: Path, tmp_path: Path
) -> None:
    home = tmp_path / "client"

    def hook(name: str, session: str, **fields: Any) -> str:
        payload = load("claude-code", name, repo)
        payload.update(session_id=session, **fields)
        return forward(team, home, repo, "claude-code", payload)

    hook("UserPromptSubmit", "s1", prompt=FIX)
    edit(repo, "return order.billing or order.shipping", "return order.billing or order.ship")
    path = str(repo / "billing" / "address.py")
    hook("PostToolUse.edit", "s1", tool_input={"file_path": path, "old_string": "shipping",
         "new_string": "ship"}, tool_response={"filePath": path})  # fmt: skip
    hook("Stop", "s1", last_assistant_message=ANSWER, transcript_path="")
    assert team.jobs.wait_idle(30)  # the server's own worker extracts the closed turn
    ns = project.namespace_for(ACTOR, project.project_id(str(repo)))
    [record] = team.storage.list_memory_records(namespace=ns).items
    # Changed after the turn, before any prompt considered the record.
    edit(repo, "order.city", "order.town")
    assert record.title in hook("UserPromptSubmit", "t1", prompt=ASK)  # asks for the files
    assert f"{record.title.rstrip('.')} (changed since: billing/address.py)" in hook(
        "UserPromptSubmit", "t2", prompt=ASK
    )
    team.retriever.flush_audit()
    [row] = team.storage.list_retrievals(session_id="t2")
    assert "(1 of 1 anchored record(s) as their turn's edits left the files" in row.reason

"""Memories checked against today's code (``shared/retrieval/staleness.py``), in a real git
repository made here: the states after an edit, a rename, a delete and a removed
identifier on each backend; the hook path of a local install (anchors captured at
extraction, the marker in the injected block and the session index, gone records left
out) and of a scoped token (nothing read, the audit says so)."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from tests.hooks.conftest import ACTOR, Hooks, _hooks, load
from wakemark.services.cli.main import main
from wakemark.shared import project, tokens, transfer
from wakemark.shared.config import Settings, prepare_home
from wakemark.shared.jobs import extract_turns
from wakemark.shared.models import MemoryRecord
from wakemark.shared.retrieval import staleness
from wakemark.shared.retrieval.staleness import NOT_READ, CodeCheck, capture
from wakemark.shared.storage import Storage, migrate

ADDRESS = """def format_address(order):
    return order.billing or order.shipping


def format_city(order):
    return order.city
"""
ANSWER = (
    "`format_address` in `billing/address.py` now falls back to the shipping address "
    "when an order has no billing address."
)


def git(repo: Path, *args: str) -> str:
    cmd = ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@example.com"]
    return subprocess.run([*cmd, *args], check=True, capture_output=True, text=True).stdout


@pytest.fixture
def repo(user_home: Path) -> Path:
    repo = user_home / "invoicer"
    (repo / "billing").mkdir(parents=True)
    (repo / "billing" / "address.py").write_text(ADDRESS)
    (repo / "billing" / "tax.py").write_text("RATE = 0.2\n")
    git(repo, "init", "-q")
    git(repo, "add", ".")
    git(repo, "commit", "-qm", "start")
    return repo


def cited(ns: str = "/actor/a/project/p/") -> MemoryRecord:
    return MemoryRecord(
        namespace=ns,
        title="format_address falls back to the shipping address",
        summary=ANSWER + " `Request.host` is not involved.",
        files_touched=["billing/address.py", "billing/tax.py"],
        observation_type="bugfix",
    )


def anchored(storage: Storage, repo: Path) -> MemoryRecord:
    """``cited()`` stored with its anchors captured from ``repo``."""
    record = cited()
    storage.put_memory_record(record)
    with storage.transaction() as tx:
        tx.put_anchors(capture(record, str(repo), readable=True))  # type: ignore[arg-type]
    return record


def edit(repo: Path, old: str, new: str) -> None:
    path = repo / "billing" / "address.py"
    path.write_text(path.read_text().replace(old, new))


CHANGES = {
    "untouched": (lambda r: None, "current", ()),
    "edited": (lambda r: edit(r, "order.city", "order.town"), "changed", ("billing/address.py",)),
    "renamed": (lambda r: git(r, "mv", "billing/address.py", "billing/addr.py"), "gone",
                ("billing/address.py",)),
    "deleted": (lambda r: git(r, "rm", "-q", "billing/tax.py"), "gone", ("billing/tax.py",)),
    "identifier removed": (lambda r: edit(r, "format_address", "render_address"), "gone", ()),
}  # fmt: skip


@pytest.mark.parametrize("change", list(CHANGES))
def test_states_after_each_change_on_each_backend(
    storage: Storage, repo: Path, change: str
) -> None:
    record = cited()
    anchors = capture(record, str(repo), readable=True)
    assert anchors is not None and anchors.hashed
    # Only identifiers a cited file held at capture are anchored; file names are not.
    assert anchors.identifiers == ("format_address",)
    blob = git(repo, "rev-parse", "HEAD:billing/address.py").strip()
    assert anchors.files[0].blob == blob
    storage.put_memory_record(record)
    with storage.transaction() as tx:
        tx.put_anchors(anchors)
    act, state, paths = CHANGES[change]
    act(repo)
    verdict = CodeCheck(storage).verdicts([record.record_id])[record.record_id]
    assert (verdict.state, verdict.paths) == (state, paths)
    if change == "identifier removed":
        assert verdict.identifiers == ("format_address",)
    if change == "edited":
        assert verdict.marker() == "(changed since: billing/address.py)"


def test_the_hash_cache_sees_an_edit_and_an_edit_back(storage: Storage, repo: Path) -> None:
    record = anchored(storage, repo)
    check = CodeCheck(storage)
    assert check.verdicts([record.record_id])[record.record_id].state == "current"
    edit(repo, "order.city", "order.town")
    assert check.verdicts([record.record_id])[record.record_id].state == "changed"
    git(repo, "checkout", "--", "billing/address.py")
    assert check.verdicts([record.record_id])[record.record_id].state == "current"


def test_the_first_check_of_unmoved_files_reads_none(
    storage: Storage, repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    record = anchored(storage, repo)
    reads: list[str] = []
    real = staleness._read

    def counted(root: str, rel: str) -> tuple[bytes, tuple[int, int]] | None:
        reads.append(rel)
        return real(root, rel)

    monkeypatch.setattr(staleness, "_read", counted)
    # A new process: nothing cached but the (mtime, size) each file had when captured.
    assert CodeCheck(storage).verdicts([record.record_id])[record.record_id].state == "current"
    assert reads == []
    edit(repo, "order.city", "order.town")
    assert CodeCheck(storage).verdicts([record.record_id])[record.record_id].state == "changed"
    assert reads == ["billing/address.py", "billing/address.py"]  # its hash, then the name


def test_reads_past_the_budget_are_left_unchecked_and_done_in_the_background(
    storage: Storage, repo: Path
) -> None:
    record = anchored(storage, repo)
    edit(repo, "order.city", "order.town")
    check = CodeCheck(storage)
    first = check.verdicts([record.record_id], read_budget=0)[record.record_id]
    assert first.state == "unchecked"
    check.drain()
    # The edited file's hash is known now; naming the identifier still needs a read.
    second = check.verdicts([record.record_id], read_budget=staleness.FILE_COST)
    assert second[record.record_id].state == "changed"


def test_a_server_that_may_not_read_files_anchors_paths_only(repo: Path) -> None:
    anchors = capture(cited(), str(repo), readable=False)
    assert anchors is not None and not anchors.hashed
    assert [f.sha256 for f in anchors.files] == [None, None] and anchors.identifiers == ()
    assert CodeCheck.verdict(CodeCheck(None), anchors).state == "unchecked"  # type: ignore[arg-type]


def test_files_outside_the_users_home_are_not_read(tmp_path: Path, user_home: Path) -> None:
    outside = tmp_path / "elsewhere"
    (outside / "billing").mkdir(parents=True)
    (outside / "billing" / "address.py").write_text(ADDRESS)
    anchors = capture(cited(), str(outside), readable=True)
    assert anchors is not None and [f.sha256 for f in anchors.files] == [None, None]


# --- through the hooks ----------------------------------------------------------------------


@pytest.fixture
def local_hooks(settings: Settings, user_home: Path) -> Iterator[Hooks]:
    prepare_home(settings)
    migrate(settings)
    yield from _hooks(settings)


def post(hooks: Hooks, name: str, repo: Path, session: str, token: str | None = None,
         **fields: Any) -> str:  # fmt: skip
    payload = load("claude-code", name, repo)
    payload.update(session_id=session, **fields)
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    res = hooks.post("claude-code", payload, **headers)
    assert res.status_code in (200, 204), res.data
    return res.get_data(as_text=True)


def work_turn(hooks: Hooks, repo: Path) -> MemoryRecord:
    """A turn that edits billing/address.py, extracted: its record."""
    post(
        hooks,
        "UserPromptSubmit",
        repo,
        "s1",
        prompt="format_address prints nothing for orders without a billing address. Fix it.",
    )
    path = str(repo / "billing" / "address.py")
    post(
        hooks,
        "PostToolUse.edit",
        repo,
        "s1",
        tool_input={"file_path": path, "old_string": "a", "new_string": "b"},
        tool_response={"filePath": path},
    )
    post(hooks, "Stop", repo, "s1", last_assistant_message=ANSWER, transcript_path="")
    storage = hooks.runtime.storage
    extract_turns(hooks.runtime.tasks, storage.pending_turns())
    namespace = project.namespace_for(ACTOR, project.project_id(str(repo)))
    [record] = storage.list_memory_records(namespace=namespace).items
    return record


ASK = "why does format_address fall back to the shipping address?"


def test_local_install_marks_changed_and_leaves_out_gone_records(
    local_hooks: Hooks, repo: Path
) -> None:
    record = work_turn(local_hooks, repo)
    anchors = local_hooks.runtime.storage.get_anchors([record.record_id])[record.record_id]
    assert anchors.hashed and "billing/address.py" in [f.path for f in anchors.files]
    assert "format_address" in anchors.identifiers

    current = post(local_hooks, "UserPromptSubmit", repo, "s2", prompt=ASK)
    assert record.title in current and "changed since" not in current

    edit(repo, "order.city", "order.town")
    changed = post(local_hooks, "UserPromptSubmit", repo, "s3", prompt=ASK)
    assert f"{record.title.rstrip('.')} (changed since: billing/address.py)" in changed
    index = post(local_hooks, "SessionStart", repo, "s4")
    assert "(changed since: billing/address.py)" in index

    git(repo, "rm", "-qf", "billing/address.py")
    gone = post(local_hooks, "UserPromptSubmit", repo, "s5", prompt=ASK)
    assert record.title not in gone
    assert record.title not in post(local_hooks, "SessionStart", repo, "s6")
    local_hooks.runtime.retriever.flush_audit()  # written after the answer
    [row, *_] = local_hooks.runtime.storage.list_retrievals(session_id="s5")
    [candidate] = [c for c in row.candidates if c.record_id == record.record_id]
    assert candidate.skipped == "gone: billing/address.py" and not candidate.injected


@pytest.fixture
def each_hooks(backend_settings: Settings, user_home: Path) -> Iterator[Hooks]:
    """The hooks of a local install on each backend in turn."""
    yield from _hooks(backend_settings)


def test_a_moved_project_is_checked_where_it_now_lives(
    each_hooks: Hooks, repo: Path, user_home: Path
) -> None:
    record = work_turn(each_hooks, repo)
    storage = each_hooks.runtime.storage
    # The project moves; its memories follow it (export, forget, import under the
    # namespace of the new place), their anchors still naming the old root.
    lines = list(transfer.export_lines(storage, record.namespace))
    storage.delete_memory_records([record.record_id])
    moved = user_home / "work" / "invoicer"
    moved.parent.mkdir()
    repo.rename(moved)
    namespace = project.namespace_for(ACTOR, project.project_id(str(moved)))
    transfer.import_lines(storage, lines, [(record.namespace, namespace)])
    assert storage.get_anchors([record.record_id])[record.record_id].root == str(repo)

    edit(moved, "order.city", "order.town")
    marked = f"{record.title.rstrip('.')} (changed since: billing/address.py)"
    assert marked in post(each_hooks, "UserPromptSubmit", moved, "s2", prompt=ASK)
    assert marked in post(each_hooks, "SessionStart", moved, "s3")

    # The API's routes have no payload: they check at the root the project's newest
    # event came from (these prompts').
    def get(route: str, **args: str) -> Any:
        res = each_hooks.client.get(
            route,
            query_string={"namespace": namespace, **args},
            headers={"Authorization": f"Bearer {each_hooks.token}", "Host": "127.0.0.1:37800"},
        )
        assert res.status_code == 200, res.data
        return json.loads(res.data)

    changed = {"state": "changed", "paths": ["billing/address.py"], "identifiers": []}
    [item] = get("/v1/search", q="format_address")["items"]
    assert item["code"] == changed
    assert get("/v1/memories/code", ids=record.record_id)["items"][record.record_id] == changed
    assert marked in get("/v1/context")["context"]
    assert marked in get("/v1/context/preview", prompt=ASK)["prompt"]["context"]

    git(moved, "rm", "-qf", "billing/address.py")
    assert record.title not in post(each_hooks, "UserPromptSubmit", moved, "s4", prompt=ASK)
    assert record.title not in post(each_hooks, "SessionStart", moved, "s5")


def test_the_index_and_the_viewers_preview_check_the_code_as_the_hooks_do(
    local_hooks: Hooks, repo: Path
) -> None:
    record = work_turn(local_hooks, repo)

    def get(route: str, **args: str) -> Any:
        res = local_hooks.client.get(
            route,
            query_string={"namespace": record.namespace, **args},
            headers={"Authorization": f"Bearer {local_hooks.token}", "Host": "127.0.0.1:37800"},
        )
        assert res.status_code == 200, res.data
        return json.loads(res.data)

    edit(repo, "order.city", "order.town")
    marked = f"{record.title.rstrip('.')} (changed since: billing/address.py)"
    assert marked in get("/v1/context")["context"]
    preview = get("/v1/context/preview", prompt=ASK)
    assert marked in preview["index"]["context"] and marked in preview["prompt"]["context"]

    git(repo, "rm", "-qf", "billing/address.py")
    assert record.title not in get("/v1/context")["context"]
    preview = get("/v1/context/preview", prompt=ASK)
    assert record.title not in preview["index"]["context"] + preview["prompt"]["context"]
    [candidate] = [c for c in preview["prompt"]["candidates"]
                   if c["record"]["record_id"] == record.record_id]  # fmt: skip
    assert candidate["reason"] == "gone: billing/address.py" and not candidate["injected"]


def test_a_scoped_token_gets_no_check_and_the_audit_says_so(local_hooks: Hooks, repo: Path) -> None:
    record = work_turn(local_hooks, repo)
    git(repo, "rm", "-qf", "billing/address.py")
    scope = project.project_id(str(repo))
    secret = tokens.create(local_hooks.runtime.storage, actor=ACTOR, project=scope,
                           read_only=False, expires=None, name="bob", who="test")[1]  # fmt: skip
    reply = post(local_hooks, "UserPromptSubmit", repo, "s7", token=secret, prompt=ASK)
    assert record.title in reply  # not read, so not known to be gone
    local_hooks.runtime.retriever.flush_audit()  # written after the answer
    [row] = local_hooks.runtime.storage.list_retrievals(session_id="s7")
    assert NOT_READ in row.reason


def test_search_results_carry_each_records_state(local_hooks: Hooks, repo: Path) -> None:
    record = work_turn(local_hooks, repo)
    edit(repo, "order.city", "order.town")
    res = local_hooks.client.get(
        "/v1/search",
        query_string={"namespace": record.namespace, "q": "format_address"},
        headers={"Authorization": f"Bearer {local_hooks.token}", "Host": "127.0.0.1:37800"},
    )
    [item] = json.loads(res.data)["items"]
    assert item["code"] == {"state": "changed", "paths": ["billing/address.py"],
                            "identifiers": []}  # fmt: skip


# --- wakemark verify --------------------------------------------------------------------------


def cli_env(monkeypatch: pytest.MonkeyPatch, settings: Settings) -> None:
    """The environment a command run with ``main`` takes its settings from."""
    monkeypatch.setenv("WAKEMARK_HOME", str(settings.home))
    monkeypatch.setenv("WAKEMARK_EMBEDDER", "off")
    monkeypatch.setenv("WAKEMARK_ACTOR", ACTOR)
    if settings.database_url:
        monkeypatch.setenv("WAKEMARK_DATABASE_URL", settings.database_url)


def test_verify_counts_lists_the_gone_and_retires_them_only_with_yes(
    backend_settings: Settings,
    repo: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    cli_env(monkeypatch, backend_settings)
    namespace = project.namespace_for(ACTOR, project.project_id(str(repo)))
    (repo / "billing" / "ship.py").write_text("def ship_to(order):\n    return order\n")
    records = {
        "kept": cited(namespace).model_copy(update={"files_touched": ["billing/tax.py"]}),
        "edited": cited(namespace).model_copy(update={"files_touched": ["billing/address.py"]}),
        "gone": MemoryRecord(namespace=namespace, title="ship_to returns the order",
                             files_touched=["billing/ship.py"]),
        "other project": cited("/actor/alice/project/elsewhere/"),
    }  # fmt: skip
    with open_store(backend_settings) as storage:
        for record in records.values():
            storage.put_memory_record(record)
            with storage.transaction() as tx:
                tx.put_anchors(capture(record, str(repo), readable=True))  # type: ignore[arg-type]
    edit(repo, "order.city", "order.town")
    (repo / "billing" / "ship.py").unlink()
    gone_id = records["gone"].record_id

    assert main(["verify", "--project", str(repo)]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0] == "1 current, 1 changed, 1 gone, 0 unchecked"
    assert f"gone  {gone_id}  ship_to returns the order  (billing/ship.py)" in out
    assert main(["verify", "--project", str(repo), "--retire"]) == 0
    assert "would retire 1 memory(ies)" in capsys.readouterr().out
    assert main(["verify", "--project", str(repo), "--yes"]) == 2
    assert main(["verify", "--project", str(repo), "--retire", "--yes"]) == 0
    assert "retired 1 memory(ies)" in capsys.readouterr().out
    with open_store(backend_settings) as storage:
        assert storage.get_memory_record(gone_id) is None
        assert all(storage.get_memory_record(r.record_id) for k, r in records.items()
                   if k != "gone")  # fmt: skip
        [entry, *_] = storage.list_audit()
        assert (entry.action, entry.targets, entry.who) == ("retire", (gone_id,), f"cli:{ACTOR}")
    assert main(["verify", "--project", str(repo)]) == 0
    assert capsys.readouterr().out == "1 current, 1 changed, 0 gone, 0 unchecked\n"


def test_verify_says_why_a_project_outside_the_home_is_unchecked(
    settings: Settings,
    tmp_path: Path,
    user_home: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    cli_env(monkeypatch, settings)
    prepare_home(settings)
    migrate(settings)
    outside = tmp_path / "srv" / "invoicer"  # beside the home, not in it
    (outside / "billing").mkdir(parents=True)
    (outside / "billing" / "address.py").write_text(ADDRESS)
    (outside / "billing" / "tax.py").write_text("RATE = 0.2\n")
    git(outside, "init", "-q")
    record = cited(project.namespace_for(ACTOR, project.project_id(str(outside))))
    with open_store(settings) as storage:
        storage.put_memory_record(record)
        with storage.transaction() as tx:
            tx.put_anchors(capture(record, str(outside), readable=True))  # type: ignore[arg-type]
    assert main(["verify", "--project", str(outside)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "0 current, 0 changed, 0 gone, 1 unchecked"
    assert lines[1].startswith(f"  unchecked: {outside} is outside your home directory")


def test_verify_names_a_project_directory_that_is_not_there(
    settings: Settings, repo: Path, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    cli_env(monkeypatch, settings)
    missing = repo / "moved"  # inside a project: its root must not be checked instead
    assert main(["verify", "--project", str(missing)]) == 2
    assert capsys.readouterr().err == f"wakemark: --project {missing}: no such directory\n"
    assert main(["verify", "--project", str(repo.parent)]) == 2
    err = capsys.readouterr().err
    assert err == f"wakemark: no project at or above {repo.parent} (no .git or marker)\n"


@contextmanager
def open_store(settings: Settings) -> Iterator[Storage]:
    from wakemark.shared.storage import open_storage

    storage = open_storage(settings)
    try:
        yield storage
    finally:
        storage.close()


def test_a_file_that_is_there_but_unreadable_is_changed_not_gone(
    storage: Storage, repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    record = anchored(storage, repo)
    monkeypatch.setattr(staleness, "MAX_FILE_BYTES", 8)  # every cited file is now too large
    for path in ("billing/address.py", "billing/tax.py"):  # and written since capture
        info = (repo / path).stat()
        os.utime(repo / path, ns=(info.st_atime_ns, info.st_mtime_ns + 10**9))
    verdict = CodeCheck(storage).verdicts([record.record_id])[record.record_id]
    assert (verdict.state, verdict.paths) == ("changed", ("billing/address.py", "billing/tax.py"))


def test_a_moved_project_and_files_missing_at_capture_leave_records_unchecked(
    storage: Storage, repo: Path, user_home: Path
) -> None:
    record = anchored(storage, repo)
    repo.rename(user_home / "moved")
    assert CodeCheck(storage).verdicts([record.record_id])[record.record_id].state == "unchecked"
    never = cited().model_copy(update={"files_touched": ["billing/never.py"]})
    anchors = capture(never, str(user_home / "moved"), readable=True)
    assert anchors is not None and anchors.hashed
    assert CodeCheck(storage).verdict(anchors).state == "unchecked"


def test_the_viewers_code_states_for_the_local_client_only(local_hooks: Hooks, repo: Path) -> None:
    record = work_turn(local_hooks, repo)
    edit(repo, "order.city", "order.town")
    other = "mr_" + "0" * 26

    def states(token: str, ns: str = record.namespace) -> Any:
        res = local_hooks.client.get(
            "/v1/memories/code",
            query_string={"namespace": ns, "ids": f"{record.record_id},{other}"},
            headers={"Authorization": f"Bearer {token}", "Host": "127.0.0.1:37800"},
        )
        assert res.status_code == 200, res.data
        return json.loads(res.data)

    assert states(local_hooks.token) == {"checked": True, "note": "", "items": {
        record.record_id: {"state": "changed", "paths": ["billing/address.py"],
                           "identifiers": []}}}  # fmt: skip
    assert states(local_hooks.token, "/actor/nobody/")["items"] == {}
    scope = project.project_id(str(repo))
    secret = tokens.create(local_hooks.runtime.storage, actor=ACTOR, project=scope,
                           read_only=True, expires=None, name="bob", who="test")[1]  # fmt: skip
    assert states(secret) == {"checked": False, "note": NOT_READ, "items": {}}
    bad = local_hooks.client.get(
        "/v1/memories/code",
        query_string={"namespace": record.namespace, "ids": "../x"},
        headers={"Authorization": f"Bearer {local_hooks.token}", "Host": "127.0.0.1:37800"},
    )
    assert bad.status_code == 400
    many = ",".join(f"mr_{i:026d}" for i in range(101))
    too_many = local_hooks.client.get(
        "/v1/memories/code",
        query_string={"namespace": record.namespace, "ids": many},
        headers={"Authorization": f"Bearer {local_hooks.token}", "Host": "127.0.0.1:37800"},
    )
    assert too_many.status_code == 400


def test_a_team_server_checks_the_hashes_the_forwarder_sends(
    settings: Settings, repo: Path, tmp_path: Path
) -> None:
    import hashlib

    from tests.conftest import free_port
    from tests.hooks.test_forwarder import _env, _hook
    from tests.served import serving
    from wakemark.services.api.security import ensure_token
    from wakemark.shared.runtime import Runtime

    # Bound to all interfaces: its clients are other machines, whose files it never reads.
    settings = settings.replace(port=free_port(), host="0.0.0.0", min_prompt_relevance=0.0,
                                min_relevance=0.05)  # fmt: skip
    prepare_home(settings)
    migrate(settings)
    rt = Runtime.build(settings)
    try:
        with serving(rt, settings.port):
            ns = project.namespace_for(ACTOR, project.project_id(str(repo)))
            record = cited(ns)
            rt.storage.put_memory_record(record)
            with rt.storage.transaction() as tx:
                tx.put_anchors(capture(record, str(repo), readable=False))  # type: ignore[arg-type]
            env = _env(tmp_path / "client", settings.port, ensure_token(settings))
            env["CLAUDE_PROJECT_DIR"] = str(repo)

            def ask(session: str) -> str:
                payload = load("claude-code", "UserPromptSubmit", repo)
                payload.update(session_id=session, prompt=ASK)
                done = _hook(env, repo, "claude-code", stdin=json.dumps(payload).encode())
                assert done.returncode == 0
                return done.stdout.decode()

            def index(session: str) -> str:
                payload = load("claude-code", "SessionStart", repo)
                payload.update(session_id=session)
                start = json.dumps(payload).encode()
                done = _hook(env, repo, "claude-code", "SessionStart", stdin=start)
                assert done.returncode == 0
                return done.stdout.decode()

            # First prompt: nothing to check yet; the reply asks for the cited files.
            assert record.title in ask("t1")
            [watched] = (tmp_path / "client" / "watch").iterdir()
            assert watched.read_text().split("\n")[1:3] == ["billing/address.py", "billing/tax.py"]
            # Second: the forwarder sends their hashes, which become the record's anchors.
            assert record.title in ask("t2")
            anchors = rt.storage.get_anchors([record.record_id])[record.record_id]
            sha = hashlib.sha256((repo / "billing" / "address.py").read_bytes()).hexdigest()
            assert anchors.hashed and anchors.files[0].sha256 == sha
            # Third, after an edit: marked; after a delete: left out, and the audit says why.
            edit(repo, "order.city", "order.town")
            assert "(changed since: billing/address.py)" in ask("t3")
            # The session-start index is checked from the same hashes.
            assert f"{record.title.rstrip('.')} (changed since: billing/address.py)" in index("t3")
            git(repo, "rm", "-qf", "billing/tax.py")
            assert record.title not in index("t4")
            assert record.title not in ask("t4")
            rt.retriever.flush_audit()
            [row] = rt.storage.list_retrievals(session_id="t4")
            [candidate] = [c for c in row.candidates if c.record_id == record.record_id]
            assert candidate.skipped == "gone: billing/tax.py"
            assert staleness.FROM_CLIENT in row.reason
    finally:
        rt.close()

"""``wakemark verify`` on a team server's client: no database on the client, the memories
on a served app bound to all interfaces (it reads no client file), each backend. The
client reads the anchors (``GET /v1/memories/anchors``), checks them against a real git
repository made here (an edit, a rename, a delete, a removed identifier) and retires the
gone ones (``POST /v1/memories/retire``); what it prints is what the local verify prints
over the same database. And the routes against what a client may send."""

from __future__ import annotations

import hashlib
import json
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests import test_staleness
from tests.conftest import free_port
from tests.hooks.conftest import ACTOR
from tests.served import serving
from tests.test_staleness import ADDRESS, git
from wakemark.services.api.security import ensure_token
from wakemark.shared import project, tokens
from wakemark.shared.config import Settings
from wakemark.shared.models import MemoryRecord
from wakemark.shared.retrieval.staleness import capture
from wakemark.shared.runtime import Runtime

repo = test_staleness.repo  # the fixture: a git repository under the user's home
CITY = "def format_city(order):\n    return order.city\n"


@dataclass
class Team:
    runtime: Runtime
    settings: Settings
    namespace: str
    bootstrap: str

    def token(self, scope: str | None, read_only: bool = False, actor: str = ACTOR) -> str:
        return tokens.create(self.runtime.storage, actor=actor, project=scope,
                             read_only=read_only, expires=None, name="laptop",
                             who="test")[1]  # fmt: skip

    def call(self, method: str, path: str, token: str, body: Any = None) -> tuple[int, Any]:
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(
            f"http://127.0.0.1:{self.settings.port}{path}", data=data, method=method,
            headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
        )  # fmt: skip
        try:
            with urllib.request.urlopen(req, timeout=10) as res:
                return res.status, json.loads(res.read())
        except urllib.error.HTTPError as exc:
            return exc.code, json.loads(exc.read())


@pytest.fixture
def team(backend_settings: Settings, repo: Path) -> Iterator[Team]:
    # Bound to all interfaces: its clients are other machines, whose files it never reads.
    settings = backend_settings.replace(port=free_port(), host="0.0.0.0")
    rt = Runtime.build(settings)
    try:
        with serving(rt, settings.port):
            ns = project.namespace_for(ACTOR, project.project_id(str(repo)))
            yield Team(rt, settings, ns, ensure_token(settings))
    finally:
        rt.close()


def sha(repo: Path, path: str) -> str:
    return hashlib.sha256((repo / path).read_bytes()).hexdigest()


def put(team: Team, record: MemoryRecord, repo: Path, read: bool = False,
        edited: tuple[str, ...] = ()) -> str:  # fmt: skip
    """``record`` stored with its anchors as a team server takes them: the hashes the
    forwarder sent with the turn's edits (``edited``), or, with ``read``, as a server that
    read the files did (identifiers too: a record imported from a local install)."""
    sent = {p: sha(repo, p) for p in edited}
    anchors = capture(record, str(repo), True) if read else capture(record, None, False, sent)
    assert anchors is not None
    storage = team.runtime.storage
    storage.put_memory_record(record)
    with storage.transaction() as tx:
        tx.put_anchors(anchors)
    return record.record_id


def memory(ns: str, title: str, *files: str) -> MemoryRecord:
    return MemoryRecord(namespace=ns, title=title, summary=title, files_touched=list(files))


def client(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, team: Team, token: str) -> None:
    """A team server's client: a home without a database, the server's port and a token."""
    monkeypatch.setenv("WAKEMARK_HOME", str(tmp_path / "client"))
    monkeypatch.delenv("WAKEMARK_DATABASE_URL", raising=False)
    monkeypatch.setenv("WAKEMARK_PORT", str(team.settings.port))
    monkeypatch.setenv("WAKEMARK_TOKEN", token)
    monkeypatch.setenv("WAKEMARK_ACTOR", ACTOR)
    monkeypatch.setenv("WAKEMARK_EMBEDDER", "off")


def verify(capsys: pytest.CaptureFixture[str], repo: Path, *flags: str) -> tuple[int, str, str]:
    from wakemark.services.cli.main import main

    code = main(["verify", "--project", str(repo), *flags])
    out, err = capsys.readouterr()
    return code, out, err


def test_a_team_client_verifies_and_retires_through_the_api(
    team: Team, repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    ns = team.namespace
    for name, text in (("ship.py", "def ship_to(o):\n    return o\n"), ("old.py", "X = 1\n"),
                       ("city.py", CITY)):  # fmt: skip
        (repo / "billing" / name).write_text(text)
    git(repo, "add", ".")
    git(repo, "commit", "-qm", "more")
    ids = {
        "kept": put(team, memory(ns, "the tax rate is 0.2", "billing/tax.py"), repo,
                    edited=("billing/tax.py",)),
        "edited": put(team, memory(ns, "address falls back", "billing/address.py"), repo,
                      edited=("billing/address.py",)),
        "renamed": put(team, memory(ns, "ship_to returns the order", "billing/ship.py"), repo,
                       edited=("billing/ship.py",)),
        "deleted": put(team, memory(ns, "X is one", "billing/old.py"), repo,
                       edited=("billing/old.py",)),
        "identifier": put(team, memory(ns, "`format_city` reads the city", "billing/city.py"),
                          repo, read=True),
        # Cited, not edited by its turn, not reported by a prompt yet: nothing to compare.
        "waiting": put(team, memory(ns, "tax is read here", "billing/tax.py"), repo),
        "other project": put(team, memory("/actor/alice/project/elsewhere/", "elsewhere",
                                          "billing/old.py"), repo, edited=("billing/old.py",)),
    }  # fmt: skip
    anchors = team.runtime.storage.get_anchors([ids["identifier"]])[ids["identifier"]]
    assert anchors.identifiers == ("format_city",)
    (repo / "billing" / "address.py").write_text(ADDRESS.replace("order.city", "order.town"))
    git(repo, "mv", "billing/ship.py", "billing/shipping.py")
    git(repo, "rm", "-q", "billing/old.py")
    (repo / "billing" / "city.py").write_text(CITY.replace("format_city", "city_of"))

    # What the local verify prints over the server's own database.
    monkeypatch.setenv("WAKEMARK_HOME", str(team.settings.home))
    monkeypatch.setenv("WAKEMARK_ACTOR", ACTOR)
    monkeypatch.setenv("WAKEMARK_EMBEDDER", "off")
    if team.settings.database_url:
        monkeypatch.setenv("WAKEMARK_DATABASE_URL", team.settings.database_url)
    local = verify(capsys, repo)

    secret = team.token(project.project_id(str(repo)))
    client(monkeypatch, tmp_path, team, secret)
    code, out, err = verify(capsys, repo)
    assert (code, out, err) == local
    lines = out.splitlines()
    assert lines[0] == "1 current, 1 changed, 3 gone, 1 unchecked"
    assert sorted(lines[1:]) == sorted([
        f"  gone  {ids['renamed']}  ship_to returns the order  (billing/ship.py)",
        f"  gone  {ids['deleted']}  X is one  (billing/old.py)",
        f"  gone  {ids['identifier']}  `format_city` reads the city  (format_city)",
    ])  # fmt: skip
    assert not (tmp_path / "client" / "wakemark.db").exists()
    gone = [ids["renamed"], ids["deleted"], ids["identifier"]]

    # A dry run by default: nothing is asked of the server.
    code, out, _ = verify(capsys, repo, "--retire")
    assert code == 0 and out.endswith("would retire 3 memory(ies); add --yes to delete them\n")
    assert len(team.runtime.storage.get_memory_records(list(ids.values()))) == len(ids)

    # Refused: a read-only token, a token of another project (nothing deleted).
    monkeypatch.setenv("WAKEMARK_TOKEN", team.token(project.project_id(str(repo)), read_only=True))
    code, _, err = verify(capsys, repo, "--retire", "--yes")
    assert code == 2 and err.startswith("wakemark: verify failed: ") and "read-only" in err
    monkeypatch.setenv("WAKEMARK_TOKEN", team.token("0123456789abcdef"))
    code, out, err = verify(capsys, repo)
    assert (code, out) == (2, "") and "this token is limited to" in err
    assert len(team.runtime.storage.get_memory_records(list(ids.values()))) == len(ids)

    monkeypatch.setenv("WAKEMARK_TOKEN", secret)
    code, out, _ = verify(capsys, repo, "--retire", "--yes")
    assert code == 0 and out.splitlines()[-1] == "retired 3 memory(ies)"
    left = {r.record_id for r in team.runtime.storage.get_memory_records(list(ids.values()))}
    assert left == set(ids.values()) - set(gone)
    [entry, *_] = team.runtime.storage.list_audit()
    assert (entry.action, entry.namespace, sorted(entry.targets)) == ("retire", ns, sorted(gone))
    assert "laptop" in entry.who
    assert verify(capsys, repo) == (0, "1 current, 1 changed, 0 gone, 1 unchecked\n", "")


def test_without_a_server_the_client_says_where_it_looked(
    settings: Settings, repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    monkeypatch.setenv("WAKEMARK_HOME", str(settings.home))
    monkeypatch.setenv("WAKEMARK_PORT", str(free_port()))  # nothing listens there
    monkeypatch.setenv("WAKEMARK_TOKEN", "wmk_x")
    monkeypatch.delenv("WAKEMARK_DATABASE_URL", raising=False)
    code, out, err = verify(capsys, repo)
    assert (code, out) == (2, "")
    assert err.startswith(f"wakemark: no database on this machine ({settings.sqlite_path} ")
    assert "could not be asked: wakemark server is not running at http://127.0.0.1:" in err
    assert not settings.sqlite_path.exists()  # no empty database to report nothing from


def test_the_routes_refuse_what_a_client_may_not_ask(team: Team, repo: Path) -> None:
    ns = team.namespace
    mine = [put(team, memory(ns, f"tax {i}", "billing/tax.py"), repo, edited=("billing/tax.py",))
            for i in range(3)]  # fmt: skip
    other = put(team, memory("/actor/alice/project/elsewhere/", "theirs", "billing/tax.py"),
                repo, edited=("billing/tax.py",))  # fmt: skip
    secret = team.token(project.project_id(str(repo)))

    # The anchors, a page at a time, of this project only.
    seen, after = [], ""
    while after is not None:
        status, page = team.call("GET", f"/v1/memories/anchors?namespace={ns}&limit=2"
                                 + (f"&after={after}" if after else ""), secret)  # fmt: skip
        assert status == 200, page
        seen += [item["record_id"] for item in page["items"]]
        after = page["next"]
    assert sorted(seen) == sorted(mine)
    [item] = team.call("GET", f"/v1/memories/anchors?namespace={ns}&limit=1", secret)[1]["items"]
    assert item["files"] == [{"path": "billing/tax.py", "sha256": sha(repo, "billing/tax.py"),
                              "blob": None}] and item["identifiers"] == []  # fmt: skip
    for query, status, code in (
        ("namespace=/actor/alice/project/elsewhere/", 403, "forbidden_scope"),
        (f"namespace=/actor/{ACTOR}/", 400, "bad_request"),  # a project, not an actor
        (f"namespace={ns}&after=../x", 400, "bad_request"),
        (f"namespace={ns}&limit=501", 400, "bad_request"),
    ):
        answer = team.call("GET", f"/v1/memories/anchors?{query}", secret)
        assert (answer[0], answer[1]["error"]) == (status, code)

    def retire(body: Any, token: str = secret) -> tuple[int, Any]:
        return team.call("POST", "/v1/memories/retire", token, body)

    too_many = [f"mr_{i:026d}" for i in range(1001)]
    for body, status, code in (
        ({"namespace": ns, "ids": ["../x"]}, 422, "validation_error"),
        ({"namespace": ns, "ids": []}, 422, "validation_error"),
        ({"namespace": ns, "ids": too_many}, 422, "validation_error"),
        ({"namespace": ns, "ids": mine, "force": True}, 422, "validation_error"),
        ({"namespace": "/actor/alice/project/elsewhere/", "ids": [other]}, 403, "forbidden_scope"),
        # Another project's id, or one that is not there: all or nothing.
        ({"namespace": ns, "ids": [mine[0], other]}, 404, "not_found"),
        ({"namespace": ns, "ids": [mine[0], "mr_" + "0" * 26]}, 404, "not_found"),
    ):
        answer = retire(body)
        assert (answer[0], answer[1]["error"]) == (status, code)
    assert retire({"namespace": ns, "ids": [mine[0], other]})[1]["message"] == (
        f"not current memories of {ns}: {other}"
    )
    # The bootstrap token may not retire another project's record under this one either.
    assert retire({"namespace": ns, "ids": [other]}, team.bootstrap)[0] == 404
    stored = team.runtime.storage.get_memory_records([*mine, other])
    assert len(stored) == 4 and team.runtime.storage.list_audit(limit=1)[0].action != "retire"

    assert retire({"namespace": ns, "ids": [mine[0], mine[0], mine[1]]}) == (
        200, {"retired": [mine[0], mine[1]]}
    )  # fmt: skip
    left = {r.record_id for r in team.runtime.storage.get_memory_records([*mine, other])}
    assert left == {mine[2], other}
    # Retired is gone: asking again is a 404, not a second audit entry.
    assert retire({"namespace": ns, "ids": [mine[0]]})[0] == 404

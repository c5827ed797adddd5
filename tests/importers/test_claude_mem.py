"""``wakemark import --from claude-mem``: its database, on the schema claude-mem creates."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from tests.test_cli import _env
from tests.test_cli_transfer import _wakemark
from wakemark.services.importers.claude_mem import records
from wakemark.shared import project
from wakemark.shared.config import Settings
from wakemark.shared.storage import open_storage

SCHEMA = Path(__file__).resolve().parents[1] / "fixtures" / "importers" / "claude-mem-schema.sql"
EPOCH = 1_767_261_600_000  # 2026-01-01T10:00:00Z in ms, as claude-mem stores it


def make_db(path: Path) -> Path:
    conn = sqlite3.connect(path)
    conn.executescript(SCHEMA.read_text())
    conn.execute(
        "INSERT INTO sdk_sessions (content_session_id, memory_session_id, project, started_at,"
        " started_at_epoch) VALUES ('c1', 'm1', 'shop', '2026-01-01T10:00:00Z', ?)",
        (EPOCH,),
    )
    obs = (
        "INSERT INTO observations (memory_session_id, project, type, title, subtitle, facts,"
        " narrative, concepts, files_read, files_modified, created_at, created_at_epoch)"
        " VALUES ('m1', 'shop', ?, ?, ?, ?, ?, ?, ?, ?, '2026-01-01T10:00:00Z', ?)"
    )
    conn.execute(obs, ("bugfix", "Coupon total fixed", "percent applied once",
                       json.dumps(["Cart.total applied the coupon twice"]),
                       "The coupon was applied in total() and subtotal().",
                       json.dumps(["coupon", "cart"]), json.dumps(["src/cart.py"]),
                       json.dumps(["src/cart.py", "tests/test_cart.py"]), EPOCH))  # fmt: skip
    conn.execute(obs, ("how-it-works", "Checkout flow", None, None, "Checkout calls total().",
                       None, None, None, EPOCH + 60_000))  # fmt: skip
    conn.execute(
        "INSERT INTO session_summaries (memory_session_id, project, request, investigated,"
        " learned, completed, next_steps, files_read, files_edited, notes, created_at,"
        " created_at_epoch) VALUES ('m1', 'shop', 'fix the coupon total', 'cart.py',"
        " 'total() ran twice', 'the fix and a test', 'release', ?, ?, 'user <private>x</private>',"
        " '2026-01-01T10:05:00Z', ?)",
        (json.dumps(["src/cart.py"]), json.dumps(["src/cart.py"]), EPOCH + 300_000),
    )
    conn.commit()
    conn.close()
    return path


def test_observations_and_summaries_become_records(tmp_path: Path) -> None:
    db = make_db(tmp_path / "claude-mem.db")
    recs = list(records(str(db), lambda name: f"/actor/me/project/{name}/"))
    assert [r.observation_type for r in recs] == ["bugfix", "note", "session_summary"]
    fix, flow, summary = recs
    assert fix.title == "Coupon total fixed" and fix.namespace == "/actor/me/project/shop/"
    assert fix.facts == ["Cart.total applied the coupon twice"]
    assert fix.concepts == ["coupon", "cart"]
    assert fix.files_touched == ["src/cart.py", "tests/test_cart.py"]
    assert fix.created_at.isoformat() == "2026-01-01T10:00:00+00:00" and fix.strategy == "llm"
    assert flow.summary == "Checkout calls total()." and flow.facts == []
    assert summary.title == "fix the coupon total"
    assert summary.summary.splitlines() == [
        "Investigated: cart.py", "Learned: total() ran twice",
        "Completed: the fix and a test", "Next steps: release",
    ]  # fmt: skip
    assert summary.facts == ["user [REDACTED]"]
    again = [r.record_id for r in records(str(db), lambda name: f"/actor/me/project/{name}/")]
    assert again == [r.record_id for r in recs]


@pytest.mark.slow
def test_the_command_imports_once_into_the_named_project(tmp_path: Path) -> None:
    db = make_db(tmp_path / "claude-mem.db")
    env = _env(tmp_path)
    repo = tmp_path / "shop"
    (repo / ".git").mkdir(parents=True)
    done = _wakemark("import", "--from", "claude-mem", str(db), "--project", str(repo), env=env)
    assert b"3 claude-mem record(s); wrote 3 new record(s)" in done.stderr, done.stderr
    # The ids come from claude-mem's rows: a second import writes nothing, wherever to.
    again = _wakemark("import", "--from", "claude-mem", str(db), env=env)
    assert b"wrote 0 new record(s)" in again.stderr
    other = tmp_path / "other"
    by_name = _wakemark("import", "--from", "claude-mem", str(db), env=_env(other))
    assert b"wrote 3 new record(s)" in by_name.stderr  # no --project: the name's namespace
    for home, namespace in (
        (tmp_path / "home", project.namespace(str(repo))),
        (other / "home", project.namespace_for(project.actor(), project.project_id("shop"))),
    ):
        storage = open_storage(Settings(home=home))
        try:
            assert storage.list_memory_records(namespace).total == 3
        finally:
            storage.close()
    bad = tmp_path / "not.db"
    bad.write_text("not sqlite")
    failed = _wakemark("import", "--from", "claude-mem", str(bad), env=env)
    assert failed.returncode == 1 and b"not a claude-mem database" in failed.stderr


REAL = (
    Path(__file__).resolve().parents[1] / "fixtures" / "importers" / "claude-mem-observations.json"
)


def test_a_real_observation_row_becomes_its_record(tmp_path: Path) -> None:
    # A row as a real claude-mem database returned it (its get_observations tool),
    # inserted into the tables claude-mem creates; every column the row has is kept.
    rows = json.loads(REAL.read_text())
    path = tmp_path / "claude-mem.db"
    conn = sqlite3.connect(path)
    conn.executescript(SCHEMA.read_text())
    for row in rows:
        conn.execute(
            "INSERT INTO sdk_sessions (content_session_id, memory_session_id, project,"
            " started_at, started_at_epoch) VALUES (?, ?, ?, ?, ?)",
            (row["memory_session_id"], row["memory_session_id"], row["project"],
             row["created_at"], row["created_at_epoch"]),
        )  # fmt: skip
        columns = ", ".join(row)
        conn.execute(
            f"INSERT INTO observations ({columns}) VALUES ({', '.join('?' * len(row))})",
            tuple(row.values()),
        )
    conn.commit()
    conn.close()
    recs = list(records(str(path), lambda name: f"/actor/me/project/{name}/"))
    assert len(recs) == len(rows) == 1
    rec = recs[0]
    assert rec.namespace == "/actor/me/project/brain/"
    assert rec.title == "LinkedIn article written announcing Brain open-source release"
    assert rec.observation_type == "feature" and rec.strategy == "llm"
    assert rec.summary.startswith("A comprehensive LinkedIn announcement article was written")
    assert len(rec.facts) == 11
    assert rec.facts[0] == (
        'Article titled "I open-sourced my AI coordination layer. Here\'s why."'
        " created at docs/linkedin-open-source-article.md"
    )
    assert rec.concepts == ["why-it-exists", "problem-solution", "pattern", "trade-off"]
    assert rec.files_touched == ["/Users/marcus/Git/brain/docs/linkedin-open-source-article.md"]
    assert rec.created_at.isoformat() == "2026-03-11T02:53:39.551000+00:00"


REAL_DB = Path(__file__).resolve().parents[1] / "fixtures" / "importers" / "claude-mem-db.sql"


def test_a_real_database_becomes_its_records(tmp_path: Path) -> None:
    # A real claude-mem database (its own older schema, no files on its summaries), cut
    # down to two sessions of two projects: every observation type and three summaries.
    path = tmp_path / "claude-mem.db"
    conn = sqlite3.connect(path)
    conn.executescript(REAL_DB.read_text())
    conn.commit()
    conn.close()
    recs = list(records(str(path), lambda name: f"/actor/me/project/{name}/"))
    assert len(recs) == 11
    obs, summaries = recs[:8], recs[8:]
    assert [r.observation_type for r in obs] == [
        "discovery", "change", "change", "change", "feature", "refactor", "bugfix", "decision",
    ]  # fmt: skip
    assert {r.observation_type for r in summaries} == {"session_summary"}
    assert [r.namespace for r in recs].count("/actor/me/project/owner/") == 6
    assert [r.namespace for r in recs].count("/actor/me/project/Quwon-App/") == 5

    review = obs[0]
    assert review.title == "Home Directory Git Configuration Review"
    assert review.summary.startswith("Reviewed the home directory .gitignore file")
    assert len(review.facts) == 4 and review.facts[3] == (
        ".gitignore contains 24 lines managing selective tracking of home directory dotfiles"
    )
    assert review.concepts == ["how-it-works", "pattern"]
    assert review.files_touched == ["/home/owner/.gitignore"]  # files_modified is "[]"
    assert review.created_at.isoformat() == "2026-01-08T05:03:46.581000+00:00"
    assert obs[5].files_touched == ["src/components/common/BottomTabBar/BottomTabBar.tsx"]

    db_reset, untrack, untracked = summaries
    assert db_reset.title == (
        "Debug and fix npm run db:reset command failing due to seed/test data insertion issues"
    )
    assert untrack.title == "Remove .zshrc from Git History Tracking"
    lines = untrack.summary.splitlines()
    assert [line.split(":", 1)[0] for line in lines] == [
        "Investigated", "Learned", "Completed", "Next steps",
    ]  # fmt: skip
    assert lines[2] == (
        "Completed: Successfully removed .zshrc from git tracking using 'git rm --cached"
        " .zshrc'. The file remains on the filesystem but is now staged for deletion from"
        " version control. Once committed, future changes to .zshrc will not be tracked in"
        " git history."
    )
    assert len(untrack.facts) == 1 and untrack.facts[0].startswith(
        "The user asked in Japanese about preventing .zshrc from being tracked."
    )
    assert untrack.files_touched == []  # files_read and files_edited are NULL
    assert untrack.created_at.isoformat() == "2026-01-08T05:04:23.152000+00:00"
    assert untracked.summary.splitlines()[-1] == (
        "Next steps: Task completed. .zshrc is now untracked and no longer shows up in git"
        " status. User confirmed the file is no longer being detected."
    )
    # Two summaries of one session (prompts 1 and 2) stay two records.
    assert len({r.record_id for r in recs}) == 11
    env = _env(tmp_path)
    done = _wakemark("import", "--from", "claude-mem", str(path), env=env)
    assert b"11 claude-mem record(s); wrote 11 new record(s)" in done.stderr, done.stderr
    storage = open_storage(Settings(home=tmp_path / "home"))
    try:
        for name, count in (("owner", 6), ("Quwon-App", 5)):
            namespace = project.namespace_for(project.actor(), project.project_id(name))
            assert storage.list_memory_records(namespace).total == count
    finally:
        storage.close()

"""``wakemark import --from markdown``: one manual record per section of a memory file."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.importers.twice import import_twice
from tests.test_cli import _env
from tests.test_cli_transfer import _wakemark
from wakemark.services.importers.markdown import files, records, sections
from wakemark.shared import project
from wakemark.shared.config import Settings
from wakemark.shared.storage import open_storage

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "importers" / "CLAUDE.md"
NS = "/actor/me/project/p/"


def test_each_section_of_a_real_claude_md_is_a_record() -> None:
    recs = records(str(FIXTURE), NS)
    titles = [r.title for r in recs]
    assert titles[0] == "Product (CLAUDE.md)" and len(recs) == 16
    assert "Worktrees › Daily workflow (CLAUDE.md)" in titles
    quick = next(r for r in recs if r.title.startswith("Agent Instructions › Quick Reference"))
    assert "bd ready" in quick.summary  # a '#' comment inside a code fence is no heading
    landing = recs[-1]
    assert landing.title.startswith("Agent Instructions › Landing the Plane")
    assert "**PUSH TO REMOTE** - This is MANDATORY:" in landing.facts
    assert all(r.strategy == "manual" and r.namespace == NS for r in recs)
    assert all(r.files_touched == [str(FIXTURE)] for r in recs)
    assert [r.record_id for r in records(str(FIXTURE), NS)] == [r.record_id for r in recs]


def test_cursor_rule_frontmatter_names_the_text_before_any_heading() -> None:
    rule = '---\ndescription: "Python style"\nglobs: "**/*.py"\n---\n'
    rule += "Use ruff.\n## Tests\nRun pytest.\n"
    assert list(sections(rule)) == [
        (["Python style"], "Use ruff."),
        (["Python style", "Tests"], "Run pytest."),
    ]


@pytest.mark.slow
def test_the_command_imports_a_projects_memory_files_once(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    (repo / ".git").mkdir(parents=True)
    (repo / "memory-bank").mkdir()
    shutil.copy(FIXTURE, repo / "CLAUDE.md")
    (repo / "memory-bank" / "activeContext.md").write_text("# Current focus\nThe importer.\n")
    assert files(str(repo)) == [
        str(repo / "CLAUDE.md"),
        str(repo / "memory-bank" / "activeContext.md"),
    ]
    env = _env(tmp_path)
    # A home never migrated is migrated by the command itself (as every database command is).
    dry = _wakemark("import", "--from", "markdown", str(repo), "--dry-run", env=env)
    assert dry.returncode == 0, dry.stderr
    assert b"2 file(s), 17 section(s); would write 17 new record(s)" in dry.stderr, dry.stderr
    import_twice(
        env, "markdown", str(repo), first=b"wrote 17 new record(s)", again=b"wrote 0 new record(s)"
    )
    storage = open_storage(Settings(home=tmp_path / "home"))
    try:
        page = storage.list_memory_records(project.namespace(str(repo)), limit=50)
        assert page.total == 17 and {r.strategy for r in page.items} == {"manual"}
        assert len(storage.records_missing_embedding(50)) == 17  # the backfill embeds them
    finally:
        storage.close()

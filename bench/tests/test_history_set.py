"""The linking rules of ``bench/_history_set.py`` on a tiny git history made here: which
commits become gold for which changelog entries, which entries are dropped and why, what
a memory keeps of a commit, and which entries of another changelog become negatives."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
from pathlib import Path
from typing import Any

import pytest

from bench import _codemem
from bench import _history_set as hs

CHANGES = """\
Version 1.1.0
-------------

Unreleased

-   Drop support for Python 3.8.
-   Parsing an empty document no longer crashes. :issue:`12`
-   Names with accents are accepted everywhere. :issue:`13`
-   A request can be given a deadline in seconds. :pr:`14`
-   Documents may declare their encoding up front.
    (:issue:`15`)
-   Bump the lockfile dependencies. :pr:`16`
-   The cache is smaller. :issue:`17`
-   The cache no longer grows without bound. :issue:`17`
-   Support gzip compression in responses. :pr:`18`
-   Streams are closed when the reader hits an error midway. :pr:`19`
-   Iterating a document yields its sections lazily, in order. :issue:`20`
-   The lexer tracks column numbers. :issue:`21`
-   Headers are case-insensitive. :issue:`22`
-   Cookies keep their order. :issue:`23`
-   The lexer tracks line numbers. :issue:`24`
"""

OTHER_CHANGES = """\
## Version 2.0

- Drop support for Python 3.8.
- Connection pools are reused across redirects. [#7](https://github.com/o/other/issues/7)
- Proxy headers are stripped when redirecting to another host.
- Ok.
"""


class Repo:
    def __init__(self, path: Path) -> None:
        self.path = path
        self.tick = 0
        path.mkdir(parents=True)
        self.git("init", "-q", "-b", "main")

    def git(self, *args: str, author: str = "Dev <dev@example.org>") -> str:
        name, email = author[:-1].split(" <")
        date = f"2024-01-01T00:{self.tick // 60:02d}:{self.tick % 60:02d}+00:00"
        env = {
            **os.environ,
            "GIT_AUTHOR_NAME": name,
            "GIT_AUTHOR_EMAIL": email,
            "GIT_COMMITTER_NAME": name,
            "GIT_COMMITTER_EMAIL": email,
            "GIT_AUTHOR_DATE": date,
            "GIT_COMMITTER_DATE": date,
            "GIT_CONFIG_GLOBAL": os.devnull,
            "GIT_CONFIG_NOSYSTEM": "1",
        }
        out = subprocess.run(
            ["git", *args], cwd=self.path, env=env, check=True, capture_output=True, text=True
        )
        return out.stdout.strip()

    def commit(
        self, message: str, files: dict[str, str], author: str = "Dev <dev@example.org>"
    ) -> str:
        for name, text in files.items():
            target = self.path / name
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(text)
            self.git("add", name)
        self.tick += 1
        self.git("commit", "-q", "-m", message, author=author)
        return self.git("rev-parse", "HEAD")

    def changes(self, upto: str, typo: str = "") -> dict[str, str]:
        """CHANGES.rst with the entries up to and including the one starting ``upto``,
        misspelling ``typo`` in that last one."""
        head, _, _ = CHANGES.partition("-   Drop support")
        lines = CHANGES[len(head) :].splitlines(keepends=True)
        end = next(i for i, line in enumerate(lines) if line.startswith(f"-   {upto}"))
        while end + 1 < len(lines) and lines[end + 1].startswith("    "):
            end += 1
        if typo:
            lines[end] = lines[end].replace(typo, typo[0] + typo)
        return {"CHANGES.rst": head + "".join(lines[: end + 1])}


@pytest.fixture(scope="module")
def history(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Two mirrors (``o/lib`` and ``o/other``), ``o/lib`` with a commit per rule, and the
    set built from them."""
    tmp_path = tmp_path_factory.mktemp("history")
    lib = Repo(tmp_path / "work-lib")
    c: dict[str, str] = {}
    c["core"] = lib.commit("add core", {"src/core.py": "x = 1\n", **lib.changes("Drop support")})
    c["py38"] = lib.commit("drop python 3.8", {"pyproject.toml": "[project]\n"})
    # named in the subject, and the commit that wrote the entry
    c["crash"] = lib.commit(
        "fix parser crash (#12)",
        {"src/parser.py": "p = 1\n", **lib.changes("Parsing an empty")},
    )
    # closed in the body; its trailer is no part of the answer
    c["accents"] = lib.commit(
        "accept accented names\n\nNormalise first.\n\nFixes #13\n"
        "Co-authored-by: Other <other@example.org>",
        {"src/names.py": "n = 1\n"},
    )
    lib.commit("changelog for 13", lib.changes("Names with"))
    # named nowhere: the commit that wrote the entry (one entry, with code) is gold
    c["deadline"] = lib.commit(
        "add a timeout option",
        {"src/net.py": "t = 1\n", **lib.changes("A request can")},
    )
    # "see #15" is not the work; the entry comes in a changelog-only commit
    lib.commit("tidy imports, see #15", {"src/core.py": "x = 2\n"})
    lib.commit("update changelog", lib.changes("Documents may"))
    # a bot's commit is never gold
    lib.commit(
        "Bump the lockfile (#16)",
        {"requirements.txt": "a==2\n", **lib.changes("Bump the lockfile")},
        author="dependabot[bot] <bot@example.org>",
    )
    # two entries of different words cite #17: neither is linked
    lib.commit("shrink cache (#17)", {"src/cache.py": "c = 1\n"})
    lib.commit("changelog for 17", lib.changes("The cache no longer"))
    # an entry that copies its gold subject is dropped
    lib.commit(
        "Support gzip compression in responses (#18)",
        {"src/gzip.py": "g = 1\n", **lib.changes("Support gzip")},
    )
    # a merged PR whose commits name nothing: they are gold
    lib.git("checkout", "-q", "-b", "streams")
    c["pr1"] = lib.commit("close streams on error", {"src/stream.py": "s = 1\n"})
    c["pr2"] = lib.commit("test stream errors", {"tests/test_stream.py": "def test(): pass\n"})
    lib.git("checkout", "-q", "main")
    lib.tick += 1
    lib.git("merge", "-q", "--no-ff", "streams", "-m", "Merge pull request #19 from o/streams")
    lib.commit("changelog for 19", lib.changes("Streams are closed"))
    # an entry pasted from its gold commit's message is dropped
    lib.commit(
        "lazy sections (#20)\n\nIterating a document yields its sections lazily, in order.",
        {"src/doc.py": "d = 1\n", **lib.changes("Iterating a")},
    )
    # a revert and a release are never gold
    lib.commit('Revert "columns" (#21)', {"src/lexer.py": "l = 0\n"})
    lib.commit(
        "release version 1.1.0 (#21)", {"src/version.py": "v = 2\n", **lib.changes("The lexer")}
    )
    # a commit that wrote two entries did the work of neither
    lib.commit("various fixes", {"src/http.py": "h = 1\n", **lib.changes("Cookies keep")})
    # the writer of an entry a later commit reworded (fixing a typo, with docs) is gold
    c["lines"] = lib.commit(
        "track line numbers",
        {"src/lexer.py": "l = 1\n", **lib.changes("The lexer tracks line", "lexer")},
    )
    lib.commit("fix typos", {"docs/index.rst": "lexer\n", **lib.changes("The lexer tracks line")})
    # a big commit: its memory keeps 20 files and 1,500 characters
    c["big"] = lib.commit(
        "reformat\n\n" + "word " * 400, {f"src/m{i:02d}.py": f"m = {i}\n" for i in range(25)}
    )

    other = Repo(tmp_path / "work-other")
    other_head = other.commit("changes", {"CHANGES.md": OTHER_CHANGES})
    for name, repo in (("o+lib", lib), ("o+other", other)):
        (tmp_path / "mirrors" / name).mkdir(parents=True)
        subprocess.run(
            [
                "git",
                "clone",
                "-q",
                "--bare",
                str(repo.path),
                str(tmp_path / "mirrors" / name / "repo"),
            ],
            check=True,
        )
    source = hs.Source(
        hs.Changelog("o/lib", lib.git("rev-parse", "HEAD"), "CHANGES.rst"),
        "MIT",
        hs.Changelog("o/other", other_head, "CHANGES.md"),
    )
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(hs, "MIRRORS", tmp_path / "mirrors")
        mp.setitem(hs.SOURCES, "lib", source)
        stats = hs.build("lib", tmp_path / "datasets")
    out = tmp_path / "datasets" / "lib"

    def rows(name: str) -> list[dict[str, Any]]:
        return [json.loads(line) for line in (out / f"{name}.jsonl").read_text().splitlines()]

    return {
        "commits": c,
        "stats": stats,
        "out": out,
        "memories": {m["id"]: m for m in rows("memories")},
        "queries": {q["query"]: q for q in rows("queries")},
        "negatives": [q["query"] for q in rows("negatives")],
    }


def test_gold_by_subject_body_writer_and_merged_pr(history: dict[str, Any]) -> None:
    c, queries = history["commits"], history["queries"]
    gold = {text: set(q["gold"]) for text, q in queries.items()}
    assert gold == {
        "Parsing an empty document no longer crashes.": {c["crash"]},
        "Names with accents are accepted everywhere.": {c["accents"]},
        "A request can be given a deadline in seconds.": {c["deadline"]},
        "Streams are closed when the reader hits an error midway.": {c["pr1"], c["pr2"]},
        "The lexer tracks line numbers.": {c["lines"]},
    }
    source = queries["Parsing an empty document no longer crashes."]["source"]
    assert source.startswith("o/lib@") and source.endswith(":L7 (Version 1.1.0) cites #12")


def test_dropped_entries_are_counted_by_reason(history: dict[str, Any]) -> None:
    assert history["stats"]["dropped"] == {
        "no gold commit": 5,  # see #15; the bot's #16; the revert's and release's #21; #22, #23
        "number cited by another entry": 2,  # both #17 entries
        "copy of a gold subject": 1,  # #18
        "pasted into a gold message": 1,  # #20
    }
    assert history["stats"]["queries"] == 5


def test_memory_of_a_commit(history: dict[str, Any]) -> None:
    c, memories = history["commits"], history["memories"]
    assert len(memories) == history["stats"]["memories"] == 22  # every commit but the merge
    crash = memories[c["crash"]]
    assert crash["prompt"] == "fix parser crash (#12)"
    assert crash["files"] == ["src/parser.py"]  # the changelog path is not a file of it
    assert memories[c["accents"]]["answer"] == "Normalise first.\n\nFixes #13"
    big = memories[c["big"]]
    assert len(big["files"]) == 20 and big["files"] == sorted(big["files"])
    assert 1400 < len(big["answer"]) <= 1500
    assert crash["date"] == "2024-01-01T00:00:03+00:00"


def test_negatives_come_from_the_other_changelog_less_shared_entries(
    history: dict[str, Any],
) -> None:
    # "Drop support for Python 3.8." is in both changelogs, and "Ok." is too short
    assert history["negatives"] == [
        "Connection pools are reused across redirects.",
        "Proxy headers are stripped when redirecting to another host.",
    ]
    readme = (history["out"] / "README.md").read_text()
    assert "o/lib @" in readme and "MIT" in readme and "o/other's changelog" in readme


def test_codemem_lists_and_locates_extra_sets(
    history: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    root = history["out"].parent
    (root / "partial").mkdir()
    (root / "partial" / "memories.jsonl").write_text("")
    (root / "werkzeug").mkdir()  # codemem-dev's name: its cached database would be taken
    for name in _codemem.FILES:
        (root / "werkzeug" / name).write_text("")
    monkeypatch.setattr(_codemem, "EXTRA", root)
    assert _codemem.extra_projects() == ["lib"]
    assert _codemem.directory("lib") == history["out"]
    assert _codemem.directory("werkzeug") == _codemem.DATASET / "werkzeug"


def test_a_missing_mirror_is_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(hs, "MIRRORS", tmp_path)
    assert hs.main(["itsdangerous"]) == 1
    assert "fetch github:pallets/itsdangerous" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("raw", "text", "numbers"),
    [
        (
            "Fix ``a()`` in :class:`~pkg.Thing`. :issue:`3`, :pr:`4`",
            "Fix a() in pkg.Thing.",
            (3, 4),
        ),
        ("Faster (:issue:`1`, :issue:`2`). Thanks :user:`x` for the PR.", "Faster.", (1, 2)),
        (
            "Parse per :rfc:`9110`.\n  [#9](https://github.com/o/lib/issues/9)",
            "Parse per RFC 9110.",
            (9,),
        ),
        (
            "Like o/else#5 and [#6](https://github.com/o/else/pull/6). (Issue #7)",
            "Like o/else#5 and.",
            (7,),
        ),
        ("Fixed a loop https://github.com/O/Lib/pull/31", "Fixed a loop", (31,)),
        (
            r"Uploads check charset\_name. (\#4) iter\* (\< 3)",
            "Uploads check charset_name. iter* (< 3)",
            (4,),
        ),
        ("Backported <https://github.com/py/cpython/issues/5#x>. (#8)", "Backported.", (8,)),
    ],
)
def test_cleaning_and_citations(raw: str, text: str, numbers: tuple[int, ...]) -> None:
    assert hs.clean(raw) == text
    assert hs.cited(raw, "o/lib") == numbers


def test_a_run_takes_the_environment_over_its_build(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("WAKEMARK_TOPIC_QUERY", "on")
    monkeypatch.setenv("WAKEMARK_HOME", str(tmp_path / "elsewhere"))
    built = _codemem.settings_for(tmp_path / "lib", tmp_path / "model.onnx")
    assert built.topic_query == "off"  # a build is the same whatever the run's settings
    run = _codemem.run_settings(built, session_neighbours=0)
    assert (run.topic_query, run.session_neighbours) == ("on", 0)
    assert (run.home, run.model_path) == (tmp_path / "lib", tmp_path / "model.onnx")
    assert (run.database_url, run.consolidate) == (built.database_url, built.consolidate)


def test_any_fetched_project_is_a_set_from_the_command_line(
    history: dict[str, Any], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    root = history["out"].parent.parent
    monkeypatch.setattr(hs, "MIRRORS", root / "mirrors")
    monkeypatch.setattr(hs, "EXTRA", root / "cli")
    lib, other = "o/lib@HEAD:CHANGES.rst", "o/other@HEAD:CHANGES.md"
    argv = ["--source", f"lib={lib}", "--negatives", other, "--licence", "MIT"]
    assert hs.main(argv) == 0
    assert capsys.readouterr().out.startswith("lib: 22 memories, 5 queries")
    out = root / "cli" / "lib"
    for name in ("memories", "queries", "negatives"):  # the set SOURCES would have built
        assert (out / f"{name}.jsonl").read_text() == (history["out"] / f"{name}.jsonl").read_text()
    # The README pins the commits HEAD named, and its command builds the same set again.
    command = (out / "README.md").read_text().split("`python -m bench._history_set ")[1]
    command = command.split("`")[0]
    head = history["stats"]["commit"]
    assert f"--source=lib=o/lib@{head}:CHANGES.rst" in command and "@HEAD" not in command
    assert hs.main(shlex.split(command)) == 0
    assert (out / "queries.jsonl").read_text() == (history["out"] / "queries.jsonl").read_text()


@pytest.mark.parametrize(
    ("argv", "error"),
    [
        (["--source", "x=o/lib@HEAD:CHANGES.rst"], "--source needs --negatives"),
        (["--negatives", "o/other@HEAD:CHANGES.md"], "--negatives goes with --source"),
        (["--source", "x=o/lib:CHANGES.rst", "--negatives", "o/other@HEAD:CHANGES.md"],
         "is not OWNER/REPO@REV:CHANGELOG"),
        (["--source", "x=o/lib@HEAD:NEWS.md", "--negatives", "o/other@HEAD:CHANGES.md"],
         "o/lib has no file NEWS.md at"),
        (["--source", "attrs=o/lib@HEAD:CHANGES.rst", "--negatives", "o/other@HEAD:CHANGES.md"],
         "attrs is the name of a built-in set"),
        (["attrs", "--source", "x=o/lib@HEAD:CHANGES.rst", "--negatives", "o/other@HEAD:x"],
         "and no project names"),
        (["nosuch"], "unknown project(s) ['nosuch']"),
    ],
)  # fmt: skip
def test_a_bad_command_line_is_refused_in_one_line(
    history: dict[str, Any],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    argv: list[str],
    error: str,
) -> None:
    monkeypatch.setattr(hs, "MIRRORS", history["out"].parent.parent / "mirrors")
    with pytest.raises(SystemExit) as exited:
        hs.main(argv)
    assert exited.value.code == 2
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert error in last


def test_a_revision_the_mirror_lacks_is_named(
    history: dict[str, Any], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(hs, "MIRRORS", history["out"].parent.parent / "mirrors")
    argv = ["--source", "x=o/lib@v9.9:CHANGES.rst", "--negatives", "o/other@HEAD:CHANGES.md"]
    assert hs.main(argv) == 1
    assert "has no revision v9.9" in capsys.readouterr().err
    assert hs.main(["--source", "x=o/gone@HEAD:C.md", "--negatives", "o/other@HEAD:x"]) == 1
    assert "fetch github:o/gone" in capsys.readouterr().err

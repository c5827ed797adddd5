"""Build more codemem-dev-style sets from the git history and changelog of public projects.

codemem-dev (``/work/shared/datasets/codemem-dev``) has two projects; the relevance gate
needs more to be fitted on several and checked leave-one-project-out, small ones among
them. Each project here gives codemem-dev's three files and a README with counts and a
BM25 baseline, in ``~/.wakemark-data/datasets/<project>/`` (``WAKEMARK_EXTRA_DATASETS``
overrides; ``bench/_codemem.py`` opens them). Derived data stays outside the repository.

- ``memories.jsonl``: the newest ``MAX_MEMORIES`` non-merge commits as ``{"id", "prompt"
  (subject), "answer" (body less trailers, <= 1,500 chars), "files" (changed paths less
  changelog paths, sorted, <= 20), "date" (author date)}``.
- ``queries.jsonl``: ``{"qid", "query", "gold", "source"}``, one per changelog entry that
  cites an issue or PR number, markup, numbers and thanks stripped (``clean``).
- ``negatives.jsonl``: the same with ``gold: []``, up to ``NEGATIVES`` entries of another
  project's changelog (``Source.negatives``).

Linking, as codemem-dev's README states it (``History.gold``): gold are the commits naming
a cited number in their subject (unless "see"/"related to"/"introduced in" precedes it) or
after fixes/closes/resolves in their body, with the commit that wrote the entry when it
wrote no other (found by the entry's first line, or the towncrier fragment named by the
number); with neither, the commits of the merged PR. Bots', reverts, releases and commits
touching only the changelog (or it and the credits file) are never gold. A number cited
by entries of different words links none of them (a word-for-word backport copy is the
same entry). Dropped: entries nearly identical to a gold subject (token Jaccard >= 0.8)
or pasted into a gold message (>= 50 % of word trigrams), and entries shorter than 15 or
longer than 500 characters.

Rebuilt by these rules, codemem-dev's werkzeug and jinja get its memories and 272 of 278
/ 128 of 129 of its queries, 95 % / 96 % of those with the same gold, and more (older
entries that cite ``(:issue:`N`)`` in parentheses). Where it differs on purpose: files are
capped at 20 after the changelog paths go, and no negative is drawn whose words are close
(Jaccard >= 0.5) to the project's own entries or subjects ("Drop support for Python 3.8."
is in every pallets changelog, and each project has the commit that did it).

Run: ``python -m bench._history_set [project ...]`` (all of ``SOURCES`` by default). Any
other project with a changelog citing issue or PR numbers is one more set, named on the
command line (``--help``)::

    python -m bench._history_set --source NAME=OWNER/REPO@REV:CHANGELOG \
        --negatives OWNER/REPO@REV:CHANGELOG [--licence SPDX-ID]

``REV`` is any revision the mirror holds (``HEAD``, a tag, a sha); the set's README pins
the commit it resolved to. The run reads bare git directories fetched with the search
tool's ``fetch`` (``fetch github:<owner>/<name>``), ``/work/.mirror/<owner>+<name>/repo``
(``WAKEMARK_MIRRORS`` overrides the root), each holding the commit pinned below:
pallets/itsdangerous, pallets/markupsafe, pallets-eco/flask-wtf, pallets-eco/flask-sqlalchemy,
pallets-eco/wtforms, python-attrs/attrs, marshmallow-code/marshmallow, and for negatives
pallets/quart and urllib3/urllib3. A missing mirror or commit stops the run with its name.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import re
import shlex
import subprocess
import sys
from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench._codemem import EXTRA, PROJECTS
from wakemark.shared.retrieval.gate import STOPWORDS

MIRRORS = Path(os.environ.get("WAKEMARK_MIRRORS", "/work/.mirror"))
MAX_MEMORIES = 3000  # newest non-merge commits, as codemem-dev's werkzeug
MAX_ANSWER = 1500
MAX_FILES = 20
NEGATIVES = 200
QUERY_CHARS = (15, 500)  # shorter entries say nothing; longer ones are mostly code blocks
COPY_JACCARD = 0.8  # an entry this close to a gold subject is a copy, not a rewording
COPY_TRIGRAMS = 0.5  # share of an entry's word trigrams found in a gold message
SHARED_JACCARD = 0.5  # a negative this close to the project's own text may be relevant to it


@dataclass(frozen=True)
class Changelog:
    repo: str  # owner/name on GitHub
    commit: str  # pinned: the set is rebuilt identically from the same mirror
    path: str  # the changelog file at ``commit``


@dataclass(frozen=True)
class Source:
    changelog: Changelog
    licence: str
    negatives: Changelog  # another project's, far from this one's topic

    @property
    def repo(self) -> str:
        return self.changelog.repo

    @property
    def commit(self) -> str:
        return self.changelog.commit


ATTRS = Changelog("python-attrs/attrs", "c1dc5dcba16ed827aa6dcad896b41a3afedb4e32", "CHANGELOG.md")
FLASK_SQLALCHEMY = Changelog(
    "pallets-eco/flask-sqlalchemy", "3e3e92ba557649ab5251eda860a67656cc8c10af", "CHANGES.rst"
)
FLASK_WTF = Changelog(
    "pallets-eco/flask-wtf", "1c9d7760b9ac92fb97af68c132623c94fd9c7cb8", "docs/changes.rst"
)
ITSDANGEROUS = Changelog(
    "pallets/itsdangerous", "672971d66a2ef9f85151e53283113f33d642dabd", "CHANGES.rst"
)
MARKUPSAFE = Changelog(
    "pallets/markupsafe", "1251593f6b0e3b45f2cc8aba662622bc22d6a5e2", "CHANGES.rst"
)
MARSHMALLOW = Changelog(
    "marshmallow-code/marshmallow", "341b927f219205704728c05cd61f04d7e9727523", "CHANGELOG.rst"
)
WTFORMS = Changelog(
    "pallets-eco/wtforms", "62bbb07f5f7d17397819ccb2b7ad1718a413e76d", "CHANGES.rst"
)
# Changelogs read for negatives only: web projects far from the libraries they pair with.
QUART = Changelog("pallets/quart", "657bca721bbcc53047fc964c0593c5c0d19f45c8", "CHANGES.md")
URLLIB3 = Changelog("urllib3/urllib3", "6a8536b6e1b0cbe69ae801337c599951e527ae29", "CHANGES.rst")
# Smallest first. flask-sqlalchemy's negatives come from wtforms (another Flask extension,
# as codemem-dev pairs werkzeug with jinja); wtforms' from urllib3, as flask-wtf wraps it.
SOURCES = {
    "itsdangerous": Source(ITSDANGEROUS, "BSD-3-Clause", URLLIB3),
    "markupsafe": Source(MARKUPSAFE, "BSD-3-Clause", QUART),
    "flask-wtf": Source(FLASK_WTF, "BSD-3-Clause", URLLIB3),
    "flask-sqlalchemy": Source(FLASK_SQLALCHEMY, "BSD-3-Clause", WTFORMS),
    "wtforms": Source(WTFORMS, "BSD-3-Clause", URLLIB3),
    "attrs": Source(ATTRS, "MIT", URLLIB3),
    "marshmallow": Source(MARSHMALLOW, "MIT", QUART),
}

# Changelog files and towncrier fragment folders, anywhere in a project's history.
CHANGELOG_PATH = re.compile(
    r"(^|/)(CHANGES|CHANGELOG|HISTORY|NEWS)(\.\w+)?$|^changelog(\.d)?/|^docs/(changelog|changes)\.rst$",
    re.I,
)
# Credits: a commit that only updates these and the changelog is bookkeeping, not the work.
CREDITS_PATH = re.compile(r"(^|/)(AUTHORS|CONTRIBUTORS)(\.\w+)?$", re.I)
CHANGELOG_PATHSPECS = (
    ":(icase,glob)**/CHANGES*", ":(icase,glob)**/CHANGELOG*", ":(icase,glob)**/HISTORY*",
    ":(icase,glob)**/NEWS*", "changelog.d", "changelog", "docs/changelog.rst", "docs/changes.rst",
)  # fmt: skip
BOT = re.compile(r"\[bot\]|dependabot|pre-commit-ci|github-actions|renovate", re.I)
# Releases and their bookkeeping ("Update changelog and bump dev version").
RELEASE = re.compile(
    r"^(release|releasing)\b|^prepare\b.*(release|\d+\.\d+)|\bbump(ed)? (the )?(dev )?version"
    r"|^bump(ed)? to v?\d|^version \d|\bversion to v?\d|^start version"
    r"|^v?\d+(\.\d+)+\S*( release)?$|^update(d)? (the )?(changelog|changes)\b",
    re.I,
)
REVERT = re.compile(r"^revert\b", re.I)
TRAILER = re.compile(r"^\s*([\w-]+-by|change-id|cc):\s", re.I)
NOT_THE_WORK = re.compile(r"\b(see|related to|introduced in)\s*:?\s*(issue|pr)?\s*\(?$", re.I)
CLOSING = re.compile(
    r"\b(?:fix(?:es|ed)?|close[sd]?|resolve[sd]?)\b:?\s+((?:(?:,|and|\s)*#\d+)+)", re.I
)
PLAIN_REF = re.compile(r"(?<![\w/&])#(\d+)\b")
SAID_REF = re.compile(r"\b(?:issues?|pull(?: requests?)?|prs?|gh)\s*:?\s*(?=#\d)", re.I)
ROLE = re.compile(r":(\w+)(?::\w+)?:`([^`]*)`")
CITE_ROLES = {"issue", "issues", "pr", "prs", "pull"}
DROP_ROLES = CITE_ROLES | {"user", "ghsa", "cve", "gh"}
MD_LINK = re.compile(r"\[([^\]]*)\]\(([^)\s]*)\)")
RST_LINK = re.compile(r"`([^`<]*?)\s*<([^>]*)>`__?")
GITHUB_REF = re.compile(r"github\.com/([\w.-]+/[\w.-]+)/(?:issues|pull)/(\d+)", re.I)
# A link written out bare (rich's changelog ends each entry with one), or in <...>.
BARE_REF = re.compile(r"<?https?://github\.com/[\w.-]+/[\w.-]+/(?:issues|pull)/\d+[\w#/-]*>?", re.I)
RST_UNDERLINE = re.compile(r"^([=\-~^*+#`])\1{2,}\s*$")
MD_HEADING = re.compile(r"^#{1,6}\s+(.*)")
ESCAPE = re.compile(r"\\([!-/:-@\[-`{-~])")  # Markdown's and RST's: "\#12", "charset\_normalizer"
BULLET = re.compile(r"^[-*+]\s+")
VERSION = re.compile(r"\d+(?:\.\d+)+(?:[a-z]+\d*)?")
THANKS = re.compile(r"\bThanks?\b[^.]*(\.|$)|\bThank you\b[^.]*(\.|$)")
WORD = re.compile(r"\w+")
BM25_WORD = re.compile(r"[a-z0-9]+")


class MissingMirror(Exception):
    pass


def git(gitdir: Path, *args: str) -> str:
    return subprocess.run(
        ["git", f"--git-dir={gitdir}", *args], check=True, capture_output=True, text=True
    ).stdout


def mirror(repo: str, commit: str) -> Path:
    """The bare git directory of ``repo`` holding ``commit``, or ``MissingMirror`` naming it."""
    gitdir = MIRRORS / repo.replace("/", "+") / "repo"
    if not gitdir.is_dir():
        raise MissingMirror(f"no mirror of {repo} at {gitdir}: fetch github:{repo} first")
    probe = subprocess.run(
        ["git", f"--git-dir={gitdir}", "cat-file", "-e", f"{commit}^{{commit}}"],
        capture_output=True,
    )
    if probe.returncode:
        raise MissingMirror(f"the mirror of {repo} at {gitdir} has no revision {commit}")
    return gitdir


# --- commits -----------------------------------------------------------------------------


@dataclass
class Commit:
    sha: str
    parents: list[str]
    author: str
    date: str
    subject: str
    body: str
    files: list[str] = field(default_factory=list)

    @property
    def merge(self) -> bool:
        return len(self.parents) > 1

    def eligible(self) -> bool:
        """Whether this commit may be gold: not a bot's, a revert, a release or a commit
        that touches nothing but the changelog (and the credits)."""
        return not (
            self.merge
            or BOT.search(self.author)
            or REVERT.match(self.subject)
            or RELEASE.search(self.subject)
            or all(CHANGELOG_PATH.search(f) or CREDITS_PATH.search(f) for f in self.files)
        )

    def memory(self) -> dict[str, Any]:
        answer = "\n".join(
            line for line in self.body.strip().splitlines() if not TRAILER.match(line)
        )
        files = sorted(f for f in self.files if not CHANGELOG_PATH.search(f))
        return {
            "id": self.sha,
            "prompt": self.subject,
            "answer": answer.strip()[:MAX_ANSWER].rstrip(),
            "files": files[:MAX_FILES],
            "date": self.date,
        }


def commits(gitdir: Path, commit: str) -> list[Commit]:
    """Every commit reachable from ``commit``, newest first (git log's order)."""
    out = git(
        gitdir, "log", "--no-renames", "--name-only",
        "--format=%x1e%H%x1f%P%x1f%an <%ae>%x1f%aI%x1f%s%x1f%b%x1f", commit,
    )  # fmt: skip
    result = []
    for record in out.split("\x1e")[1:]:
        sha, parents, author, date, subject, body, files = record.split("\x1f")
        result.append(
            Commit(sha, parents.split(), author, date, subject.strip(), body,
                   [f for f in files.splitlines() if f.strip()])
        )  # fmt: skip
    return result


# --- changelog entries -------------------------------------------------------------------


@dataclass(frozen=True)
class Entry:
    line: int  # 1-based line of the entry's first line
    version: str
    raw: str
    numbers: tuple[int, ...]  # issue/PR numbers of this repository it cites, in order


def entries(text: str, repo: str) -> list[Entry]:
    """The top-level bullet entries of an RST or Markdown changelog, with the version
    heading above each. An entry runs until the next bullet, heading or unindented text."""
    lines = text.splitlines()
    found: list[Entry] = []
    version = ""
    start, body = 0, list[str]()

    def close() -> None:
        nonlocal body
        if body:
            raw = "\n".join(body).strip()
            found.append(Entry(start, version, raw, cited(raw, repo)))
        body = []

    for i, line in enumerate(lines):
        nxt = lines[i + 1] if i + 1 < len(lines) else ""
        heading = None
        if line.strip() and not line[0].isspace() and RST_UNDERLINE.match(nxt):
            heading = line
        elif (md := MD_HEADING.match(line)) is not None:
            heading = md.group(1)
        if heading is not None:
            close()
            if (v := VERSION.search(heading)) is not None:
                version = v.group()
            continue
        if BULLET.match(line) and not RST_UNDERLINE.match(line):
            close()
            start, body = i + 1, [BULLET.sub("", line)]
        elif body and (not line.strip() or line[0].isspace()):
            body.append(line)
        else:
            close()
    close()
    return found


def cited(raw: str, repo: str) -> tuple[int, ...]:
    """Issue/PR numbers of ``repo`` that a changelog entry cites: ``:issue:`` / ``:pr:``
    roles, ``#123``, and links to the repository's issues or pulls (a link to another
    repository's is not this project's number)."""
    numbers: list[int] = []
    text = raw
    for pattern in (MD_LINK, RST_LINK):
        for m in pattern.finditer(text):
            numbers.extend(_cites(m.group(2), repo))
        text = pattern.sub(lambda m: " " if GITHUB_REF.search(m.group(2)) else m.group(1), text)
    for m in BARE_REF.finditer(text):
        numbers.extend(_cites(m.group(), repo))
    text = BARE_REF.sub(" ", text)
    for m in ROLE.finditer(text):
        if m.group(1) in CITE_ROLES and "/" not in m.group(2):
            numbers.extend(int(n) for n in re.findall(r"\d+", m.group(2)))
    text = ROLE.sub(" ", text)
    numbers.extend(int(n) for n in PLAIN_REF.findall(text))
    return tuple(dict.fromkeys(numbers))


def _cites(link: str, repo: str) -> list[int]:
    """The issue or PR number a link cites, if it is one of ``repo``'s."""
    ref = GITHUB_REF.search(link)
    return [int(ref.group(2))] if ref and ref.group(1).lower() == repo.lower() else []


def _role(m: re.Match[str]) -> str:
    role, content = m.group(1), m.group(2)
    if role in DROP_ROLES:
        return ""
    if role in ("rfc", "pep"):
        return f"{role.upper()} {content}"
    if (titled := re.match(r"(.*?)\s*<[^>]*>$", content)) is not None and titled.group(1):
        content = titled.group(1)
    return content.lstrip("~!.")


def clean(raw: str) -> str:
    """An entry as a person would type it: no markup, no issue numbers, no thanks."""
    text = ROLE.sub(_role, THANKS.sub(" ", ESCAPE.sub(r"\1", raw)))
    for pattern in (MD_LINK, RST_LINK):
        text = pattern.sub(lambda m: "" if GITHUB_REF.search(m.group(2)) else m.group(1), text)
    text = PLAIN_REF.sub("", SAID_REF.sub("", BARE_REF.sub("", text)))
    text = text.replace("`", "")
    text = re.sub(r"\*\*(.+?)\*\*", r"\1", text)
    text = re.sub(r"(?<![\w*])\*(?=\S)([^*]+?)(?<=\S)\*(?![\w*])", r"\1", text)
    text = re.sub(r"\s+", " ", text)
    text = re.sub(r"(?<!\w)\(\s*(?:[,;]|and\b|\s)*\)", "", text)  # what held the numbers
    text = re.sub(r"\(\s*[,;]\s*", "(", re.sub(r"\s+\)", ")", text))
    text = re.sub(r"\s+([.,;:])(?=\s|$)", r"\1", text)
    text = re.sub(r"([.,;:])(?:\s*,)+", r"\1", text)
    text = re.sub(r"[\s,]+$", "", text)
    return re.sub(r"\s+", " ", text).strip()


# --- linking -----------------------------------------------------------------------------


def tokens(text: str) -> list[str]:
    return WORD.findall(text.lower())


def jaccard(a: str, b: str) -> float:
    x, y = set(tokens(a)), set(tokens(b))
    return len(x & y) / len(x | y) if x | y else 0.0


def trigram_share(entry: str, message: str) -> float:
    def grams(text: str) -> set[tuple[str, ...]]:
        t = tokens(text)
        return {tuple(t[i : i + 3]) for i in range(len(t) - 2)}

    mine = grams(entry)
    return len(mine & grams(message)) / len(mine) if mine else 0.0


def names(number: int, text: str) -> bool:
    """Whether a commit subject names ``#number`` as the work it does."""
    for m in re.finditer(rf"(?<![\w/&])(?:#|gh-){number}\b", text, re.I):
        if not NOT_THE_WORK.search(text[: m.start()]):
            return True
    return False


def closes(number: int, body: str) -> bool:
    return any(number in map(int, re.findall(r"\d+", m.group(1))) for m in CLOSING.finditer(body))


@dataclass
class ChangelogEdits:
    """What each commit did to the changelog: the top-level bullet lines it added and
    removed; which commits wrote each bullet line (keyed by its words, markup and numbers
    aside, so that renumbering a line does not write it again); and for each number the
    commit that added its towncrier fragment."""

    added: Counter[str] = field(default_factory=Counter)
    removed: Counter[str] = field(default_factory=Counter)
    wrote: defaultdict[str, list[str]] = field(default_factory=lambda: defaultdict(list))
    fragment: dict[int, str] = field(default_factory=dict)

    def one_entry(self, sha: str) -> bool:
        """Whether the commit added one entry (rewording a neighbour or two on the way): a
        commit that brought several in is a changelog update, and one that added none
        only reworded or moved the line (a typo fix), neither the work."""
        return self.added[sha] - self.removed[sha] == 1 and self.added[sha] <= 3


def line_key(line: str) -> str:
    return " ".join(tokens(clean(line)))


def changelog_edits(gitdir: Path, commit: str) -> ChangelogEdits:
    out = git(
        gitdir, "log", "--reverse", "--no-merges", "--no-renames", "-p", "-U0", "--format=%x1e%H",
        commit, "--", *CHANGELOG_PATHSPECS,
    )  # fmt: skip
    edits = ChangelogEdits()
    for record in out.split("\x1e")[1:]:
        sha, _, diff = record.partition("\n")
        for part in re.split(r"^diff --git ", diff, flags=re.M)[1:]:
            header, _, hunks = part.partition("\n@@")
            path = header.split("\n", 1)[0].split(" b/")[-1]
            fragment = re.match(r"changelog(?:\.d)?/(\d+)\.", path, re.I)
            if fragment:  # a towncrier fragment: one entry, named by its number
                edits.added[sha] += "\nnew file mode" in header
                if "\nnew file mode" in header:
                    edits.fragment.setdefault(int(fragment.group(1)), sha)
                continue
            lines = ("@@" + hunks).splitlines()
            added = [x[1:] for x in lines if x.startswith("+") and BULLET.match(x[1:])]
            edits.added[sha] += len(added)
            edits.removed[sha] += sum(1 for x in lines if x.startswith("-") and BULLET.match(x[1:]))
            for line in added:
                edits.wrote[line_key(BULLET.sub("", line))].append(sha)
    return edits


@dataclass
class History:
    gitdir: Path
    commit: str
    repo: str
    changelog: str
    all: list[Commit]
    edits: ChangelogEdits

    def __post_init__(self) -> None:
        self.by_sha = {c.sha: c for c in self.all}
        self.memories = [c for c in self.all if not c.merge][:MAX_MEMORIES]
        self.kept = {c.sha for c in self.memories}
        self.merges: dict[int, Commit] = {}
        for c in self.all:
            m = re.match(r"Merge pull request #(\d+)\b", c.subject) or re.search(
                r"\(#(\d+)\)\s*$", c.subject
            )
            if c.merge and m:
                self.merges.setdefault(int(m.group(1)), c)

    def ok(self, sha: str) -> bool:
        return sha in self.by_sha and self.by_sha[sha].eligible()

    def origin(self, entry: Entry, numbers: Sequence[int]) -> list[str]:
        """The oldest commit in the history of the entry's first line (``git log -L``)
        whose change to it cites one of ``numbers``: a reworded line's writer."""
        out = git(self.gitdir, "log", f"-L{entry.line},{entry.line}:{self.changelog}",
                  "--format=%x1e%H", self.commit)  # fmt: skip
        found = []
        for record in out.split("\x1e")[1:]:
            sha, _, patch = record.partition("\n")
            added = "\n".join(x[1:] for x in patch.splitlines() if x.startswith("+"))
            if set(cited(added, self.repo)) & set(numbers):
                found = [sha]
        return found

    def gold(self, numbers: Sequence[int], copies: Sequence[Entry]) -> list[str]:
        """The commits that did the work of an entry citing ``numbers`` (``copies``: the
        entry and its word-for-word copies in older versions). Those naming a number in
        their subject or closing it in their body; with the commits that wrote the entry
        (its first line as it reads now, else as first written, or the number's towncrier
        fragment) when they added no other entry; failing all, the commits of the merged
        PR. Only eligible commits among the memories count."""

        def usable(shas: Iterable[str]) -> list[str]:
            return [s for s in shas if s in self.kept and self.ok(s)]

        def wrote(shas: Iterable[str]) -> list[str]:
            return [s for s in usable(shas) if self.edits.one_entry(s)]

        gold = usable(
            c.sha
            for c in self.memories
            if any(names(n, c.subject) or closes(n, c.body) for n in numbers)
        )
        heads = [e.raw.split("\n", 1)[0] for e in copies]
        adders = wrote(s for head in heads for s in self.edits.wrote.get(line_key(head), []))
        adders += wrote(self.edits.fragment[n] for n in numbers if n in self.edits.fragment)
        if not adders:
            adders = wrote(s for e in copies for s in self.origin(e, numbers))
        gold += adders
        if not gold:
            for n in numbers:
                if (merge := self.merges.get(n)) is not None:
                    pr = git(
                        self.gitdir, "rev-list", "--no-merges", f"{merge.parents[0]}..{merge.sha}"
                    )
                    gold += usable(pr.split())
        return list(dict.fromkeys(gold))


def load_history(source: Source) -> History:
    gitdir = mirror(source.repo, source.commit)
    return History(
        gitdir,
        source.commit,
        source.repo,
        source.changelog.path,
        commits(gitdir, source.commit),
        changelog_edits(gitdir, source.commit),
    )


def changelog(log: Changelog) -> list[Entry]:
    text = git(mirror(log.repo, log.commit), "show", f"{log.commit}:{log.path}")
    return entries(text, log.repo)


def queries(
    project: str, source: Source, history: History, drops: Counter[str]
) -> list[dict[str, Any]]:
    """The changelog's entries that cite a number as prompts with their gold commits. An
    entry repeated word for word in older versions (a backport) is one entry, asked once;
    a number that entries of different words cite links none of them."""
    copies: dict[str, list[Entry]] = defaultdict(list)
    for e in changelog(source.changelog):
        if e.numbers:
            copies[clean(e.raw)].append(e)
    citing = Counter(n for group in copies.values() for n in {n for e in group for n in e.numbers})
    out: list[dict[str, Any]] = []
    for text, group in copies.items():
        first = group[0]
        numbers = [n for n in first.numbers if citing[n] == 1]
        if not numbers:
            drops["number cited by another entry"] += 1
            continue
        if not QUERY_CHARS[0] <= len(text) <= QUERY_CHARS[1]:
            drops["too short or too long"] += 1
            continue
        gold = history.gold(numbers, group)
        if not gold:
            drops["no gold commit"] += 1
            continue
        golds = [history.by_sha[s] for s in gold]
        if any(jaccard(text, c.subject) >= COPY_JACCARD for c in golds):
            drops["copy of a gold subject"] += 1
            continue
        if any(trigram_share(text, f"{c.subject}\n{c.body}") >= COPY_TRIGRAMS for c in golds):
            drops["pasted into a gold message"] += 1
            continue
        cites = ",".join(f"#{n}" for n in first.numbers)
        out.append(
            {
                "qid": f"{project}-q{len(out):04d}",
                "query": text,
                "gold": gold,
                "source": f"{history.repo}@{history.commit[:12]}:{history.changelog}"
                f":L{first.line} (Version {first.version}) cites {cites}",
            }
        )
    return out


def negatives(project: str, source: Source, history: History) -> list[dict[str, Any]]:
    """Entries of the paired project's changelog, less those close to this project's own
    changelog entries or commit subjects (``Drop support for Python 3.8.`` is in both, and
    this project has the commit that did it: such a prompt is not irrelevant here)."""
    other = source.negatives
    mine = [clean(e.raw) for e in changelog(source.changelog)]
    mine += [c.subject for c in history.memories]
    mine_tokens = [set(tokens(t)) for t in mine]
    pool: list[tuple[Entry, str]] = []
    seen: set[str] = set()
    for e in changelog(other):
        text = clean(e.raw)
        if text in seen or not QUERY_CHARS[0] <= len(text) <= QUERY_CHARS[1]:
            continue
        seen.add(text)
        t = set(tokens(text))
        if any(len(t & m) / len(t | m) >= SHARED_JACCARD for m in mine_tokens if t | m):
            continue
        pool.append((e, text))
    picked = sorted(
        random.Random(project).sample(pool, min(NEGATIVES, len(pool))), key=lambda p: p[0].line
    )
    return [
        {
            "qid": f"{project}-neg{i:04d}",
            "query": text,
            "gold": [],
            "source": f"{other.repo}@{other.commit[:12]}:{other.path}:L{e.line}"
            f" (Version {e.version})",
        }
        for i, (e, text) in enumerate(picked)
    ]


# --- BM25 baseline -----------------------------------------------------------------------


class BM25:
    """Okapi BM25 as rank_bm25's ``BM25Okapi`` (k1 1.5, b 0.75, negative idf floored at
    0.25 of the mean idf), so the figures compare with codemem-dev's README."""

    def __init__(self, docs: Sequence[Sequence[str]], k1: float = 1.5, b: float = 0.75):
        self.k1, self.b = k1, b
        self.tf = [Counter(d) for d in docs]
        self.len = [len(d) for d in docs]
        self.avg = sum(self.len) / len(docs)
        df = Counter(t for d in docs for t in set(d))
        n = len(docs)
        idf = {t: math.log(n - f + 0.5) - math.log(f + 0.5) for t, f in df.items()}
        floor = 0.25 * sum(idf.values()) / len(idf)
        self.idf = {t: v if v >= 0 else floor for t, v in idf.items()}

    def scores(self, query: Iterable[str]) -> list[float]:
        out = [0.0] * len(self.tf)
        for t in query:
            idf = self.idf.get(t)
            if idf is None:
                continue
            for i, tf in enumerate(self.tf):
                f = tf.get(t)
                if f:
                    norm = self.k1 * (1 - self.b + self.b * self.len[i] / self.avg)
                    out[i] += idf * f * (self.k1 + 1) / (f + norm)
        return out


def baseline(
    memories: list[dict[str, Any]], qs: list[dict[str, Any]], negs: list[dict[str, Any]]
) -> dict[str, float]:
    """BM25 over prompt + answer + files: R@5, R@10 and MRR of the real queries, and the
    share of negatives whose top score beats the top score 90 % of real queries reach.
    Words are lowercased letter-digit runs less stopwords: on codemem-dev this gives
    .824 / .870 / .717 (werkzeug) and .725 / .788 / .635 (jinja) against its README's
    .813 / .877 / .717 and .741 / .782 / .633."""
    ids = [m["id"] for m in memories]

    def words(text: str) -> list[str]:
        return [w for w in BM25_WORD.findall(text.lower()) if w not in STOPWORDS]

    index = BM25([words(f"{m['prompt']} {m['answer']} {' '.join(m['files'])}") for m in memories])

    def ranked(text: str) -> list[tuple[float, str]]:
        return sorted(zip(index.scores(words(text)), ids, strict=True), key=lambda p: -p[0])

    r5 = r10 = rr = 0.0
    tops: list[float] = []
    for q in qs:
        order = ranked(q["query"])
        tops.append(order[0][0])
        gold = set(q["gold"])
        ranks = [i for i, (_, sha) in enumerate(order) if sha in gold]
        r5 += sum(1 for r in ranks if r < 5) / len(gold)
        r10 += sum(1 for r in ranks if r < 10) / len(gold)
        rr += 1 / (ranks[0] + 1) if ranks else 0.0
    tops.sort()
    bar = tops[int(0.1 * len(tops))]  # 90 % of real queries reach this top score
    above = sum(1 for q in negs if ranked(q["query"])[0][0] >= bar)
    n = len(qs)
    return {"r5": r5 / n, "r10": r10 / n, "mrr": rr / n, "negatives_above": above / len(negs)}


# --- output ------------------------------------------------------------------------------


SPEC = re.compile(r"([\w.-]+/[\w.-]+)@([^:\s]+):(\S+)")  # OWNER/REPO@REV:PATH


def resolve(spec: str) -> Changelog:
    """``OWNER/REPO@REV:PATH`` as a changelog pinned to the commit ``REV`` names in the
    mirror; ``ValueError`` saying what is wrong, ``MissingMirror`` naming what to fetch."""
    match = SPEC.fullmatch(spec)
    if match is None:
        raise ValueError(f"{spec!r} is not OWNER/REPO@REV:CHANGELOG (e.g. o/lib@HEAD:CHANGES.rst)")
    repo, rev, path = match.groups()
    gitdir = mirror(repo, rev)
    commit = git(gitdir, "rev-parse", f"{rev}^{{commit}}").strip()
    listed = git(gitdir, "ls-tree", "--name-only", commit, "--", path).strip()
    if listed != path:
        raise ValueError(f"{repo} has no file {path} at {commit[:12]}")
    return Changelog(repo, commit, path)


def build(project: str, out_root: Path = EXTRA, source: Source | None = None) -> dict[str, Any]:
    """``project``'s set (``source``, else ``SOURCES[project]``) in ``out_root/project``."""
    source = source or SOURCES[project]
    history = load_history(source)
    drops: Counter[str] = Counter()
    qs = queries(project, source, history, drops)
    negs = negatives(project, source, history)
    mems = [c.memory() for c in history.memories]
    out = out_root / project
    out.mkdir(parents=True, exist_ok=True)
    for name, rows in (("memories", mems), ("queries", qs), ("negatives", negs)):
        text = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows)
        (out / f"{name}.jsonl").write_text(text)
    stats = {
        "project": project,
        "repo": source.repo,
        "commit": source.commit,
        "licence": source.licence,
        "memories": len(mems),
        "first": min(m["date"] for m in mems)[:7],
        "last": max(m["date"] for m in mems)[:7],
        "queries": len(qs),
        "gold_per_query": sum(len(q["gold"]) for q in qs) / max(len(qs), 1),
        "negatives": len(negs),
        "negatives_from": source.negatives.repo,
        "command": command(project, source),
        "dropped": dict(drops),
        "bm25": baseline(mems, qs, negs) if qs and negs else {},
    }
    (out / "README.md").write_text(readme(stats))
    return stats


def command(project: str, source: Source) -> str:
    """The arguments that build the set again, from the same commits."""
    if SOURCES.get(project) == source:
        return project
    spec = "{0.repo}@{0.commit}:{0.path}".format
    return shlex.join(
        [f"--source={project}={spec(source.changelog)}", f"--negatives={spec(source.negatives)}",
         f"--licence={source.licence}"]
    )  # fmt: skip


def readme(s: dict[str, Any]) -> str:
    b = s["bm25"]
    drops = ", ".join(f"{k} {v}" for k, v in sorted(s["dropped"].items())) or "none"
    counts = (
        f"| {s['memories']:,} ({s['first']} → {s['last']}) | {s['queries']} "
        f"| {s['gold_per_query']:.2f} | {s['negatives']} ({s['negatives_from']}'s changelog) |"
    )
    scores = (
        f"| {b.get('r5', 0):.3f} | {b.get('r10', 0):.3f} | {b.get('mrr', 0):.3f} "
        f"| {100 * b.get('negatives_above', 0):.0f} % |"
    )
    return f"""# {s["project"]}: coding-memory retrieval and relevance, from real project history

Built by `python -m bench._history_set {s["command"]}` (wakemark's `bench/_history_set.py`)
from {s["repo"]} @ {s["commit"]} ({s["licence"]}), in codemem-dev's format and by its
linking rules (see that module's docstring). Derived data: not for wakemark's repository.

| memories (commits) | queries | gold per query | negatives (from) |
|---|---|---|---|
{counts}

Changelog entries citing a number but dropped: {drops}.

## Baseline (BM25 over prompt + answer + files, k1 1.5 b 0.75)
| R@5 | R@10 | MRR | share of negatives above the BM25 top-1 score 90 % of real queries reach |
|---|---|---|---|
{scores}
"""


def arguments() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m bench._history_set",
        description="Build codemem-dev-style sets (memories, queries, negatives) from a"
        " project's git history and changelog, into $WAKEMARK_EXTRA_DATASETS/<name>/.",
    )
    parser.add_argument(
        "projects", nargs="*", help=f"sets to build, of {', '.join(SOURCES)} (default: all)"
    )
    parser.add_argument(
        "--source",
        metavar="NAME=OWNER/REPO@REV:CHANGELOG",
        help="build one set from any fetched repository instead, named NAME",
    )
    parser.add_argument(
        "--negatives",
        metavar="OWNER/REPO@REV:CHANGELOG",
        help="with --source: the changelog of another project, its entries the negatives",
    )
    parser.add_argument(
        "--licence", default="licence not given", help="with --source: the project's licence"
    )
    return parser


def main(argv: list[str]) -> int:
    parser = arguments()
    args = parser.parse_args(argv)
    if args.source is None and args.negatives is not None:
        parser.error("--negatives goes with --source")
    try:
        if args.source is not None:
            name, _, spec = args.source.partition("=")
            if args.projects or not spec or not re.fullmatch(r"[\w.-]+", name):
                parser.error("--source takes NAME=OWNER/REPO@REV:CHANGELOG, and no project names")
            if args.negatives is None:
                parser.error("--source needs --negatives (another project's changelog)")
            if name in SOURCES or name in PROJECTS:
                parser.error(f"{name} is the name of a built-in set: give the new one another")
            try:
                source = Source(resolve(spec), args.licence, resolve(args.negatives))
            except ValueError as e:
                parser.error(str(e))
            plan = [(name, source)]
        else:
            unknown = [p for p in args.projects if p not in SOURCES]
            if unknown:
                parser.error(f"unknown project(s) {unknown}; known: {sorted(SOURCES)}")
            plan = [(p, SOURCES[p]) for p in args.projects or SOURCES]
        for project, source in plan:
            s = build(project, EXTRA, source)
            b = s["bm25"]
            print(
                f"{project}: {s['memories']} memories, {s['queries']} queries "
                f"({s['gold_per_query']:.2f} gold), {s['negatives']} negatives; BM25 "
                f"R@5 {b.get('r5', 0):.3f} R@10 {b.get('r10', 0):.3f} MRR {b.get('mrr', 0):.3f} "
                f"negatives above {100 * b.get('negatives_above', 0):.0f} %; dropped {s['dropped']}"
            )
    except MissingMirror as e:
        print(e, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

"""Rule-based observation type and salient concepts for a deterministic record."""

from __future__ import annotations

import re
from collections.abc import Iterable
from pathlib import PurePosixPath

_WORDS = re.compile(r"[a-z']+")
_BUGFIX = {
    "fix", "fixes", "fixed", "fixing", "bug", "bugs", "error", "errors", "broken", "wrong",
    "fail", "fails", "failing", "failed", "failure", "crash", "crashes", "regression",
    "exception", "traceback", "incorrect",
}  # fmt: skip
_REFACTOR = {
    "rename", "renamed", "refactor", "refactoring", "refactored", "extract", "move", "moved",
    "cleanup", "clean", "simplify", "reorganize", "split", "dedupe", "tidy",
}  # fmt: skip
_FEATURE = {
    "add", "adds", "adding", "implement", "implementing", "create", "new", "support",
    "introduce", "build", "enable",
}  # fmt: skip
_DECISION = {"decide", "decided", "decision", "choose", "chose", "prefer", "pick", "opt"}
_QUESTION = {
    "why", "how", "what", "explain", "where", "which", "when", "who", "does", "do", "is",
    "are", "can", "could", "should", "would", "whats",
}  # fmt: skip


def classify(prompt: str, answer_head: str, *, edits: bool, fail_then_pass: bool) -> str:
    """Type by rule: test fail→pass, question without edits, then words of the prompt
    (or, if the prompt says nothing, of the answer's head). An answer that
    reports a failure without any edit tells of a bug, it does not fix one."""
    if fail_then_pass:
        return "bugfix"
    words = _WORDS.findall(prompt.lower())
    # "what's", "where's": the question word before its contraction
    asks = bool(words) and (words[0].split("'")[0] in _QUESTION or prompt.rstrip().endswith("?"))
    if not edits and asks:
        return "discovery"
    found = _by_words(prompt.lower()) or _by_words(answer_head.lower(), bugfix=edits)
    return found or "change"


def _by_words(text: str, bugfix: bool = True) -> str | None:
    words = set(_WORDS.findall(text))
    if bugfix and words & _BUGFIX:
        return "bugfix"
    if words & _REFACTOR:
        return "refactor"
    if words & _FEATURE:
        return "feature"
    if words & _DECISION or "we will" in text or "we'll" in text or "let's go with" in text:
        return "decision"
    return None


_IDENT = re.compile(
    r"\b(?:[A-Z][a-z0-9]+(?:[A-Z][A-Za-z0-9]*)+"  # CamelCase, HTTPServer-ish
    r"|[a-z][a-z0-9]*(?:[A-Z][a-z0-9]*)+"  # lowerCamel
    r"|_*[a-z][a-z0-9]*(?:_[a-z0-9]+)+_*"  # snake_case
    r"|[A-Z][A-Z0-9]*(?:_[A-Z0-9]+)+)\b"  # CONSTANT_CASE
)
_DOTTED = re.compile(r"[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*")
_FILE_EXT = re.compile(r"\.(?:py|pyi|js|jsx|ts|tsx|md|json|toml|ya?ml|go|rs|java|rb|sh|txt|sql)$")
_BACKTICK = re.compile(r"`([^`\n]{2,80})`")
_FRAMEWORKS = {
    "pytest", "flask", "django", "fastapi", "celery", "redis", "postgres", "postgresql",
    "sqlite", "docker", "react", "vue", "svelte", "typescript", "ruff", "mypy", "numpy",
    "pandas", "pydantic", "sqlalchemy", "jest", "vitest", "cargo", "gunicorn", "pgvector",
    "kubernetes", "webpack", "vite", "nextjs", "express", "rails", "spring", "terraform",
    "graphql", "grpc", "kafka", "rabbitmq", "nginx", "alembic", "eslint", "poetry",
}  # fmt: skip
_NOT_CONCEPTS = {"the", "and", "for", "self", "none", "true", "false", "init", "main"}
MAX_CONCEPTS = 12


class _Tally:
    def __init__(self) -> None:
        self.score: dict[str, int] = {}
        self.first: dict[str, int] = {}
        self.spelling: dict[str, str] = {}

    def add(self, term: str, weight: int) -> None:
        term = term.strip("_.-")
        key = term.lower()
        if len(term) < 3 or len(term) > 100 or key in _NOT_CONCEPTS:
            return
        if key not in self.score:
            self.first[key] = len(self.first)
            self.spelling[key] = term
            self.score[key] = 0
        self.score[key] += weight

    def top(self, n: int) -> list[str]:
        keys = sorted(self.score, key=lambda k: (-self.score[k], self.first[k]))
        return [self.spelling[k] for k in keys[:n]]


def concepts(
    prompt: str,
    answer: str,
    error_names: Iterable[str],
    files: Iterable[str],
    commands: Iterable[str],
) -> list[str]:
    """≤ 12 salient terms, highest weight first, ties in order of first appearance."""
    tally = _Tally()
    for name in error_names:
        tally.add(name, 3)
    for text, weight in ((prompt, 2), (answer[:4000], 1)):
        for span in _BACKTICK.findall(text):
            if _DOTTED.fullmatch(span) and not _FILE_EXT.search(span):
                tally.add(span, weight)  # `Cart.total`, `parse_args`: named on purpose
        for ident in _IDENT.findall(text):
            tally.add(ident, weight)
    for path in files:
        stem = PurePosixPath(path).stem
        if stem and not stem.startswith("."):
            tally.add(stem, 2)
    lowered = " ".join([prompt.lower(), answer[:4000].lower(), *commands])
    for word in sorted(_FRAMEWORKS & set(re.findall(r"[a-z]+", lowered))):
        tally.add(word, 1)
    return tally.top(MAX_CONCEPTS)

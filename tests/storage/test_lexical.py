"""The query sanitizer shared by both backends."""

from __future__ import annotations

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from wakemark.shared.retrieval.lexical import select_terms
from wakemark.shared.storage.lexical import (
    escape_like,
    namespace_pattern,
    or_query,
    substring_pattern,
    tokenize,
)


def test_tokenize_keeps_identifiers_and_splits_paths() -> None:
    assert tokenize("Fix parse_args in src/cli/main.py, then FIX it") == [
        "fix",
        "parse_args",
        "in",
        "src",
        "cli",
        "main",
        "py",
        "then",
        "it",
    ]


def test_tokenize_drops_short_and_symbol_only_tokens() -> None:
    assert tokenize('a C++ "x" ___ __init__ é café') == ["__init__", "café"]
    assert tokenize("AND OR NOT NEAR * ^ : ( )") == ["and", "or", "not", "near"]
    assert tokenize("\x00%_\\") == []


def test_select_terms_keeps_the_rarest_in_query_order() -> None:
    tokens = [f"t{i}" for i in range(40)]
    freq = {t: 100 - i for i, t in enumerate(tokens)}  # later tokens are rarer
    calls: list[list[str]] = []

    def doc_freq(terms: list[str]) -> dict[str, int]:
        calls.append(list(terms))
        return {t: freq[t] for t in terms if t != "t0"}  # t0 unknown to the index: rarest

    kept = select_terms(tokens, doc_freq)
    assert kept == ["t0", *tokens[9:]]
    assert len(kept) == 32 and calls == [tokens]


def test_select_terms_does_not_ask_for_short_queries() -> None:
    def doc_freq(terms: list[str]) -> dict[str, int]:
        raise AssertionError("not needed")

    assert select_terms(["a1", "b2"], doc_freq) == ["a1", "b2"]


def test_or_query_quotes_every_term() -> None:
    assert or_query(['say"hi', "near"]) == '"say""hi" OR "near"'


@given(st.text())
def test_or_query_has_no_bare_operators(text: str) -> None:
    query = or_query(tokenize(text))
    # Removing the quoted strings must leave only the OR connectors.
    assert re.sub(r'"(?:[^"]|"")*"', "", query).replace(" OR ", "") == ""


def test_like_escaping() -> None:
    assert escape_like("100%_a\\b") == "100\\%\\_a\\\\b"
    assert substring_pattern("  50% \x00") == "%50\\%%"
    assert substring_pattern(" \x00 ") is None


def test_namespace_pattern() -> None:
    assert namespace_pattern("/actor/a_b/project/%/") == "/actor/a\\_b/project/\\%/%"
    assert namespace_pattern(None) == "%"
    with pytest.raises(ValueError):
        namespace_pattern("/actor/a")

"""Query extraction, fusion order and labels, markdown formatting and byte budgets."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from wakemark.shared.models import MemoryRecord
from wakemark.shared.retrieval import format_context, format_index, query_text
from wakemark.shared.retrieval.formatting import INDEX_HEADER
from wakemark.shared.retrieval.fusion import Candidate, FusionParams, fuse
from wakemark.shared.retrieval.gate import STOPWORDS
from wakemark.shared.retrieval.metrics import SearchMetrics
from wakemark.shared.retrieval.query import topic_text

NS = "/actor/a/project/p/"


def test_query_from_each_body_shape() -> None:
    assert query_text({"type": "text", "content": "  fix the bug  "}) == "fix the bug"
    turns = [{"role": "user", "content": "first"}, {"role": "assistant", "content": "last one"}]
    assert query_text({"type": "message", "turns": turns}) == "last one"
    assert query_text({"type": "json", "data": {"b": 1, "a": "x"}}) == '{"a": "x", "b": 1}'
    assert query_text({"type": "text", "content": "   "}) == ""
    assert query_text({"type": "json", "data": {}}) == ""
    assert query_text(None) == ""
    assert query_text({"body": {"type": "text", "content": "via event"}}) == "via event"


def test_rrf_scores_labels_and_tie_breaks() -> None:
    lex = [Candidate("mr_b", 10.0), Candidate("mr_a", 20.0)]
    vec = [Candidate("mr_a", 20.0, 0.9), Candidate("mr_c", 30.0, 0.5)]
    out = fuse({"fts": lex, "semantic": vec}, 10)
    assert [(f.record_id, f.match_source) for f in out] == [
        ("mr_a", "hybrid"),  # 1/62 + 1/61
        ("mr_b", "fts"),  # 1/61
        ("mr_c", "semantic"),  # 1/63
    ]
    assert out[0].score == 1 / 62 + 1 / 61
    # Equal scores: newer first, then record_id ascending.
    tie = fuse({"fts": [Candidate("mr_x", 5.0)], "semantic": [Candidate("mr_y", 6.0, 0.1)]}, 10)
    assert [f.record_id for f in tie] == ["mr_y", "mr_x"]
    same_time = fuse(
        {"fts": [Candidate("mr_z", 5.0)], "semantic": [Candidate("mr_y", 5.0, 0.1)]}, 10
    )
    assert [f.record_id for f in same_time] == ["mr_y", "mr_z"]


def test_tuned_floor_and_cap_only_touch_semantic_only_hits() -> None:
    params = FusionParams(floors={"semantic": 0.5}, caps={"semantic": 1})
    lex = [Candidate("mr_l", 1.0)]
    vec = [
        Candidate("mr_l", 1.0, 0.1),  # below the floor but also lexical: kept
        Candidate("mr_s1", 2.0, 0.9),
        Candidate("mr_s2", 3.0, 0.8),  # over the cap
        Candidate("mr_s3", 4.0, 0.2),  # below the floor
    ]
    assert [f.record_id for f in fuse({"fts": lex, "semantic": vec}, 10, params)] == [
        "mr_l",
        "mr_s1",
    ]


def test_fusion_takes_any_number_of_named_legs() -> None:
    ranked = {
        "fts": [Candidate("mr_a", 1.0), Candidate("mr_b", 2.0)],
        "semantic": [Candidate("mr_b", 2.0, 0.9), Candidate("mr_c", 3.0, 0.8)],
        "trigram": [Candidate("mr_b", 2.0), Candidate("mr_d", 4.0), Candidate("mr_e", 5.0)],
    }
    params = FusionParams(weights={"trigram": 0.5}, caps={"trigram": 1})
    out = fuse(ranked, 10, params)
    assert [(f.record_id, f.match_source) for f in out] == [
        ("mr_b", "hybrid"),  # 1/62 + 1/61 + 0.5/61
        ("mr_a", "fts"),  # 1/61
        ("mr_c", "semantic"),  # 1/63
        ("mr_d", "trigram"),  # 0.5/62; mr_e (0.5/63) is over the trigram cap
    ]
    assert out[0].score == 1 / 62 + 1 / 61 + 0.5 / 61
    assert fuse({}, 10) == []


def test_a_list_labelled_as_another_legs_is_that_legs_evidence() -> None:
    params = FusionParams(
        floors={"semantic": 0.5}, caps={"semantic": 2}, labels={"topic": "semantic"}
    )
    ranked = {
        "fts": [Candidate("mr_a", 1.0)],
        "semantic": [Candidate("mr_b", 2.0, 0.9), Candidate("mr_f", 6.0, 0.2)],
        "topic": [
            Candidate("mr_f", 6.0, 0.3),  # both below the floor: only semantic found it
            Candidate("mr_b", 2.0, 0.9),  # both semantic lists: still semantic, scored twice
            Candidate("mr_c", 3.0, 0.8),
            Candidate("mr_a", 1.0, 0.7),  # lexical too: hybrid
            Candidate("mr_d", 4.0, 0.1),  # below the semantic floor
            Candidate("mr_e", 5.0, 0.9),  # over the semantic cap
        ],
    }
    out = fuse(ranked, 10, params)
    assert [(f.record_id, f.match_source) for f in out] == [
        ("mr_b", "semantic"),  # 1/61 + 1/62
        ("mr_a", "hybrid"),  # 1/61 + 1/64
        ("mr_c", "semantic"),  # 1/63
    ]


def test_the_topic_of_a_query_is_its_words_without_names_and_function_words() -> None:
    assert topic_text("What movies did Paola watch?", STOPWORDS) == "movies watch"
    assert topic_text("What are Fahim's hobbies? Ask Kate’s brother", STOPWORDS) == (
        "hobbies Ask brother"
    )
    # Nobody named: no topic query. A sentence's first word, an identifier, an acronym or
    # "I" is no name.
    assert topic_text("Paola said hi. Then she left", STOPWORDS) == ""
    assert topic_text("why does RuntimeError in Request.form break HTTP? I wonder", STOPWORDS) == ""
    assert topic_text("Is it Kate?", STOPWORDS) == ""  # nothing left


@given(st.lists(st.integers(0, 50), unique=True, max_size=30), st.integers(1, 40))
def test_fusion_of_lexical_alone_keeps_its_order(ids: list[int], limit: int) -> None:
    lex = [Candidate(f"mr_{i:03d}", float(i % 7)) for i in ids]
    out = fuse({"fts": lex, "semantic": []}, limit)
    assert [f.record_id for f in out] == [c.record_id for c in lex][:limit]
    assert all(f.match_source == "fts" for f in out)


def test_context_block_is_exactly_the_design() -> None:
    records = [
        MemoryRecord(
            namespace=NS, title="Fix   login", summary="Token was stale.", facts=["a", "b"]
        ),
        MemoryRecord(namespace=NS, title="Second"),
    ]
    assert format_context(records) == (
        "## Prior observations\n\n### Fix login\nToken was stale.\n- a\n- b\n\n### Second\n"
    )
    assert format_context([]) == ""


def test_the_context_block_says_nothing_twice() -> None:
    def block(title: str, summary: str, facts: list[str]) -> str:
        record = MemoryRecord(namespace=NS, title=title, summary=summary, facts=facts)
        return format_context([record]).removeprefix("## Prior observations\n\n")

    # A commit message as title and summary: the summary adds nothing.
    edit = "edited .github/workflows/codspeed.yml"
    assert block("Only run codspeed against PRs", "Only run codspeed against PRs", [edit]) == (
        f"### Only run codspeed against PRs\n- {edit}\n"
    )
    # Its first sentence or line as the title: the rest of the summary follows it.
    assert block("Fix the cookie", "Fix the cookie\n\nIt expired on reload.", []) == (
        "### Fix the cookie\nIt expired on reload.\n"
    )
    assert block("Fix the cookie.", "Fix the cookie. It expired.", []) == (
        "### Fix the cookie.\nIt expired.\n"
    )
    assert block("Fix login", "Fix login cookies.", []) == "### Fix login\nFix login cookies.\n"
    squashed = "* Accept tuples in optional\n\nFixes #937\n\n* Add news fragment"
    assert block("Accept tuples in optional (#1122)", squashed, []) == (
        "### Accept tuples in optional (#1122)\nFixes #937\n\n* Add news fragment\n"
    )
    # A turn without an answer is summed up by its facts: each is said once.
    facts = ["edited app/pdf.py", "edited app/pdf_test.py", "tests: 3 passed"]
    assert block("PDF export crash", "edited app/pdf.py; edited app/pdf_test.py", facts) == (
        "### PDF export crash\nedited app/pdf.py; edited app/pdf_test.py\n- tests: 3 passed\n"
    )
    # A fact found only inside a longer word is kept; one said twice, once.
    assert block("Pin pytest", "Pinned pytest-xdist.", ["test", "Pytest", "pinned"]) == (
        "### Pin pytest\nPinned pytest-xdist.\n- test\n"
    )
    assert block("Pin", "Pinned pytest-xdist.", ["xdist 3", "xdist 3"]) == (
        "### Pin\nPinned pytest-xdist.\n- xdist 3\n"
    )


def test_the_context_block_names_a_verb_once_for_its_files() -> None:
    files = ["src/pdf.py", "tests/test_pdf.py", "docs/pdf.rst"]
    facts = [
        "edited src/pdf.py", "edited tests/test_pdf.py", "ran `pytest` → exit 0",
        "edited docs/pdf.rst", "wrote src/pdf.py", "edited out.log", "edited notes.md",
    ]  # fmt: skip
    record = MemoryRecord(namespace=NS, title="PDF export crash", facts=facts, files_touched=files)
    assert format_context([record]).splitlines()[3:] == [
        "- edited src/pdf.py, tests/test_pdf.py",
        "- ran `pytest` → exit 0",
        "- edited docs/pdf.rst",
        "- wrote src/pdf.py",
        "- edited out.log",  # not a file of the record's: a fact of its own
        "- edited notes.md",
    ]


@given(
    st.lists(st.tuples(st.text(min_size=1, max_size=60), st.text(max_size=300)), max_size=40),
    st.integers(1, 9500),
)
def test_index_stays_in_budget_and_never_cuts_a_character(
    rows: list[tuple[str, str]], max_bytes: int
) -> None:
    records = [MemoryRecord(namespace=NS, title=t.strip() or "x", summary=s) for t, s in rows]
    text, used = format_index(records, max_bytes)
    assert used == len(text.encode()) <= max_bytes
    assert text == "" or text.startswith(INDEX_HEADER)
    text.encode().decode("utf-8")  # whole characters only


def test_index_pinned_order_is_kept_and_lines_are_whole() -> None:
    records = [MemoryRecord(namespace=NS, title=f"t{i}", summary="é" * 10) for i in range(50)]
    text, used = format_index(records, 300)
    lines = text.splitlines()[1:]
    assert lines[0].startswith("- t0: ") and lines[1].startswith("- t1: ")
    assert used <= 300


def test_index_lines_have_no_doubled_punctuation() -> None:
    def line(title: str) -> str:
        return format_index([MemoryRecord(namespace=NS, title=title, summary="The crash…")], 999)[
            0
        ].splitlines()[1]

    assert line("PDF export fails for customers.") == "- PDF export fails for customers. The crash…"
    assert line("Why does the PDF export fail?") == "- Why does the PDF export fail? The crash…"
    assert line("Plan for the export:") == "- Plan for the export: The crash…"
    assert line("format_address falls back") == "- format_address falls back: The crash…"


def test_an_index_line_does_not_say_its_title_twice() -> None:
    def line(title: str, summary: str) -> str:
        record = MemoryRecord(namespace=NS, title=title, summary=summary)
        return format_index([record], 999)[0].splitlines()[1]

    said = "`country_line` returns an empty string when the address has no `country` key:"
    rest = 'it reads `addr.get("country", "")` and upper-cases it.'
    assert line(said, f"{said} {rest}") == f"- {said[:-1]}: {rest}"
    assert line("The cache is per process.", "The cache is per process.") == (
        "- The cache is per process."
    )
    marked = "The cache is per process (changed since: cache.py)"
    assert line(marked, "The cache is per process. It is never shared.") == (
        f"- {marked}: It is never shared."
    )
    assert line("Fix login", "Fix login cookies.") == "- Fix login: Fix login cookies."
    cut, whole = "Moved the epoch bump into the…", "Moved the epoch bump into the transaction."
    assert line(cut, whole) == f"- {cut} {whole}"  # a cut title is no sentence of its own


def test_a_changed_records_title_ends_with_its_marker() -> None:
    from wakemark.shared.retrieval.hits import SearchHit
    from wakemark.shared.retrieval.retriever import _marked
    from wakemark.shared.retrieval.staleness import Verdict

    def title(of: str) -> str:
        hit = SearchHit(MemoryRecord(namespace=NS, title=of, summary="It is never shared."), "", 1)
        return _marked(hit, Verdict("changed", ("cache.py",))).record.title

    assert (
        title("The cache is per process.") == "The cache is per process (changed since: cache.py)"
    )
    assert title("Why is the cache per process?") == (
        "Why is the cache per process? (changed since: cache.py)"
    )
    assert title("...") == "... (changed since: cache.py)"


def test_metrics_are_counts_and_percentiles() -> None:
    m = SearchMetrics(window=4)
    for ms in (1, 2, 3, 100, 5):
        m.record(ms, degraded=ms == 100, lexical_hits=0 if ms == 1 else 3)
    snap = m.snapshot()
    assert snap["requests"] == 5 and snap["zero_lexical_hits"] == 1
    assert snap["degraded_rate"] == 0.2
    assert snap["p50_ms"] == 4.0  # window keeps 2, 3, 100, 5
    assert any(line.startswith("wakemark_search_requests_total 5") for line in m.prometheus_lines())


def test_the_fusions_come_from_the_legs() -> None:
    from wakemark.shared.retrieval.fusion import PLAIN, params_for
    from wakemark.shared.retrieval.legs import LEGS

    assert params_for("plain", LEGS.values()) == PLAIN
    # The tuned fusion as chosen on the labelled set (bench/results/relevance.md): the vector leg's.
    tuned = params_for("tuned", LEGS.values())
    assert tuned == FusionParams(floors={"semantic": 0.3}, caps={"semantic": 3})

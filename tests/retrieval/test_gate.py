"""The relevance gate and session-aware injection on the prompt path, over real storage."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given
from hypothesis import settings as hsettings
from hypothesis import strategies as st

from tests.retrieval.conftest import NS, OTHER, STRANGER, make_record, put
from wakemark.shared.config import Settings
from wakemark.shared.models import Event, MemoryRecord, Retrieval, new_ulid
from wakemark.shared.retrieval import gate
from wakemark.shared.retrieval.hits import PromptContext
from wakemark.shared.retrieval.inject import REPEAT_MARGIN
from wakemark.shared.runtime import Runtime

TOPICS = [
    ("Stripe webhook signature check fails behind the proxy", "The proxy rewrote the body."),
    ("Alembic migration adds the invoices.due_date column", "Backfilled from created_at."),
    ("Redis cache keys expire too early in staging", "TTL came from a stale env var."),
    ("Login token refresh loops on Safari", "SameSite cookie was missing."),
    ("pytest fixtures leak the database between tests", "Use a transaction per test."),
    ("Thumbnail upload to S3 times out for big images", "Multipart upload above 8 MB."),
]
WORDS = [w for title, _ in TOPICS for w in title.split()] + ["banana", "orbit", "violin"]


def prompt(text: str, session: str = "s1", ns: str = NS) -> Event:
    return Event(
        event_id=new_ulid(),
        session_id=session,
        actor_id=ns.split("/")[2],
        namespace=ns,
        kind="prompt",
        body={"type": "text", "content": text},
        valid_time=datetime.now(UTC),
        source={"surface": "test"},
    )


def ask(
    rt: Runtime, text: str, session: str = "s1", **kw: float
) -> tuple[PromptContext, Retrieval]:
    """Store the prompt, answer it as the API does, and read back its audit row."""
    event = prompt(text, session)
    rt.storage.put_events([event])
    out = rt.retriever.for_prompt(NS, event, **kw)
    rt.retriever.flush_audit()
    row = rt.storage.get_retrieval(out.retrieval_id)
    assert row is not None and row.event_id == event.event_id
    return out, row


def topic_records(ns: str = NS) -> list[MemoryRecord]:
    return [
        make_record(ns, title, i, summary=summary, facts=[f"edit src/{i}.py"])
        for i, (title, summary) in enumerate(TOPICS)
    ]


@pytest.fixture
def topics(runtime: Runtime) -> Runtime:
    put(runtime, topic_records() + topic_records(OTHER) + topic_records(STRANGER))
    return runtime


def test_a_matching_prompt_gets_its_record_and_an_unrelated_one_nothing(topics: Runtime) -> None:
    out, row = ask(topics, "Why does the Stripe webhook signature check fail behind the proxy?")
    assert out.context.startswith("## Prior observations\n\n### Stripe webhook signature")
    assert row.decision == "inject" and row.injected == out.records
    assert len(out.records) == 1  # the other topics share no evidence with it
    out, row = ask(topics, "Which violin concerto should I listen to tonight?")
    assert (out.context, out.records) == ("", [])
    assert row.decision == "none" and row.bytes == 0 and row.injected == []


def test_search_exposes_relevance_and_keeps_its_ranked_list(topics: Runtime) -> None:
    result = topics.retriever.search(NS, "Redis cache keys expire early in tests", limit=10)
    assert result.items[0].record.title.startswith("Redis cache keys") and len(result.items) > 1
    assert all(0.0 <= h.relevance <= 1.0 for h in result.items)
    top = result.items[0].relevance
    assert top >= 0.5 > max(h.relevance for h in result.items[1:])
    assert [h.record for h in result.at_least(round(top, 4)).items] == [result.items[0].record]
    assert result.to_json()["items"][0]["relevance"] == round(top, 4)


@hsettings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    words=st.lists(st.sampled_from(WORDS), min_size=1, max_size=8),
    threshold=st.floats(0.0, 1.0),
)
# A regression example: its prompt relevance once sat within rounding of the bar (the
# decision is taken on the value as shown, rounded).
@example(words=["Redis", "cache", "keys", "the", "banana"], threshold=0.0)
def test_never_injects_below_the_threshold_nor_outside_the_namespace(
    topics: Runtime, words: list[str], threshold: float
) -> None:
    out, row = ask(topics, " ".join(words), session=new_ulid(), min_relevance=threshold)
    own = {r.record_id for r in topic_records()} | {
        h.record.record_id for h in topics.retriever.search(NS, " ".join(words), 50).items
    }
    by_id = {c.record_id: c for c in row.candidates}
    assert row.min_relevance == threshold
    assert set(out.records) <= set(by_id)
    assert all(by_id[rid].relevance >= threshold and by_id[rid].injected for rid in row.injected)
    assert row.min_prompt_relevance == topics.settings.min_prompt_relevance
    if row.prompt_relevance is None or row.prompt_relevance < row.min_prompt_relevance:
        assert row.injected == [] and row.decision == "none"
    else:
        assert all(
            c.relevance < threshold for c in row.candidates if c.skipped is None and not c.injected
        )
    assert len(row.injected) <= 5 and row.bytes <= topics.settings.prompt_max_bytes
    stored = topics.storage.get_memory_records([c.record_id for c in row.candidates])
    assert len(stored) == len(row.candidates) and all(r.namespace == NS for r in stored)
    assert by_id.keys() <= own


def test_relevance_is_deterministic(topics: Runtime) -> None:
    text = "login token refresh loops, SameSite cookie"
    _, first = ask(topics, text, session="a")
    _, second = ask(topics, text, session="b")
    assert first.candidates == second.candidates and first.injected == second.injected


def test_session_dedupe(topics: Runtime) -> None:
    paid = make_record(NS, "Alembic migration adds the invoices.paid_at column", 20)
    put(topics, [paid])
    first, _ = ask(topics, "Alembic migration for invoices.due_date", session="s1")
    assert len(first.records) == 2  # due_date, then paid_at
    # Prompt 2 of the session finds both again, neither first by a wide margin: nothing.
    again, row = ask(topics, "Alembic migration for invoices", session="s1")
    assert again.records == [] and row.decision == "none"
    assert "already injected" in row.reason
    assert {c.skipped for c in row.candidates if c.record_id in first.records} == {"seen"}
    best, runner_up = sorted((c.relevance for c in row.candidates), reverse=True)[:2]
    assert best - runner_up < REPEAT_MARGIN
    # A new session gets them.
    fresh, _ = ask(topics, "Alembic migration for invoices", session="s2")
    assert set(fresh.records) == set(first.records)


def test_a_seen_record_first_by_a_wide_margin_comes_back(topics: Runtime) -> None:
    paid = make_record(NS, "Alembic migration adds the invoices.paid_at column", 20)
    put(topics, [paid])
    text = "Alembic migration for invoices.due_date"
    first, _ = ask(topics, text, session="s1")
    due_date = first.records[0]
    back, row = ask(topics, text, session="s1")
    best, runner_up = sorted((c.relevance for c in row.candidates), reverse=True)[:2]
    assert best - runner_up >= REPEAT_MARGIN
    # The first comes back; the other, seen and not first, does not.
    assert back.records == [due_date] and paid.record_id in first.records
    assert {c.record_id: c.skipped for c in row.candidates}[paid.record_id] == "seen"


def test_a_retried_prompt_event_gets_the_same_context(topics: Runtime) -> None:
    event = prompt("pytest fixtures leak the database")
    topics.storage.put_events([event])
    first = topics.retriever.for_prompt(NS, event)
    retry = topics.retriever.for_prompt(NS, event)
    assert first.records and retry.records == first.records


def test_audit_rows_are_written_after_the_answer_and_count_while_queued(topics: Runtime) -> None:
    retriever, storage = topics.retriever, topics.storage
    put(topics, [make_record(NS, "Alembic migration adds the invoices.paid_at column", 20)])
    first_event = prompt("Alembic migration for invoices.due_date")
    second_event = prompt("Alembic migration for invoices")
    storage.put_events([first_event, second_event])
    with retriever._audit._writing:  # the writer is busy: the rows stay queued
        first = retriever.for_prompt(NS, first_event)
        assert len(first.records) == 2 and storage.get_retrieval(first.retrieval_id) is None
        # The session's next prompt sees what the queued row injected (as in
        # test_session_dedupe, where the row was stored) ...
        second = retriever.for_prompt(NS, second_event)
        assert second.records == []
        # ... and a retry of the first is answered as before.
        retry = retriever.for_prompt(NS, first_event)
        assert retry.records == first.records
    retriever.close()  # a clean shutdown stores every queued row
    rows = [storage.get_retrieval(r.retrieval_id or "") for r in (first, second, retry)]
    assert all(r is not None for r in rows)
    assert rows[1] is not None and "already injected" in rows[1].reason


_EXIT_CHILD = """
import sys
from pathlib import Path
from wakemark.shared.config import Settings
from wakemark.shared.models import Event
from wakemark.shared.runtime import Runtime
settings = Settings(home=Path(sys.argv[1]), embedder="off", database_url=sys.argv[2] or None)
rt = Runtime.build(settings)
event = Event.model_validate_json(sys.argv[3])
rt.storage.put_events([event])
print(rt.retriever.for_prompt(event.namespace, event).retrieval_id)
"""


def test_audit_rows_queued_at_exit_are_written(topics: Runtime) -> None:
    import subprocess
    import sys

    event = prompt("pytest fixtures leak the database")
    settings = topics.settings
    child = [sys.executable, "-c", _EXIT_CHILD, str(settings.home), settings.database_url or ""]
    proc = subprocess.run(
        [*child, event.model_dump_json()], capture_output=True, text=True, check=True
    )
    retrieval_id = proc.stdout.strip().splitlines()[-1]
    row = topics.storage.get_retrieval(retrieval_id)
    assert row is not None and row.event_id == event.event_id and row.injected


def test_a_record_comes_back_after_enough_prompts(topics: Runtime) -> None:
    from wakemark.shared.retrieval.inject import REPEAT_AFTER

    text = "Thumbnail upload to S3 times out"
    first, _ = ask(topics, text)
    for i in range(REPEAT_AFTER):
        assert not set(ask(topics, f"unrelated violin question {i}")[0].records)
    back, _ = ask(topics, text)
    assert back.records == first.records


def test_same_content_is_injected_once(runtime: Runtime) -> None:
    twins = [make_record(NS, "Celery worker drops tasks on SIGTERM", i) for i in range(2)]
    put(runtime, twins)
    out, row = ask(runtime, "celery worker drops tasks on SIGTERM", min_relevance=0.0)
    assert len(out.records) == 1
    assert [c.skipped for c in row.candidates if not c.injected] == ["duplicate"]


def test_the_block_keeps_whole_records_within_the_byte_budget(runtime: Runtime) -> None:
    long = "The webhook retry queue backs off exponentially. " * 12
    put(
        runtime,
        [make_record(NS, f"Webhook retry queue note {i}", i, summary=long) for i in range(5)],
    )
    out, row = ask(runtime, "webhook retry queue", min_relevance=0.0)
    budget = runtime.settings.prompt_max_bytes
    assert len(out.context.encode()) == row.bytes <= budget
    assert 1 <= len(out.records) < 5 and "…" not in out.context
    assert out.context.count("### ") == len(out.records)
    assert {c.skipped for c in row.candidates if not c.injected} == {"budget"}


def test_one_record_larger_than_the_budget_is_cut_at_a_line(runtime: Runtime) -> None:
    facts = [f"edit src/module_{i}/webhook_handler.py" for i in range(60)]
    put(runtime, [make_record(NS, "Webhook handler rewrite", 0, facts=facts)])
    out, row = ask(runtime, "webhook handler rewrite", min_relevance=0.0)
    assert out.records and out.context.endswith("…\n")
    assert len(out.context.encode()) <= runtime.settings.prompt_max_bytes


def test_a_dead_embedder_gates_on_lexical_evidence_and_says_so(
    backend_settings: Settings, tmp_path: Path
) -> None:
    settings = backend_settings.replace(embedder="onnx", model_path=tmp_path / "missing.onnx")
    rt = Runtime.build(settings)
    try:
        put(rt, topic_records())
        out, row = ask(rt, "Why does the Stripe webhook signature check fail behind the proxy?")
        assert row.mode == "lexical" and "lexical evidence only" in row.reason
        assert out.records and all(
            c.evidence and c.evidence["cosine"] is None for c in row.candidates
        )
        _, none = ask(rt, "Which violin concerto should I listen to tonight?")
        assert none.decision == "none" and none.mode == "lexical"
    finally:
        rt.close()


def test_hybrid_evidence_has_cosines(hybrid: Runtime) -> None:
    put(hybrid, topic_records(), embed=True)
    query = "webhook signature fails behind a proxy"
    hit = hybrid.retriever.search(NS, query, 10).items[0]
    assert hit.evidence is not None and hit.evidence.cosine is not None
    assert hit.evidence.query_terms == len(gate.terms(query)) == 5
    assert hit.record.title.startswith("Stripe") and hit.relevance >= hybrid.settings.min_relevance


def test_a_prompt_with_one_lookalike_is_refused_as_a_whole(topics: Runtime) -> None:
    # One weak hit clears the record floor, but the prompt as a whole does not look like
    # anything this project worked on: nothing, and the reason names the prompt gate.
    out, row = ask(topics, "Why does the Safari tab crash on the Stripe checkout page?")
    assert row.prompt_relevance is not None and row.candidates
    assert max(c.relevance for c in row.candidates) >= row.min_relevance
    assert row.prompt_relevance < row.min_prompt_relevance
    assert out.records == [] and row.reason.startswith("prompt relevance")
    assert f"is below {row.min_prompt_relevance:.3f}" in row.reason


def _evidence(coverage: float, cosine: float | None, query_terms: int = 6) -> gate.Evidence:
    return gate.Evidence(
        coverage, 0.5, False, cosine, None if cosine is None else cosine - 0.2, True, False,
        0, 0, query_terms,
    )  # fmt: skip


def test_prompt_relevance_grows_with_its_candidates_evidence() -> None:
    none = gate.prompt_relevance([], [], lexical_only=False)
    one = gate.prompt_relevance([0.3], [_evidence(0.4, 0.5)], lexical_only=False)
    more = gate.prompt_relevance(
        [0.3, 0.3, 0.2], [_evidence(0.4, 0.5), _evidence(0.3, 0.4), _evidence(0.2, 0.4)], False
    )
    nearer = gate.prompt_relevance(
        [0.3, 0.3, 0.2], [_evidence(0.4, 0.7), _evidence(0.3, 0.4), _evidence(0.2, 0.4)], False
    )
    covered = gate.prompt_relevance(
        [0.3, 0.3, 0.2], [_evidence(0.9, 0.7), _evidence(0.3, 0.4), _evidence(0.2, 0.4)], False
    )
    assert 0.0 < none < one < more < nearer < covered < 1.0
    lexical = [_evidence(0.4, None)]
    assert len(gate.prompt_vector([0.3], lexical, True)) == len(gate.LEXICAL_PROMPT_COEF)
    assert len(gate.prompt_vector([0.3], [_evidence(0.4, 0.5)], False)) == len(gate.PROMPT_COEF)
    # The query's length in content terms enters as its log, the same for all its hits.
    short, long = (gate.prompt_vector([0.3], [_evidence(0.4, 0.5, n)], False) for n in (2, 12))
    names = gate.PROMPT_FEATURES
    assert long[names.index("query_terms")] > short[names.index("query_terms")]
    assert long[: names.index("query_terms")] == short[: names.index("query_terms")]


def test_relevance_is_a_logistic_of_the_documented_features() -> None:
    strong = gate.Evidence(1.0, 1.0, True, 0.8, 0.3, True, True, 0, 0)
    weak = gate.Evidence(0.0, 0.0, False, 0.1, 0.0, False, False, None, 9)
    assert 0.0 < gate.relevance(weak) < gate.relevance(strong) < 1.0
    lexical = gate.Evidence(1.0, 1.0, True, None, None, False, True, 0, None)
    assert len(gate.feature_vector(lexical, True)) == len(gate.LEXICAL_COEF)
    assert len(gate.feature_vector(strong, False)) == len(gate.HYBRID_COEF)
    assert gate.relevance(lexical) > gate.relevance(weak)


def test_terms_are_stemmed_deduplicated_in_order_with_cjk_runs_as_pieces() -> None:
    text = "Deprecation of the parser: deprecated parsers, a Parser again"
    assert gate.terms(text) == ["deprec", "parser"]  # stop words out, stems once each
    # A CJK run gives its two-character pieces in place; CJK elsewhere in the text does
    # not change how its other words are read.
    assert gate.terms("会議室 meeting 東京 meetings") == ["会議", "議室", "meet", "東京", "meetin"]
    assert gate.terms("meeting meetings meeting") == ["meet", "meetin"]

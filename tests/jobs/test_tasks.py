"""The task functions on each backend: idempotent, race-safe, the database decides."""

from __future__ import annotations

import functools
import shutil
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.threads import race
from wakemark.shared.config import Settings
from wakemark.shared.embedding import tokenizer_path
from wakemark.shared.extraction import subject
from wakemark.shared.jobs import (
    backfill_embeddings,
    embed_records,
    extract_turns,
    sweep,
)
from wakemark.shared.jobs.breaker import Breaker
from wakemark.shared.jobs.tasks import _store_vectors
from wakemark.shared.models import Event, MemoryRecord
from wakemark.shared.storage import TransientStorageError

from .conftest import NS, assert_extracted_once, event, ingest, turn_events


def test_extract_turn_writes_once_and_marks_the_turn(backend_settings: Settings, make_runtime):
    runtime = make_runtime(backend_settings)
    [turn_id] = ingest(runtime, 1, enqueue=False)
    ids = extract_turns(runtime.tasks, [turn_id])
    assert len(ids) == 1
    assert extract_turns(runtime.tasks, [turn_id]) == []  # already extracted: a no-op
    assert_extracted_once(runtime, [turn_id])
    assert runtime.storage.stats()["pending_extraction"] == 0


def test_extract_turn_skips_open_and_unknown_turns(backend_settings: Settings, make_runtime):
    runtime = make_runtime(backend_settings)
    [result] = runtime.storage.put_events([event("prompt", "still typing", "open")])
    assert result.closed_turns == () and result.turn_id
    assert extract_turns(runtime.tasks, [result.turn_id]) == []
    assert extract_turns(runtime.tasks, ["no-such-turn"]) == []
    assert runtime.storage.list_memory_records(NS).total == 0


def test_extract_turns_writes_a_batch_and_skips_what_is_not_pending(
    backend_settings: Settings, make_runtime
):
    runtime = make_runtime(backend_settings)
    turns = ingest(runtime, 6, enqueue=False)
    [done_before] = extract_turns(runtime.tasks, [turns[0]])
    [still_open] = runtime.storage.put_events([event("prompt", "still typing", "open")])
    batch = [*turns, str(still_open.turn_id), "no-such-turn", turns[3]]
    ids = extract_turns(runtime.tasks, batch)
    assert len(ids) == len(set(ids)) == 5  # one per pending turn; the repeat writes nothing
    assert extract_turns(runtime.tasks, batch) == []
    assert_extracted_once(runtime, turns)
    assert done_before not in ids


def test_a_reasked_question_with_the_same_answer_adds_nothing(
    backend_settings: Settings, make_runtime, onnx_model_path: Path
):
    # One batch: the second turn is matched against the first, written earlier in the
    # same transaction.
    runtime = make_runtime(backend_settings.replace(embedder="onnx", model_path=onnx_model_path))
    [first] = runtime.storage.put_events(turn_events(1, "a"))[-1].closed_turns
    [again] = runtime.storage.put_events(turn_events(1, "b"))[-1].closed_turns
    [kept] = extract_turns(runtime.tasks, [first, again])
    assert [r.record_id for r in runtime.storage.list_memory_records(NS).items] == [kept]
    assert runtime.storage.get_history(kept) == []
    [info] = runtime.storage.session_turns(NS, "b")
    assert (info.extracted, info.record_ids, info.skip_reason) == (True, [], "repeat")


def test_a_turn_without_work_is_marked_skipped_and_keeps_its_events(
    backend_settings: Settings, make_runtime
):
    runtime = make_runtime(backend_settings)
    clear = event("prompt", "<command-name>/clear</command-name>", "c")
    runtime.storage.put_events([clear, *turn_events(1, "c")])
    closed = runtime.storage.pending_turns()
    assert len(closed) == 2  # the /clear turn and the question after it
    assert len(extract_turns(runtime, closed)) == 1
    assert runtime.storage.skipped_turns() == {"command": 1}
    assert runtime.storage.get_event(clear.event_id) is not None
    assert runtime.storage.pending_turns() == []


def test_note_becomes_one_record_as_written(backend_settings: Settings, make_runtime):
    runtime = make_runtime(backend_settings)
    [result] = runtime.storage.put_events([event("note", "Use uv for installs.", "n1")])
    [turn_id] = result.closed_turns
    [record_id] = extract_turns(runtime.tasks, [turn_id])
    record = runtime.storage.get_memory_record(record_id)
    assert record is not None and record.observation_type == "note"


def test_concurrent_extraction_of_one_turn_writes_one_record(
    backend_settings: Settings, make_runtime
):
    # Two workers racing on the same turns: the conditional mark lets exactly one commit.
    runtime = make_runtime(backend_settings)
    turns = ingest(runtime, 8, enqueue=False)

    def work() -> None:
        for turn_id in turns:
            extract_turns(runtime.tasks, [turn_id])

    assert race([work] * 3) == []
    assert_extracted_once(runtime, turns)


def test_embedder_off_leaves_records_pending_without_errors(
    backend_settings: Settings, make_runtime
):
    runtime = make_runtime(backend_settings)
    turns = ingest(runtime, 2, enqueue=False)
    ids = [i for t in turns for i in extract_turns(runtime.tasks, [t])]
    assert embed_records(runtime.tasks, ids) == 0
    assert backfill_embeddings(runtime.tasks)["embedded"] == 0
    assert runtime.storage.stats()["pending_embedding"] == 2


@pytest.mark.slow
def test_extraction_embeds_inline_and_embed_records_skips_done_ones(
    backend_settings: Settings, onnx_model_path: Path, make_runtime
):
    settings = backend_settings.replace(embedder="onnx", model_path=onnx_model_path)
    runtime = make_runtime(settings)
    [turn_id] = ingest(runtime, 1, enqueue=False)
    [record_id] = extract_turns(runtime.tasks, [turn_id])
    assert runtime.storage.has_embedding(record_id)
    assert embed_records(runtime.tasks, [record_id]) == 0  # already embedded: skipped
    plain = MemoryRecord(namespace=NS, title="written directly, no vector yet")
    runtime.storage.put_memory_record(plain)
    assert embed_records(runtime.tasks, [plain.record_id, "mr_01HZZZZZZZZZZZZZZZZZZZZZZZ"]) == 1
    assert runtime.storage.stats()["pending_embedding"] == 0


@pytest.mark.slow
def test_unavailable_embedder_keeps_records_pending_then_backfill_completes(
    backend_settings: Settings, onnx_model_path: Path, tmp_path: Path, make_runtime
):
    missing = tmp_path / "model" / "all-MiniLM-L6-v2.onnx"
    settings = backend_settings.replace(embedder="onnx", model_path=missing)
    runtime = make_runtime(settings)
    turns = ingest(runtime, 5, enqueue=False)
    for turn_id in turns:
        extract_turns(runtime.tasks, [turn_id])  # no exception storm
    # Its enqueue of embed jobs started the in-process executor, whose start-up sweep
    # may have taken some of the turns: either way each turn has its one record.
    assert runtime.jobs.wait_idle(timeout=60)
    assert_extracted_once(runtime, turns)
    ids = [r.record_id for r in runtime.storage.list_memory_records(NS).items]
    assert embed_records(runtime.tasks, ids) == 0
    breaker = runtime.breaker
    result = backfill_embeddings(runtime.tasks, batch=2)
    assert result["embedded"] == 0 and result["breaker"] == "open"
    assert breaker.snapshot()["consecutive_failures"] == breaker.threshold
    assert runtime.storage.stats()["pending_embedding"] == 5

    # The model comes back (same path): after the cool-down the next backfill completes.
    missing.parent.mkdir()
    shutil.copy(onnx_model_path, missing)
    shutil.copy(tokenizer_path(onnx_model_path), tokenizer_path(missing))
    breaker.cooldown_s = 0
    breaker.failure("force a fresh cool-down of 0 s")
    seen: list[tuple[int, int]] = []
    result = backfill_embeddings(runtime.tasks, batch=2, progress=lambda d, t: seen.append((d, t)))
    model = runtime.embedder.identity
    assert result == {"embedded": 5, "failures": 0, "breaker": "closed", "model": model}
    assert seen[0] == (0, 5) and seen[-1] == (5, 5)
    assert runtime.storage.stats()["pending_embedding"] == 0


@pytest.mark.slow
def test_a_backfill_begun_with_the_embedder_down_goes_on_when_it_comes_back(
    backend_settings: Settings, onnx_model_path: Path, tmp_path: Path, make_runtime
):
    """A new database records no model yet: the run's first vectors claim it (the run
    could not while the model was missing)."""
    missing = tmp_path / "model" / "all-MiniLM-L6-v2.onnx"
    runtime = make_runtime(backend_settings.replace(embedder="onnx", model_path=missing))
    records = [MemoryRecord(namespace=NS, title=f"a record {i}") for i in range(4)]
    for r in records:
        runtime.storage.put_memory_record(r)
    assert runtime.storage.embedding_models().model is None
    runtime.breaker.cooldown_s = 0.2
    results: list[dict[str, Any]] = []
    stop = threading.Event()
    run = threading.Thread(
        target=lambda: results.append(
            backfill_embeddings(runtime.tasks, batch=2, stop=stop, wait_on_open=True)
        )
    )
    run.start()
    try:
        for _ in range(200):  # the run has failed on the missing model
            if runtime.breaker.snapshot()["consecutive_failures"]:
                break
            time.sleep(0.05)
        missing.parent.mkdir()
        shutil.copy(onnx_model_path, missing)
        shutil.copy(tokenizer_path(onnx_model_path), tokenizer_path(missing))
        run.join(timeout=60)
    finally:
        stop.set()
        run.join()
    assert results and results[0]["embedded"] == 4
    assert runtime.storage.stats()["pending_embedding"] == 0
    assert runtime.storage.embedding_models().model == runtime.embedder.identity


def test_sweep_closes_idle_turns_and_reenqueues_pending(backend_settings: Settings, make_runtime):
    runtime = make_runtime(backend_settings.replace(turn_idle_s=1))
    runtime.storage.put_events([event("prompt", "an abandoned turn", "idle")])
    lost = ingest(runtime, 2, enqueue=False)  # committed, but the enqueue was "lost"
    time.sleep(1.2)  # let the open turn become idle
    counts = sweep(runtime.tasks)
    assert counts["closed"] == 1 and counts["extract"] == 3
    assert runtime.jobs.wait_idle(timeout=60)
    assert runtime.storage.stats()["pending_extraction"] == 0
    assert all(runtime.storage.get_turn(t).extracted for t in lost)  # type: ignore[union-attr]


def test_breaker_opens_after_threshold_and_half_opens_after_cooldown():
    now = [100.0]
    breaker = Breaker(threshold=2, cooldown_s=10, clock=lambda: now[0])
    breaker.failure("x")
    assert breaker.state == "closed"
    breaker.failure("y")
    assert breaker.state == "open" and breaker.remaining_s() == 10
    now[0] += 10
    assert breaker.state == "half_open"
    breaker.success()
    assert breaker.snapshot() == {"state": "closed", "consecutive_failures": 0, "last_error": None}


@pytest.mark.slow
def test_a_new_record_about_the_subject_supersedes_the_current_one(
    backend_settings: Settings, onnx_model_path: Path, make_runtime
):
    runtime = make_runtime(backend_settings.replace(embedder="onnx", model_path=onnx_model_path))
    storage = runtime.storage

    def turn(answer: str, session: str) -> str:
        prompt = "Why does the invoice PDF crash on customer names with accents?"
        events = [event("prompt", prompt, session), event("session_summary", answer, session)]
        return storage.put_events(events)[-1].closed_turns[0]

    first = "The PDF font lacks accented glyphs; switched the invoice font to DejaVu Sans."
    later = "The invoice PDF crash came back: the font cache path was wrong, fixed it too."
    [old_id] = extract_turns(runtime.tasks, [turn(first, "a")])
    [new_id] = extract_turns(runtime.tasks, [turn(later, "b")])
    assert [r.record_id for r in storage.list_memory_records(NS).items] == [new_id]
    (version,) = storage.get_history(new_id)
    assert version.record.record_id == old_id and version.superseded_by == new_id
    assert storage.split_version(old_id).record_id == old_id
    assert {r.record_id for r in storage.list_memory_records(NS).items} == {old_id, new_id}


@pytest.mark.slow
def test_a_retry_in_the_same_session_supersedes_where_another_session_would_not(
    backend_settings: Settings, onnx_model_path: Path, make_runtime
):
    runtime = make_runtime(backend_settings.replace(embedder="onnx", model_path=onnx_model_path))
    storage = runtime.storage
    tried = (
        "The Start Session button of the SiYuan plugin just spins",
        "Rebuilt the plugin with debug logging: reload SiYuan, click Start Session and "
        "read the [IES] lines in the browser console.",
    )
    retry = (
        "the Start Session button still spins",
        "Rebuilt the SiYuan plugin without async calls in the Start Session handler: "
        "reload SiYuan, click Start Session and read the [IES] console lines.",
    )

    def extract(prompt: str, answer: str, session: str, ns: str) -> str:
        events = [
            event("prompt", prompt, session, ns),
            event("session_summary", answer, session, ns),
        ]
        [record_id] = extract_turns(runtime.tasks, storage.put_events(events)[-1].closed_turns)
        return record_id

    apart = "/actor/a/project/apart/"
    ids = [extract(*tried, "s1", apart), extract(*retry, "s2", apart)]
    records = storage.list_memory_records(apart).items
    assert {r.record_id for r in records} == set(ids)  # two sessions: two subjects
    a, b = runtime.embedder.embed([r.embedding_text() for r in records])
    cosine = float(a @ b) / float(np.linalg.norm(a) * np.linalg.norm(b))
    assert subject.RULE.session <= cosine < subject.RULE.same  # what the session decides

    old_id, new_id = extract(*tried, "s3", NS), extract(*retry, "s3", NS)
    assert [r.record_id for r in storage.list_memory_records(NS).items] == [new_id]
    (version,) = storage.get_history(new_id)
    assert version.record.record_id == old_id and version.superseded_by == new_id


def test_vectors_for_records_deleted_meanwhile_are_dropped_not_fatal(
    backend_settings: Settings, make_runtime
):
    runtime = make_runtime(backend_settings)
    gone, kept = MemoryRecord(namespace=NS, title="gone"), MemoryRecord(namespace=NS, title="kept")
    for record in (gone, kept):
        runtime.storage.put_memory_record(record)
    runtime.storage.delete_memory_records([gone.record_id])  # after the job read it
    runtime.storage.claim_model("sha256:0123456789abcdef")
    vectors = np.ones((2, 384), dtype=np.float32)
    assert _store_vectors(runtime.tasks, [gone, kept], vectors, "sha256:0123456789abcdef") == 1
    assert runtime.storage.has_embedding(kept.record_id)


FIXES = ["a bundled font", "the font cache", "glyph fallback", "a wider charset", "NFC names"]


@pytest.mark.postgres
@pytest.mark.slow
def test_concurrent_workers_leave_one_current_record_per_subject(
    settings: Settings, pg_url: str, onnx_model_path: Path, make_runtime
):
    # Two workers (their own pools, real concurrent transactions) extract turns about one
    # subject at the same time: every new record reads the subjects under the lock, so
    # the last one standing is the only current record and the others are its history.
    settings = settings.replace(database_url=pg_url, embedder="onnx", model_path=onnx_model_path)
    workers = [make_runtime(settings), make_runtime(settings)]
    turns: list[list[str]] = [[], []]
    for n, fix in enumerate(FIXES * 2):
        session = f"w{n}"
        prompt = "Why does the invoice PDF crash on customer names with accents?"
        answer = f"The invoice PDF crashed on accented customer names; fixed with {fix}."
        events = [event("prompt", prompt, session), event("session_summary", answer, session)]
        turns[n % 2] += workers[0].storage.put_events(events)[-1].closed_turns

    def work(runtime, mine: list[str]) -> None:  # type: ignore[no-untyped-def]
        for turn_id in mine:
            for attempt in range(5):  # a job is retried after a transient error
                try:
                    extract_turns(runtime.tasks, [turn_id])
                    break
                except TransientStorageError:
                    if attempt == 4:
                        raise

    works = [functools.partial(work, w, t) for w, t in zip(workers, turns, strict=True)]
    assert race(works) == []
    storage = workers[0].storage
    [current] = storage.list_memory_records(NS).items
    history = storage.get_history(current.record_id)
    infos = [storage.session_turns(NS, f"w{n}")[0] for n in range(len(FIXES) * 2)]
    assert all(i.extracted for i in infos)
    written = [rid for i in infos for rid in i.record_ids]
    # Each turn wrote its record or was a repeat; every record written is current or history.
    assert sorted(written) == sorted([current.record_id, *(v.record.record_id for v in history)])
    assert {i.skip_reason for i in infos if not i.record_ids} <= {"repeat"}


def _edit(path: str, session: str) -> Event:
    data = {"tool_name": "Edit", "tool_input": {"file_path": path, "new_string": "x = 1"}}
    return Event.model_validate(
        {**event("tool_use", "", session).model_dump(), "body": {"type": "json", "data": data}}
    )


@pytest.mark.slow
def test_a_follow_up_turn_supersedes_the_session_previous_record_a_turn_on_other_files_not(
    backend_settings: Settings, onnx_model_path: Path, make_runtime
):
    runtime = make_runtime(backend_settings.replace(embedder="onnx", model_path=onnx_model_path))
    storage = runtime.storage

    def extract(prompt: str, path: str, answer: str) -> MemoryRecord:
        events = [event("prompt", prompt, "s1"), _edit(path, "s1"),
                  event("session_summary", answer, "s1")]  # fmt: skip
        [record_id] = extract_turns(runtime.tasks, storage.put_events(events)[-1].closed_turns)
        record = storage.get_memory_record(record_id) or storage.get_version(record_id)
        return record if isinstance(record, MemoryRecord) else record.record  # type: ignore[union-attr]

    plugin = "siyuan-plugin/src/index.ts"
    first = extract(
        "The Start Session button of the SiYuan plugin does nothing",
        plugin,
        "The click handler was never bound: bound it in onload, rebuilt the plugin.",
    )
    follow = extract(
        "it loads now but the session panel stays empty",
        plugin,
        "The panel rendered before the session data arrived; it now waits for the fetch.",
    )
    other = extract(
        "add a health check endpoint to the backend",
        "backend/server.py",
        "Added GET /health returning the database and queue state.",
    )
    current = {r.record_id for r in storage.list_memory_records(NS).items}
    assert current == {follow.record_id, other.record_id}
    (version,) = storage.get_history(follow.record_id)
    assert version.record.record_id == first.record_id
    vectors = runtime.embedder.embed([r.embedding_text() for r in (first, follow, other)])
    a, b, c = (np.asarray(v) / np.linalg.norm(v) for v in vectors)
    assert subject.RULE.follow <= float(a @ b) < subject.RULE.session  # the lineage decides
    assert float(b @ c) < subject.RULE.files_apart  # other files: no lineage


@pytest.mark.slow
@pytest.mark.parametrize(
    "reply",
    [("nope", "siyuan-plugin/src/api.ts",
      "Requests from iPadOS go through the kernel's forward proxy now; reload and retry."),
     # A report on the last change: the error pasted.
     ("TypeError: null is not an object (evaluating 'l.session_id')",
      "siyuan-plugin/vite.config.ts",
      "Safari 15 lacks optional chaining here: the bundle now targets es2019.")],
    ids=["nope", "pasted-error"],
)  # fmt: skip
def test_a_reply_naming_nothing_of_its_own_carries_the_session_previous_subject_on(
    backend_settings: Settings, onnx_model_path: Path, make_runtime, reply: tuple[str, str, str]
):
    runtime = make_runtime(backend_settings.replace(embedder="onnx", model_path=onnx_model_path))
    storage = runtime.storage
    written = []
    for prompt, path, answer in [
        ("The Start Session button of the SiYuan plugin does nothing",
         "siyuan-plugin/src/index.ts",
         "The click handler was never bound: bound it in onload, rebuilt the plugin."),
        reply,
    ]:  # fmt: skip
        events = [event("prompt", prompt, "s1"), _edit(path, "s1"),
                  event("session_summary", answer, "s1")]  # fmt: skip
        written += extract_turns(runtime.tasks, storage.put_events(events)[-1].closed_turns)
    first, nope = written
    assert {r.record_id for r in storage.list_memory_records(NS).items} == {nope}
    (version,) = storage.get_history(nope)
    assert version.record.record_id == first
    texts = [version.record.embedding_text(), storage.get_memory_record(nope).embedding_text()]  # type: ignore[union-attr]
    a, b = (np.asarray(v) / np.linalg.norm(v) for v in runtime.embedder.embed(texts))
    assert float(a @ b) < subject.RULE.follow  # the reply decides, not the words


def _said(runtime, session: str, prompt: str, answer: str, *tools: Event) -> list[str]:  # type: ignore[no-untyped-def]
    """Extract one turn of ``session``: the prompt, the tool uses, the answer."""
    events = [event("prompt", prompt, session), *tools, event("session_summary", answer, session)]
    return extract_turns(runtime.tasks, runtime.storage.put_events(events)[-1].closed_turns)


@pytest.mark.slow
@pytest.mark.parametrize("linked", [True, False], ids=["repeat", "new-subject"])
def test_a_turn_that_repeated_an_answer_leads_its_session_on(
    backend_settings: Settings, onnx_model_path: Path, make_runtime, linked: bool
):
    # A question asked in an earlier session is asked again with the same answer (a
    # repeat: the turn writes nothing); "yes" to the answer's offer then goes on with
    # the record the repeat stood for. Asked differently, the second turn writes its own
    # record, and "yes" goes on with that one instead.
    runtime = make_runtime(backend_settings.replace(embedder="onnx", model_path=onnx_model_path))
    question = "Why does the invoice PDF crash on customer names with accents?"
    answer = ("The invoice font has no glyphs for accented letters. "
              "Shall I embed DejaVu Sans in the credit-note PDF too?")  # fmt: skip
    other = ("Customer names with accents crash the invoice PDF: the built-in font lacks "
             "those glyphs, so the renderer raises on them.")  # fmt: skip
    [asked] = _said(runtime, "s0", question, answer)
    again = _said(runtime, "s1", question, answer if linked else other)
    assert again == ([] if linked else again[:1])  # a repeat writes nothing
    edit = _edit("invoicer/pdf/credit_note.py", "s1")
    [yes] = _said(runtime, "s1", "yes", "Embedded DejaVu Sans in the credit-note PDF too.", edit)
    (version,) = runtime.storage.get_history(yes)
    assert version.record.record_id == (asked if linked else again[0])
    current = {r.record_id for r in runtime.storage.list_memory_records(NS).items}
    assert current == ({yes} if linked else {asked, yes})


def _units(runtime, written: list[str]) -> list[np.ndarray]:  # type: ignore[no-untyped-def]
    """The unit vectors of ``written``, current records or versions of the last one's."""
    versions = {v.record.record_id: v.record for v in runtime.storage.get_history(written[-1])}
    records = [versions.get(i) or runtime.storage.get_memory_record(i) for i in written]
    vectors = runtime.embedder.embed([r.embedding_text() for r in records])
    return [np.asarray(v) / np.linalg.norm(v) for v in vectors]


def _counts(runtime) -> list[str]:  # type: ignore[no-untyped-def]
    """A real session's first turn: counts of short transcripts, a threshold offered."""
    return _said(
        runtime, "s1", "4 messages?",
        "82 transcripts with 4 messages, all of them subagent conversations, zero main "
        "sessions: stale task assignments and shutdown exchanges. Filtering at 4 or fewer "
        "messages would remove 325 transcripts. Want me to set the threshold?",
    )  # fmt: skip


@pytest.mark.slow
@pytest.mark.parametrize("back", [True, False], ids=["goes-back", "new-request"])
def test_a_follow_up_goes_back_to_an_earlier_record_of_its_session(
    backend_settings: Settings, onnx_model_path: Path, make_runtime, back: bool
):
    # A real session's shape: counts of short transcripts, a side request for a sample
    # (naming nothing of the answer's: not "one with 4 messages", ``capture.refers_back``),
    # then the next count ("What about 5 messages?"). It is far from the side request
    # (the session's previous record) and near the counts: it supersedes them; a new
    # request does not.
    runtime = make_runtime(backend_settings.replace(embedder="onnx", model_path=onnx_model_path))
    storage = runtime.storage
    [counts] = _counts(runtime)
    [example] = _said(
        runtime, "s1", "Print a sample transcript with 4 messages",
        "A subagent receiving a stale task assignment it already completed, confirming it "
        "is done, then going idle. Noise.",
    )  # fmt: skip
    [new] = (
        _said(runtime, "s1", "What about 5 messages?",
              "17 more, every one a subagent's: already-done replies and shutdown "
              "handshakes. Cutting at 5 or fewer drops 342 transcripts, 61% of all.")
        if back else
        _said(runtime, "s1", "Add the session date to the transcript file names",
              "Transcript files are now named YYYY-MM-DD-HHMM-slug.md so they sort in order.")
    )  # fmt: skip
    a, b, c = _units(runtime, [counts, example, new])
    assert float(b @ c) < subject.RULE.follow  # not the session's previous record
    assert (subject.RULE.recent <= float(a @ c) < subject.RULE.session) is back
    current = {r.record_id for r in storage.list_memory_records(NS).items}
    assert current == ({example, new} if back else {counts, example, new})
    assert [v.record.record_id for v in storage.get_history(new)] == ([counts] if back else [])


@pytest.mark.slow
@pytest.mark.parametrize("named", [True, False], ids=["names-it", "names-another"])
def test_a_follow_up_naming_what_the_answer_before_named_supersedes_it(
    backend_settings: Settings, onnx_model_path: Path, make_runtime, named: bool
):
    # A real session's shape: typed throws across the package, then a request naming an
    # error type that answer made public. Too far apart by their words alone (below the
    # lineage's cosine), the name decides; a type the answer did not name does not.
    runtime = make_runtime(backend_settings.replace(embedder="onnx", model_path=onnx_model_path))
    edit = _edit("Sources/MistKit/Authentication/TokenManager.swift", "s1")
    [converted] = _said(
        runtime, "s1",
        "Look through the throws in MistKit and replace as many as we can with typed throws",
        "The token managers and their mocks now throw TokenManagerError, the keychain and "
        "in-memory stores TokenStorageError; CloudKitError is public now. 161 tests pass.",
        edit,
    )  # fmt: skip
    name = "CloudKitError" if named else "ResponseError"
    [narrower] = _said(
        runtime, "s1", f"I think CloudKitResponseProcessor should only throw {name}",
        "processGetCurrentUserResponse, processListZonesResponse and extractUserData "
        f"declare throws({name}) now; the service wraps errors of the OpenAPI client in "
        "httpErrorWithRawResponse.",
        _edit("Sources/MistKit/Service/CloudKitResponseProcessor.swift", "s1"),
    )  # fmt: skip
    current = {r.record_id for r in runtime.storage.list_memory_records(NS).items}
    assert current == ({narrower} if named else {converted, narrower})
    assert [v.record.record_id for v in runtime.storage.get_history(narrower)] == (
        [converted] if named else []
    )
    a, b = _units(runtime, [converted, narrower])
    assert subject.RULE.follow_named <= float(a @ b) < subject.RULE.follow


@pytest.mark.slow
@pytest.mark.parametrize("between", [False, True], ids=["its-subject", "another-subject"])
def test_a_follow_up_near_a_superseded_version_supersedes_its_subject_current_record(
    backend_settings: Settings, onnx_model_path: Path, make_runtime, between: bool
):
    # A real session's shape: counts of short transcripts, then "nope" carries the
    # subject on (its record, now the current one, says little of it), then the request
    # the counts led to. Far from "nope", near the counts (now a version): it supersedes
    # "nope". After a request on another subject in between, the counts are a version
    # of a subject the session has left: the request starts its own.
    runtime = make_runtime(backend_settings.replace(embedder="onnx", model_path=onnx_model_path))
    storage = runtime.storage
    [counts] = _counts(runtime)
    [nope] = _said(
        runtime, "s1", "nope",
        "Reverted the filter script to its previous state and restored the deleted files.",
        _edit("scripts/clean_transcripts.py", "s1"),
    )  # fmt: skip
    assert [v.record.record_id for v in storage.get_history(nope)] == [counts]
    written = [counts, nope]
    if between:
        written += _said(
            runtime, "s1", "Add the session date to the transcript file names",
            "Transcript files are now named YYYY-MM-DD-HHMM-slug.md so they sort in order.",
        )  # fmt: skip
    [threshold] = _said(
        runtime, "s1", "Set the threshold at 4 or fewer messages",
        "Done: the clean-up script now drops them. 248 transcripts remain, 56% of the "
        "noise gone. Want me to commit?",
    )  # fmt: skip
    records = [
        storage.get_memory_record(i) or storage.get_version(i) for i in [*written, threshold]
    ]
    texts = [getattr(r, "record", r).embedding_text() for r in records]
    units = [np.asarray(v) / np.linalg.norm(v) for v in runtime.embedder.embed(texts)]
    near = [float(u @ units[-1]) for u in units[:-1]]
    assert near[0] >= subject.RULE.follow  # the counts, a version of "nope"
    assert all(cosine < subject.RULE.follow for cosine in near[1:])  # the current records
    assert max(near) < subject.RULE.session
    current = {r.record_id for r in storage.list_memory_records(NS).items}
    history = [v.record.record_id for v in storage.get_history(threshold)]
    if between:
        assert current == {nope, written[2], threshold} and history == []
    else:
        assert current == {threshold} and history == [nope, counts]

"""The jobs: their functions, which take ids, re-read and are idempotent, and at the end
their declarations (``JOBS``), which both dispatchers and the Celery worker read.

The database is the source of truth for pending work (unextracted turns, records with
no embedding), so every function here may run twice, concurrently, or after a crash:
``mark_turn_extracted`` is conditional, and a turn another worker marked first has none
of its records written; embedding skips records that already have a vector.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from datetime import timedelta
from typing import TYPE_CHECKING, Any

import numpy as np

from wakemark.shared.jobs.job import (
    QUEUE_BACKFILL,
    QUEUE_EMBEDDING,
    QUEUE_EXTRACTION,
    Context,
    Job,
)
from wakemark.shared.models import MemoryRecord, utcnow
from wakemark.shared.registry import Registry
from wakemark.shared.storage import CodeAnchors, Events, NotFoundError, Turn

if TYPE_CHECKING:
    from wakemark.shared.embedding import Model
    from wakemark.shared.extraction import Extracted
    from wakemark.shared.extraction.subject import Match
    from wakemark.shared.storage.base import Tx

log = logging.getLogger("wakemark.jobs")

EMBED_BATCH = 64  # records per embed job: one model call, one transaction
EXTRACT_BATCH = 32  # turns per extract job: one model call, one transaction
RETENTION_EVERY_S = 3600.0
SWEEP_EMBED_LIMIT = 2000  # records re-enqueued per sweep; the rest wait for the next one

Progress = Callable[[int, int], None]  # (done, total)


def _embedder_unavailable() -> type[Exception]:
    from wakemark.shared.embedding import EmbedderUnavailable

    return EmbedderUnavailable


def _embed(model: Model, records: Sequence[MemoryRecord]) -> np.ndarray:
    vectors = model.embed([r.embedding_text() for r in records])
    return np.asarray(vectors, dtype=np.float32)


class ModelChanged(RuntimeError):
    """The records' vectors became another model's (a rebuild swapped) while a job held
    vectors of the one before: they are not written; the job's work stays pending."""


_mismatch_logged: set[tuple[str, str | None]] = set()


def usable_model(ctx: Context) -> Model | None:
    """The embedder's model when the records' vectors are of it (a database that records
    none yet takes it as theirs); None when they are another model's: its vectors would
    not compare with them, so none are written until the process has switched to the
    stored model (``Embedder.switch``, started here) or ``wakemark backfill --rebuild``
    swaps in the vectors of this one. Raises EmbedderUnavailable."""
    model = ctx.embedder.model()
    stored = ctx.embedder.stored_other(ctx.storage, model)
    if stored is None:
        return model
    mine = model.identity
    if (mine, stored.model) not in _mismatch_logged:
        _mismatch_logged.add((mine, stored.model))
        log.warning(
            "the stored vectors are of model %s, the loaded one is %s: no vectors are "
            "written until this process switches to the stored model or `wakemark "
            "backfill --rebuild` re-embeds the records",
            stored.model,
            mine,
        )
    return None


def _try_embed(ctx: Context, records: Sequence[MemoryRecord]) -> tuple[np.ndarray, str] | None:
    """Vectors for the records and the identity of their model, or None when the
    embedder is off or unavailable, or the stored vectors are another model's
    (``usable_model``)."""
    if not records or ctx.settings.embedder == "off":
        return None
    try:
        model = usable_model(ctx)
        return None if model is None else (_embed(model, records), model.identity)
    except _embedder_unavailable() as exc:
        log.info("embedder unavailable, records stay pending: %s", exc)
        return None


def _check_model(tx: Tx, model: str) -> None:
    """First in a transaction that writes vectors of ``model``: it is the stored one, and
    stays so until the transaction commits."""
    if tx.embedding_models().model != model:
        raise ModelChanged("the stored vectors changed model; the vectors are not written")


# --- extraction ---------------------------------------------------------------------------


def _joined(turn: Turn, ctx: Context) -> list[Turn]:
    """The session's unanswered turns just before ``turn`` that it continues. Read from
    the database, not taken from the batch, so the answer is the same whichever order
    (or worker) the session's turns are extracted in."""
    from wakemark.shared.extraction import LOOKBACK, joined_turns, may_join

    before = ctx.storage.turns_before(turn.turn_id, LOOKBACK)
    idle_s = ctx.settings.turn_idle_s
    # Most turns follow an answered one: read that one alone first.
    if not before or not all(may_join(t) for t in ctx.storage.get_turns(before[:1])):
        return []
    return joined_turns(ctx.storage.get_turns(before[::-1]), turn, idle_s)


def _candidates(turn: Turn, ctx: Context) -> Extracted:
    from wakemark.shared.extraction import extract_turn

    # ``extract_turn`` turns note events into records as written (``record_from_note``).
    return extract_turn(turn, ctx.settings, _joined(turn, ctx))


def _dedupe(
    records: list[MemoryRecord], vectors: np.ndarray
) -> tuple[list[MemoryRecord], np.ndarray]:
    from wakemark.shared.extraction import dedupe

    kept, kept_vectors = dedupe(records, list(vectors))
    return kept, np.stack(kept_vectors) if kept_vectors else vectors[:0]


def extract_turns(ctx: Context, turn_ids: Sequence[str]) -> list[str]:
    """Extract closed turns into records, embedded in one call and written in one
    transaction (a commit costs more than a record); returns the ids written. A turn that
    is unknown, open or already extracted is skipped, and so is one another worker marks
    extracted first: none of its records are written.

    Should the batch fail, each turn is tried alone, so one bad turn holds no other back;
    the first error is raised after (its turn stays pending).

    Consolidation (``WAKEMARK_CONSOLIDATE``, on by default) decides each new record's
    subject inside the transaction, under the namespace's subject lock, against the
    current records as they are then (the batch's earlier records included): concurrent
    workers never leave two current records of one subject.
    """
    if len(turn_ids) > 1:
        try:
            return _extract_together(ctx, turn_ids)
        except Exception:
            log.warning("extracting %d turns together failed; one by one", len(turn_ids))
    written: list[str] = []
    failed: Exception | None = None
    for turn_id in turn_ids:
        try:
            written += _extract_together(ctx, [turn_id])
        except Exception as exc:
            failed = failed or exc
    if failed is not None:
        raise failed
    return written


class _Subjects:
    """The subject of each new record of an extraction transaction (``subject.match``).

    Runs inside the transaction, under each namespace's subject lock, so what it reads
    stays current until the commit. The current records near the transaction's new ones
    are read once per namespace; the records the transaction writes are matched as they
    are written, so a later turn of the batch can supersede an earlier one. A record
    without a vector (the embedder is off or down) starts a subject of its own.

    A record's session is its first source event's: known for the batch's turns, read
    (once) for an older record when the rule asks for it. A record of a turn that follows
    up the one before it also meets the session's recent records (the lineage rule), and
    what those turns wrote that is now a version of the previous record's subject."""

    def __init__(
        self,
        tx: Tx,
        plans: Sequence[tuple[str, list[MemoryRecord], Any]],
        storage: Events,
        turns: Sequence[Turn],
    ) -> None:
        from wakemark.shared.extraction import subject

        self._subject = subject
        self._tx = tx
        self._storage = storage
        self._sessions: dict[str, str | None] = {
            e.event_id: t.session_id for t in turns for e in t.events
        }
        self._near: dict[str, list[tuple[MemoryRecord, float]]] = {}
        self._gone: set[str] = set()  # superseded by this transaction
        self._fresh: list[tuple[MemoryRecord, np.ndarray]] = []  # written by it
        by_ns: dict[str, list[tuple[MemoryRecord, np.ndarray]]] = {}
        for _, records, vectors in plans:
            if vectors is not None:
                for record, vector in zip(records, vectors, strict=True):
                    by_ns.setdefault(record.namespace, []).append((record, vector))
        for ns, pairs in by_ns.items():
            tx.lock_subjects(ns)
            found = tx.subject_neighbours(ns, np.stack([v for _, v in pairs]), subject.NEIGHBOURS)
            self._near.update(
                (r.record_id, near) for (r, _), near in zip(pairs, found, strict=True)
            )

    def match(
        self,
        record: MemoryRecord,
        vector: np.ndarray,
        follows_up: str | None = None,
        carries_on: bool = False,
    ) -> Match | None:
        """``follows_up``: the id of the record's turn when it follows up the one before;
        ``carries_on``: that turn names nothing of its own (``subject.continues``)."""
        if record.record_id not in self._near:
            return None
        recent: list[tuple[MemoryRecord, float]] = []
        versions: list[tuple[MemoryRecord, float]] = []
        if follows_up is not None:
            lineage = self._subject.LINEAGE
            recent = self._tx.session_recent(follows_up, vector, lineage)
            if recent and self._subject.RULE.versions:
                head = recent[0][0].record_id
                versions = self._tx.session_versions(follows_up, head, vector, lineage)
        near = [(r, c) for r, c in self._near[record.record_id] if r.record_id not in self._gone]
        unit = vector / max(float(np.linalg.norm(vector)), 1e-12)
        for other, v in self._fresh:
            if other.namespace == record.namespace and other.record_id not in self._gone:
                near.append((other, float(unit @ v) / max(float(np.linalg.norm(v)), 1e-12)))
        near.sort(key=lambda pair: -pair[1])
        return self._subject.match(
            record,
            near[: self._subject.NEIGHBOURS],
            session_of=self._session_of,
            previous=recent[0] if recent else None,
            carries_on=carries_on,
            recent=recent[1:],
            versions=versions,
        )

    def _session_of(self, record: MemoryRecord) -> str | None:
        if not record.source_event_ids:
            return None  # written directly (MCP remember, import): no session
        first = record.source_event_ids[0]
        if first not in self._sessions:
            event = self._storage.get_event(first)
            self._sessions[first] = event.session_id if event is not None else None
        return self._sessions[first]

    def written(self, record: MemoryRecord, vector: np.ndarray, found: Match | None) -> None:
        self._fresh.append((record, vector))
        if found is not None:
            self._tx.supersede(found.old.record_id, record.record_id, utcnow())
            self._gone.add(found.old.record_id)


def _anchors(
    ctx: Context, turns: Sequence[Turn], plans: Sequence[tuple[str, list[MemoryRecord], Any]]
) -> dict[str, CodeAnchors]:
    """Each record's code anchors, its files read now (close to the turn, before the
    transaction) when the server may read its clients' files; else the hashes the
    client sent with the turn's edits, the last of each file."""
    from wakemark.shared.retrieval.staleness import capture, edited_in, local_install

    readable = local_install(ctx.settings)
    roots = {
        t.turn_id: next((e.source.project_path for e in reversed(t.events)
                         if e.source.project_path), None)
        for t in turns
    }  # fmt: skip
    edits = {} if readable else {t.turn_id: edited_in(t.events) for t in turns}
    out: dict[str, CodeAnchors] = {}
    for turn_id, records, _ in plans:
        for record in records:
            found = capture(record, roots.get(turn_id), readable, edits.get(turn_id))
            if found is not None:
                out[record.record_id] = found
    return out


def _extract_together(ctx: Context, turn_ids: Sequence[str]) -> list[str]:
    storage = ctx.storage
    turns = [t for t in storage.get_turns(turn_ids) if t.closed and not t.extracted]
    extracted = [_candidates(turn, ctx) for turn in turns]
    candidates = [e.records for e in extracted]
    skipped = {t.turn_id: e.skipped for t, e in zip(turns, extracted, strict=True)}
    # turn -> whether it names nothing of its own, for the turns that follow up
    follows = {t.turn_id: e.carries_on for t, e in zip(turns, extracted, strict=True)
               if e.follows_up}  # fmt: skip
    embedded = _try_embed(ctx, [r for records in candidates for r in records])
    all_vectors = None if embedded is None else embedded[0]
    plans: list[tuple[str, list[MemoryRecord], np.ndarray | None]] = []
    start = 0
    for turn, records in zip(turns, candidates, strict=True):
        vectors = None if all_vectors is None else all_vectors[start : start + len(records)]
        start += len(records)
        if vectors is not None:
            records, vectors = _dedupe(records, vectors)
        plans.append((turn.turn_id, records, vectors))
    if not plans:
        return []
    anchors = _anchors(ctx, turns, plans)
    written: list[str] = []
    with storage.transaction() as tx:
        if embedded is not None:
            # Raised: the turns stay pending, extracted again (without vectors) later.
            _check_model(tx, embedded[1])
        on = ctx.settings.consolidate == "on"
        subjects = _Subjects(tx, plans, storage, turns) if on else None
        for turn_id, records, vectors in plans:
            found: dict[int, Match] = {}
            if subjects is not None and vectors is not None:
                lineage = turn_id if turn_id in follows else None
                matched = (
                    (i, subjects.match(r, vectors[i], lineage, follows.get(turn_id, False)))
                    for i, r in enumerate(records)
                )
                found = {i: m for i, m in matched if m is not None}
            kept = [(i, r) for i, r in enumerate(records) if not (i in found and found[i].repeat)]
            ids = [r.record_id for _, r in kept]
            skip = (skipped[turn_id] or ("repeat" if records else None)) if not ids else None
            # All repeats: the turn stands for the record its newest one repeated.
            repeat_of = found[len(records) - 1].old.record_id if records and not ids else None
            if not tx.mark_turn_extracted(turn_id, ids, skip, repeat_of):
                log.debug("turn %s already extracted by another worker", turn_id)
                continue
            for i, record in kept:
                tx.put_memory_record(record)
                if vectors is not None:
                    tx.put_embedding(record.record_id, vectors[i])
                    if subjects is not None:
                        subjects.written(record, vectors[i], found.get(i))
                if record.record_id in anchors:
                    tx.put_anchors(anchors[record.record_id])
            written += ids
        if all_vectors is None and written and ctx.settings.embedder != "off":
            tx.on_commit(lambda: ctx.enqueue(EMBED, written))
    return written


# --- embedding ----------------------------------------------------------------------------


def _store_vectors(
    ctx: Context,
    records: Sequence[MemoryRecord],
    vectors: np.ndarray,
    model: str,
    staged: bool = False,
) -> int:
    """The records' vectors, made by ``model`` (``staged``: the rebuild's)."""

    def put(batch: Sequence[tuple[MemoryRecord, np.ndarray]]) -> None:
        with ctx.storage.transaction() as tx:
            if not staged:
                _check_model(tx, model)
            elif tx.embedding_models().staged != model:
                raise ModelChanged("another rebuild took over")
            for record, vector in batch:
                if staged:
                    tx.put_staged(record.record_id, vector)
                else:
                    tx.put_embedding(record.record_id, vector)

    pairs = list(zip(records, vectors, strict=True))
    try:
        put(pairs)
        return len(pairs)
    except NotFoundError:
        # A record was deleted meanwhile: keep the others, one small transaction each.
        written = 0
        for pair in pairs:
            try:
                put([pair])
                written += 1
            except NotFoundError:
                pass
        return written


def embed_records(ctx: Context, record_ids: Sequence[str]) -> int:
    """Embed the records that still lack a vector; returns how many were written.

    An unavailable embedder is not an error here: the records stay pending in the
    database and the sweep/backfill picks them up once the model is back. Raising would
    only make Celery retry into the same missing model file (an exception storm).
    """
    if ctx.settings.embedder == "off" or not record_ids:
        return 0
    storage = ctx.storage
    records = [
        r
        for r in storage.get_memory_records(list(record_ids))
        if not storage.has_embedding(r.record_id)
    ]
    embedded = _try_embed(ctx, records)
    if embedded is None:
        return 0
    try:
        return _store_vectors(ctx, records, *embedded)
    except ModelChanged:
        return 0  # pending: embedded once this process's model is the stored one again


# --- backfill -----------------------------------------------------------------------------


def backfill_embeddings(
    ctx: Context,
    batch: int = EMBED_BATCH,
    namespace: str | None = None,
    progress: Progress | None = None,
    stop: threading.Event | None = None,
    wait_on_open: bool = False,
    max_seconds: float | None = None,
) -> dict[str, Any]:
    """Embed every record missing a vector, batch by batch (one transaction each).

    After ``threshold`` consecutive failed batches the breaker opens: a task returns
    (the next beat tick tries again after the cool-down); the CLI (``wait_on_open``)
    waits out the cool-down and retries until stopped. ``max_seconds`` ends the run
    between batches (a Celery task stops well inside its time limit; the next beat tick
    continues where it left off). Nothing is embedded while the stored vectors are
    another model's (``usable_model``: ``"model": None`` in the result).
    """
    if ctx.settings.embedder == "off":
        return {"embedded": 0, "failures": 0, "breaker": "disabled"}
    model: Model | None
    try:
        model = usable_model(ctx)
        if model is None:
            return {"embedded": 0, "failures": 0, "breaker": ctx.breaker.state, "model": None}
    except _embedder_unavailable():
        model = None  # not known yet: the batches fail and the breaker decides
    storage = ctx.storage

    def missing() -> list[MemoryRecord]:
        nonlocal model
        if model is None:
            # Begun with the embedder down, so a database that records no model yet was
            # not claimed: the first batch does (or the breaker counts the failure).
            model = usable_model(ctx)
            if model is None:
                raise ModelChanged("the stored vectors are another model's")
        return storage.records_missing_embedding(batch, namespace)

    total = storage.stats(namespace)["pending_embedding"]
    result = _batches(ctx, missing, False, total, progress, stop, wait_on_open, max_seconds)
    return {**result, "model": "" if model is None else model.identity}


def rebuild_embeddings(
    ctx: Context,
    batch: int = EMBED_BATCH,
    progress: Progress | None = None,
    stop: threading.Event | None = None,
    wait_on_open: bool = False,
) -> dict[str, Any]:
    """Re-embed every record with the configured model (a model change) without taking
    the vectors searched meanwhile away: the new vectors are staged beside them, batch
    by batch (one transaction each: a rebuild stopped or crashed goes on from there when
    run again), and replace them in one transaction once every record has one
    (``swap_staged``). A pass over the records in id order, then passes from the start
    again for the records written meanwhile, until the swap finds none missing.

    ``"swapped"`` in the result: True once the new vectors are the records'."""
    storage = ctx.storage
    loaded = ctx.embedder.model()  # raises EmbedderUnavailable
    model = loaded.identity
    # Where a running process of the old model finds this one's file (``Embedder.switch``).
    total = storage.start_rebuild(model, str(loaded.path.absolute()))
    after = ""
    swapped = False

    def unstaged() -> list[MemoryRecord]:
        nonlocal after, swapped
        while True:
            records = storage.records_missing_staged(batch, after)
            if records:
                after = records[-1].record_id
                return records
            if after:
                after = ""  # another pass: records written while this one went on
            elif storage.swap_staged(model):
                swapped = True
                return []
            elif storage.embedding_models().staged != model:
                raise ModelChanged("another rebuild took over")

    result = _batches(ctx, unstaged, True, total, progress, stop, wait_on_open, None)
    return {**result, "model": model, "swapped": swapped}


def _batches(
    ctx: Context,
    records_of: Callable[[], list[MemoryRecord]],
    staged: bool,
    total: int,
    progress: Progress | None,
    stop: threading.Event | None,
    wait_on_open: bool,
    max_seconds: float | None,
) -> dict[str, Any]:
    """Embed and store ``records_of()`` until it returns none (see ``backfill_embeddings``
    for the breaker, ``wait_on_open`` and ``max_seconds``)."""
    breaker = ctx.breaker
    stop = stop or threading.Event()
    done = failures = 0
    deadline = None if max_seconds is None else time.monotonic() + max_seconds
    if progress:
        progress(0, total)
    while not stop.is_set() and (deadline is None or time.monotonic() < deadline):
        if breaker.state == "open":
            if not wait_on_open:
                break
            stop.wait(breaker.remaining_s())
            continue
        try:
            records = records_of()
            if not records:
                break
            # One model a batch: the write checks it is still the stored (or staged) one.
            model = ctx.embedder.model()
            written = _store_vectors(ctx, records, _embed(model, records), model.identity, staged)
        except ModelChanged as exc:
            log.warning("backfill stopped: %s", exc)
            break
        except Exception as exc:  # embedder down, database hiccup: the breaker decides
            failures += 1
            breaker.failure(exc)
            log.warning("backfill batch failed (%s): %s", breaker.state, exc)
            continue
        breaker.success()
        done += written
        total = max(total, done)
        if progress:
            progress(done, total)
        if written == 0:
            break  # the batch vanished under us; nothing left we can make progress on
    return {"embedded": done, "failures": failures, "breaker": breaker.state}


# --- retention ----------------------------------------------------------------------------


def trim_events(ctx: Context) -> dict[str, int]:
    """The retention pass (``shared/retention.py``): trim the raw bodies of turns extracted
    more than ``WAKEMARK_EVENT_RETENTION_DAYS`` ago to stubs, drop retrieval audit rows of
    that age, expire turns past ``WAKEMARK_EVENT_EXPIRY_DAYS`` and records past
    ``WAKEMARK_RECORD_RETENTION_DAYS``; a bounded number a run."""
    from wakemark.shared import retention

    s = ctx.settings
    return retention.expire(
        ctx.storage, s.event_retention_days, s.event_expiry_days, s.record_retention_days,
        max_turns=retention.RUN_MAX_TURNS,
    )  # fmt: skip


# --- sweep --------------------------------------------------------------------------------


def _not_queued(ctx: Context, queue: str, ids: list[str]) -> list[str]:
    """The ids no job waiting in ``queue`` carries (all of them if it cannot be read).

    Sweeps re-enqueue what is pending but not queued: work whose message was lost (a
    Redis restart, a worker killed with it unacknowledged) and nothing else, so a
    backlog slower than the sweep interval never piles up copies. Counting messages
    instead would starve that lost work under steady load: fresh jobs always queued
    would look like it.
    """
    queued = ctx.queued_ids(queue)
    return ids if queued is None else [i for i in ids if i not in queued]


def sweep(ctx: Context, embeddings: bool = True) -> dict[str, int]:
    """Close idle turns and re-enqueue everything the database says is pending and no
    queued job carries.

    ``embeddings=False`` where a scheduled backfill covers records missing a vector
    (Celery beat), so the two don't embed the same records twice.
    """
    storage = ctx.storage
    closed = storage.close_idle_turns(utcnow() - timedelta(seconds=ctx.settings.turn_idle_s))
    pending = storage.pending_turns()
    lost = _not_queued(ctx, QUEUE_EXTRACTION, pending) if pending else []
    if lost:
        ctx.enqueue(EXTRACT, lost)
    missing: list[str] = []
    if embeddings and ctx.settings.embedder != "off" and _embeds_now(ctx):
        missing = [r.record_id for r in storage.records_missing_embedding(SWEEP_EMBED_LIMIT)]
        unqueued = _not_queued(ctx, QUEUE_EMBEDDING, missing) if missing else []
        if unqueued:
            ctx.enqueue(EMBED, unqueued)  # the dispatcher batches them
    return {"closed": len(closed), "extract": len(pending), "embed": len(missing)}


def _embeds_now(ctx: Context) -> bool:
    """Whether this process writes vectors now (else records missing one stay pending)."""
    try:
        return usable_model(ctx) is not None
    except _embedder_unavailable():
        return True  # the embed job finds out, and keeps them pending


def _scheduled_backfill(ctx: Context, namespace: str | None = None) -> dict[str, Any]:
    # Stop between batches well inside the task time limit; the next tick continues.
    budget = ctx.settings.task_time_limit_s * 0.5
    return backfill_embeddings(ctx, namespace=namespace, max_seconds=budget)


# --- the declarations ---------------------------------------------------------------------

EXTRACT = Job("wakemark.extract_turns", QUEUE_EXTRACTION, extract_turns, batch=EXTRACT_BATCH)
EMBED = Job(
    "wakemark.embed_records", QUEUE_EMBEDDING, embed_records, batch=EMBED_BATCH, embeds=True
)
# Two backfills at once would embed the same oldest records twice: one at a time.
BACKFILL = Job(
    "wakemark.backfill_embeddings", QUEUE_BACKFILL, _scheduled_backfill, periodic={}, exclusive=True
)
# On the extraction queue: it is cheap and must run even where only extraction workers
# exist. Where the backfill is scheduled too, records missing a vector are its job.
SWEEP = Job("wakemark.sweep", QUEUE_EXTRACTION, sweep, periodic={"embeddings": False})

# Raw event bodies age out in days: an hourly run is prompt enough, and keeps the trim off
# the every-minute sweep. On the backfill queue: long and never urgent.
RETENTION = Job(
    "wakemark.trim_events", QUEUE_BACKFILL, trim_events, periodic={}, every_s=RETENTION_EVERY_S
)

# Jobs that take ids, in the order an in-process worker serves them: extraction first,
# since it creates the records to embed.
ID_JOBS = (EXTRACT, EMBED)
# Every job by its task name: the Celery tasks, routes and schedule, and the in-process
# dispatcher's queues, come from here.
JOBS: Registry[Job] = Registry(
    "job",
    {
        EXTRACT.name: "wakemark.shared.jobs.tasks:EXTRACT",
        EMBED.name: "wakemark.shared.jobs.tasks:EMBED",
        BACKFILL.name: "wakemark.shared.jobs.tasks:BACKFILL",
        SWEEP.name: "wakemark.shared.jobs.tasks:SWEEP",
        RETENTION.name: "wakemark.shared.jobs.tasks:RETENTION",
    },
)

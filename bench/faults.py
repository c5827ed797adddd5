"""Faults under load: the process twin of compose (``tests/stack/stack.py``: gunicorn
API, one Celery worker per queue group, beat) against a private Postgres and Redis this
bench starts itself, then the SQLite shape on a small tmpfs. While clients post at a
steady rate, one fault per window:

a. SIGKILL one gunicorn API worker (the busiest: most likely inside a batch);
b. SIGKILL the extraction worker (the whole group, as ``docker kill``) while its pool
   process is busy, restarted 1 s later (``restart: unless-stopped``);
c. restart Redis (stopped DOWN_S, no persistence: every queued message is lost);
d. restart Postgres (fast shutdown, DOWN_S down, then started);
e. SQLite shape (``wakemark serve``, in-process jobs) with its home on a tmpfs filled to
   the last bytes for DOWN_S, then the filler deleted.

Clients: CLIENTS agents posting Claude Code hook payloads (``UserPromptSubmit``, two
``PostToolUse``, ``Stop``; ``prompt_id``/``tool_use_id`` make the server's event ids
deterministic, so a retry stores nothing twice), one every INTERVAL_S each, and one bulk
client posting ``/v1/events`` batches of BATCH events with client ULIDs (one turn each).
``wakemark hook`` itself never retries (it fails open after 2 s); these clients model an
agent-side retry: on 503/507, a connection error or a timeout they wait ``Retry-After``
(0.5 s without one) and send the same payload again, for up to GIVE_UP_S. Each attempt
has the hook's 2 s timeout; an answer slower than that counts as a hang.

Per window, from the database itself: events acknowledged and stored (by a marker each
payload carries), acknowledged-but-lost, batches stored in part, turns closed and
extracted, records and records with a vector, duplicates (an event feeding two
records), the statuses clients saw and the slowest answer, and the time to recover:
from the fault's end until clients are answered 2xx again and every turn closed before
it is extracted with its records embedded. Target: 0 lost, 0 duplicates, recovery ≤ 2
sweep intervals, 503 + Retry-After (never a hang) while Postgres is down.

Run alone: ``python -m bench faults``. Needs root (or CAP_SYS_ADMIN) for the tmpfs, and
Postgres 15 binaries with pgvector (``WAKEMARK_PG_BIN``).
"""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import re
import signal
import sqlite3
import tempfile
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from tests.stack.stack import PostgresServer, Proc, RedisServer, Stack, fill, tmpfs
from wakemark.services.forwarder.forward import TIMEOUT_S as HOOK_TIMEOUT_S

SWEEP_S = 5  # WAKEMARK_SWEEP_INTERVAL_S for the bench: recovery is measured against it
CLIENTS = 3
INTERVAL_S = 0.15  # between two hooks of one client: 20 hooks/s in all
BATCH = 100  # events per bulk request: a prompt, 98 tool uses, a summary
BATCH_EVERY_S = 2.0
BEFORE_S = 5.0  # load before the fault
DOWN_S = 5.0  # Redis or Postgres stopped, the disk full
AFTER_S = 15.0  # load after the fault ends
GIVE_UP_S = 60.0  # a client's retries of one payload
CATCH_UP_S = 120.0  # bound on waiting for the pipeline
# After start-up, before the first window: each API and Celery worker loads the model in
# the background, and hooks answered meanwhile are slow for a reason that is not a fault.
SETTLE_S = 20.0
DISK = "64m"
MODEL = Path(os.environ.get("WAKEMARK_MODEL_PATH", "~/.wakemark/models/all-MiniLM-L6-v2.onnx"))
_MARK = re.compile(r"fzm-[0-9a-f]{8}-\d+-\d+-\d+")
_WORDS = ("cart", "coupon", "invoice", "retry", "cache", "token", "parser", "config",
          "migrate", "index", "render", "worker", "queue", "session", "export", "tax")  # fmt: skip


# --- clients ------------------------------------------------------------------------------


class Load:
    """The clients of one window: hook agents and the bulk client, in threads."""

    def __init__(self, port: int, token: str, project: Path, tag: str) -> None:
        self.port, self.token, self.project, self.tag = port, token, project, tag
        self.stop = threading.Event()
        self.lock = threading.Lock()
        self.acked: set[str] = set()  # markers of hook payloads answered 2xx
        self.unacked: set[str] = set()  # given up, or refused for good
        self.batches: dict[str, list[str]] = {}  # batch marker -> its event ids
        self.acked_batches: set[str] = set()
        self.statuses: Counter[str] = Counter()
        self.first_try_failed = 0  # what a fail-open forwarder without retries drops
        self.no_retry_after = 0  # 503/507 answered without Retry-After
        self.hangs: Counter[str] = Counter()  # attempts slower than the hook timeout, by kind
        self.max_latency = 0.0
        self.ok_times: list[float] = []  # monotonic times of 2xx answers
        self.batch_sent = threading.Event()  # set as each bulk request goes out
        self.threads: list[threading.Thread] = []

    def start(self) -> None:
        targets: list[Callable[[], None]] = [
            (lambda i=i: self._agent(i))
            for i in range(CLIENTS)  # type: ignore[misc]
        ]
        targets.append(self._bulk)
        for target in targets:
            thread = threading.Thread(target=target, daemon=True)
            thread.start()
            self.threads.append(thread)

    def finish(self) -> None:
        """Stop at the next turn boundary (so every turn sent is closed) and wait."""
        self.stop.set()
        for thread in self.threads:
            thread.join(GIVE_UP_S + 10)

    # Each agent is one Claude Code session; a turn is four hooks.
    def _agent(self, client: int) -> None:
        session = f"{self.tag}-{client}-{uuid.uuid4()}"
        turn = 0
        while not self.stop.is_set():
            for k, (marker, payload) in enumerate(self._turn(session, client, turn)):
                if k:
                    time.sleep(INTERVAL_S)
                ok = self._send("/v1/hooks/claude-code", payload, marker)
                with self.lock:
                    (self.acked if ok else self.unacked).add(marker)
            turn += 1
            time.sleep(INTERVAL_S)

    def _turn(self, session: str, client: int, turn: int) -> list[tuple[str, dict[str, Any]]]:
        mark = [f"fzm-{self.tag}-{client}-{turn}-{k}" for k in range(4)]
        word = _WORDS[(client * 7 + turn) % len(_WORDS)]
        module = f"src/{word}_{turn % 13}.py"
        prompt_id = f"p-{mark[0]}"
        base = {
            "session_id": session,
            "transcript_path": f"/home/dev/.claude/{session}.jsonl",
            "cwd": str(self.project),
            "permission_mode": "default",
            "prompt_id": prompt_id,
        }
        return [
            (mark[0], {**base, "hook_event_name": "UserPromptSubmit",
                       "prompt": f"{mark[0]} the {word} total is wrong in {module} after turn "
                                 f"{turn}; find why and fix it"}),
            (mark[1], {**base, "hook_event_name": "PostToolUse", "tool_name": "Read",
                       "tool_use_id": f"toolu_{mark[1]}",
                       "tool_input": {"file_path": f"{self.project}/{module}"},
                       "tool_response": {"type": "text", "file": {
                           "filePath": f"{self.project}/{module}", "numLines": 3,
                           "content": f"# {mark[1]}\ndef {word}_total(items):\n"
                                      f"    return round(sum(items), 1)\n"}}}),
            (mark[2], {**base, "hook_event_name": "PostToolUse", "tool_name": "Bash",
                       "tool_use_id": f"toolu_{mark[2]}",
                       "tool_input": {"command": f"pytest -q tests/test_{word}.py  # {mark[2]}",
                                      "description": "Run the tests"},
                       "tool_response": {"stdout": f"{turn % 5 + 3} passed in 0.{turn % 9}1s",
                                         "stderr": "", "interrupted": False, "isImage": False}}),
            (mark[3], {**base, "hook_event_name": "Stop", "stop_hook_active": False,
                       "last_assistant_message": f"{mark[3]} Fixed `{word}_total` in "
                       f"`{module}`: it rounded to one decimal; it now rounds half-even to "
                       f"cents. `pytest -q tests/test_{word}.py` passes."}),
        ]  # fmt: skip

    def _bulk(self) -> None:
        n = 0
        while not self.stop.is_set():
            marker = f"fzm-{self.tag}-99-{n}-0"
            batch = self._batch(marker)
            ids = [e["event_id"] for e in batch]
            with self.lock:
                self.batches[marker] = ids
            if self._send("/v1/events", {"events": batch}, marker):
                with self.lock:
                    self.acked_batches.add(marker)
            n += 1
            self.stop.wait(BATCH_EVERY_S)

    def _batch(self, marker: str) -> list[dict[str, Any]]:
        from wakemark.shared.models import new_ulid

        now = datetime.now(UTC).isoformat()
        ns = f"/actor/bulk/project/{self.tag}00000000/"
        session = f"bulk-{marker}"

        def event(kind: str, body: dict[str, Any]) -> dict[str, Any]:
            return {"event_id": new_ulid(), "session_id": session, "actor_id": "bulk",
                    "namespace": ns, "kind": kind, "body": body, "valid_time": now,
                    "source": {"surface": "bench", "project_path": str(self.project)}}  # fmt: skip

        tools = [
            event("tool_use", {"type": "json", "data": {
                "tool_name": "Bash", "tool_input": {"command": f"make check-{i}"},
                "tool_response": {"stdout": f"{marker} step {i} ok " + "x" * 600,
                                  "stderr": "", "exit_code": 0}}})
            for i in range(BATCH - 2)
        ]  # fmt: skip
        return [
            event("prompt", {"type": "text", "content": f"{marker} run the release checks"}),
            *tools,
            event("session_summary", {"type": "text", "content": f"{marker} checks passed"}),
        ]

    def _send(self, path: str, payload: Any, marker: str) -> bool:
        """POST until a 2xx, a status not worth retrying, or GIVE_UP_S; True if acked."""
        body = json.dumps(payload).encode()
        headers = {"Authorization": f"Bearer {self.token}", "Content-Type": "application/json",
                   "X-Wakemark-Project": str(self.project), "X-Wakemark-Actor": "dev"}  # fmt: skip
        give_up = time.monotonic() + GIVE_UP_S
        first = True
        while True:
            start = time.monotonic()
            if path == "/v1/events":
                self.batch_sent.set()
            status, retry_after = self._attempt(path, body, headers)
            took = time.monotonic() - start
            with self.lock:
                self.statuses[status] += 1
                self.max_latency = max(self.max_latency, took)
                if took > HOOK_TIMEOUT_S:
                    self.hangs[payload.get("hook_event_name", "batch")] += 1
                if status.startswith("2"):
                    self.ok_times.append(time.monotonic())
                elif first:
                    self.first_try_failed += 1
                if status in ("503", "507") and retry_after is None:
                    self.no_retry_after += 1
            first = False
            if status.startswith("2"):
                return True
            if status not in ("503", "507", "conn_error", "timeout"):
                return False  # a 4xx or a 500: retrying the same payload cannot help
            wait = float(retry_after) if retry_after else 0.5
            if time.monotonic() + wait > give_up:
                return False
            time.sleep(wait)

    def _attempt(self, path: str, body: bytes, headers: dict[str, str]) -> tuple[str, str | None]:
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=HOOK_TIMEOUT_S)
        try:
            conn.request("POST", path, body, headers)
            resp = conn.getresponse()
            resp.read()
            return str(resp.status), resp.getheader("Retry-After")
        except TimeoutError:
            return "timeout", None
        except (OSError, http.client.HTTPException):
            return "conn_error", None
        finally:
            conn.close()


# --- what the database holds --------------------------------------------------------------


class Db:
    """Read-only queries of either backend, for one window's namespaces."""

    def __init__(self, pg_url: str | None = None, sqlite_path: Path | None = None) -> None:
        self.pg_url, self.sqlite_path = pg_url, sqlite_path

    @contextlib.contextmanager
    def _cursor(self) -> Iterator[Any]:
        if self.pg_url:
            import psycopg

            with psycopg.connect(self.pg_url, connect_timeout=2, autocommit=True) as conn:
                yield conn
        else:
            conn = sqlite3.connect(f"file:{self.sqlite_path}?mode=ro", uri=True, timeout=5)
            try:
                yield conn
            finally:
                conn.close()

    def _q(self, sql: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        if self.pg_url:
            sql = sql.replace("?", "%s")
        with self._cursor() as conn:
            return [tuple(r) for r in conn.execute(sql, params).fetchall()]

    def namespaces(self, tag: str) -> list[str]:
        rows = self._q(
            "SELECT DISTINCT namespace FROM events WHERE session_id LIKE ? OR session_id LIKE ?",
            (f"{tag}-%", f"bulk-fzm-{tag}-%"),
        )
        return [r[0] for r in rows]

    def markers(self, namespaces: list[str]) -> tuple[set[str], Counter[str]]:
        """Hook markers stored, and events stored per bulk-batch marker."""
        hooks: set[str] = set()
        batches: Counter[str] = Counter()
        for ns in namespaces:
            for session, body in self._q(
                "SELECT session_id, body FROM events WHERE namespace = ?", (ns,)
            ):
                found = _MARK.search(body)
                if session.startswith("bulk-"):
                    batches[session.removeprefix("bulk-")] += 1
                elif found:
                    hooks.add(found.group(0))
        return hooks, batches

    def turns(self, namespaces: list[str]) -> list[tuple[str, bool, bool, list[str]]]:
        """(turn_id, closed, extracted, record_ids) of the namespaces."""
        out = []
        for ns in namespaces:
            for turn_id, closed, extracted, ids in self._q(
                "SELECT turn_id, closed_at IS NOT NULL, extracted_at IS NOT NULL, record_ids"
                " FROM turns WHERE namespace = ?",
                (ns,),
            ):
                ids = json.loads(ids) if isinstance(ids, str) else list(ids)
                out.append((turn_id, bool(closed), bool(extracted), ids))
        return out

    def records(self, namespaces: list[str]) -> list[tuple[str, list[str], bool]]:
        """(record_id, source_event_ids, has a vector)."""
        out = []
        for ns in namespaces:
            for rid, sources, embedded in self._q(
                "SELECT record_id, source_event_ids, embedding IS NOT NULL"
                " FROM memory_records WHERE namespace = ?",
                (ns,),
            ):
                sources = json.loads(sources) if isinstance(sources, str) else list(sources)
                out.append((rid, sources, bool(embedded)))
        return out

    def integrity(self) -> str | None:
        if self.sqlite_path is None:
            return None
        return str(self._q("PRAGMA integrity_check")[0][0])


def _caught_up(db: Db, tag: str, turn_ids: set[str] | None) -> bool:
    """Every turn in ``turn_ids`` (None: every closed turn) extracted, its records embedded."""
    try:
        namespaces = db.namespaces(tag)
        turns = [t for t in db.turns(namespaces) if t[1] and (turn_ids is None or t[0] in turn_ids)]
        if any(not extracted for _, _, extracted, _ in turns):
            return False
        wanted = {r for *_, ids in turns for r in ids}
        embedded = {rid for rid, _, emb in db.records(namespaces) if emb}
        return wanted <= embedded
    except Exception:  # the database is the thing being restarted
        return False


def _closed_turns(db: Db, tag: str) -> set[str] | None:
    try:
        return {t[0] for t in db.turns(db.namespaces(tag)) if t[1]}
    except Exception:
        return None  # down: recovery is then judged on every turn closed later


# --- one window ---------------------------------------------------------------------------


def window(
    name: str,
    stack: Stack,
    db: Db,
    workdir: Path,
    fault: Fault,
) -> dict[str, Any]:
    """Load for BEFORE_S, ``fault(load)`` (returns when the fault is over, with notes), load
    for AFTER_S while recovery is timed, then stop the clients and let the pipeline catch
    up; the figures of the window."""
    tag = uuid.uuid4().hex[:8]
    project = workdir / "projects" / tag  # a namespace of its own
    (project / ".git").mkdir(parents=True)
    load = Load(stack.port, stack.token, project, tag)
    load.start()
    time.sleep(BEFORE_S)
    notes = fault(load)
    cleared = time.monotonic()
    before = _closed_turns(db, tag)
    caught_up_s = None
    while time.monotonic() - cleared < max(AFTER_S, CATCH_UP_S):
        if caught_up_s is None and _caught_up(db, tag, before):
            caught_up_s = time.monotonic() - cleared
        if time.monotonic() - cleared >= AFTER_S and caught_up_s is not None:
            break
        time.sleep(0.25)
    load.finish()
    drained = time.monotonic()
    while not _caught_up(db, tag, None) and time.monotonic() - drained < CATCH_UP_S:
        time.sleep(0.25)
    first_ok = [t - cleared for t in load.ok_times if t >= cleared]
    return _figures(name, db, tag, load, notes, caught_up_s, first_ok)


def _figures(
    name: str,
    db: Db,
    tag: str,
    load: Load,
    notes: dict[str, Any],
    caught_up_s: float | None,
    first_ok: list[float],
) -> dict[str, Any]:
    namespaces = db.namespaces(tag)
    stored, batch_counts = db.markers(namespaces)
    turns = db.turns(namespaces)
    records = db.records(namespaces)
    sources = Counter(e for _, ids, _ in records for e in ids)
    acked_events = len(load.acked) + BATCH * len(load.acked_batches)
    lost = len(load.acked - stored) + sum(
        BATCH - batch_counts.get(m, 0) for m in load.acked_batches
    )
    answered_again = min(first_ok) if first_ok else None
    recovery = None if caught_up_s is None else max(caught_up_s, answered_again or 0.0)
    return {
        "scenario": name,
        **notes,
        "events_acknowledged": acked_events,
        "events_stored": len(stored & (load.acked | load.unacked)) + sum(batch_counts.values()),
        "acknowledged_but_lost": lost,
        "batches_stored_in_part": sum(1 for c in batch_counts.values() if 0 < c < BATCH),
        "hooks_given_up": len(load.unacked),
        "turns_closed": sum(1 for t in turns if t[1]),
        "turns_extracted": sum(1 for t in turns if t[2]),
        "turns_pending_at_end": sum(1 for t in turns if t[1] and not t[2]),
        "records": len(records),
        "records_embedded": sum(1 for *_, emb in records if emb),
        "duplicate_records": sum(1 for n in sources.values() if n > 1),
        "statuses": dict(sorted(load.statuses.items())),
        "first_attempt_failed": load.first_try_failed,
        "refusals_without_retry_after": load.no_retry_after,
        "attempts_past_hook_timeout": sum(load.hangs.values()),
        "attempts_past_hook_timeout_by_kind": dict(load.hangs),
        "max_client_latency_s": round(load.max_latency, 3),
        "answered_2xx_again_s": None if answered_again is None else round(answered_again, 2),
        "caught_up_s": None if caught_up_s is None else round(caught_up_s, 2),
        "recovery_s": None if recovery is None else round(recovery, 2),
        "integrity_check": db.integrity(),
    }


# --- the faults ---------------------------------------------------------------------------


def _children(pid: int) -> list[int]:
    try:
        text = Path(f"/proc/{pid}/task/{pid}/children").read_text()
    except OSError:
        return []
    return [int(p) for p in text.split()]


def _cpu_ticks(pid: int) -> int:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0
    return int(fields[11]) + int(fields[12])  # utime + stime


def _busiest(pids: list[int], sample_s: float = 0.05) -> int:
    start = {p: _cpu_ticks(p) for p in pids}
    time.sleep(sample_s)
    return max(pids, key=lambda p: _cpu_ticks(p) - start[p])


def _leader_pid(proc: Proc) -> int:
    assert proc.popen is not None
    return proc.popen.pid


def kill_api_worker(stack: Stack, load: Load) -> dict[str, Any]:
    """SIGKILL the worker most likely inside a bulk batch: the busiest one just after a
    batch went out."""
    workers = _children(_leader_pid(stack.procs["api"]))
    load.batch_sent.clear()
    load.batch_sent.wait(10)
    victim = _busiest(workers, sample_s=0.02)
    os.kill(victim, signal.SIGKILL)
    # gunicorn's arbiter forks a replacement; wait for it so the window measures it.
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        now = _children(_leader_pid(stack.procs["api"]))
        if victim not in now and len(now) == len(workers):
            break
        time.sleep(0.05)
    return {"killed": f"gunicorn worker (busiest of {len(workers)}, just after a batch left)"}


def kill_extraction_worker(stack: Stack) -> dict[str, Any]:
    proc = stack.procs["worker-extraction"]
    pool = _children(_leader_pid(proc))
    busy = False
    deadline = time.monotonic() + 10
    while pool and time.monotonic() < deadline:  # wait until its pool process works
        start = _cpu_ticks(pool[0])
        time.sleep(0.02)
        if _cpu_ticks(pool[0]) > start:
            busy = True
            break
    log_before = proc.log_path.read_text(errors="replace")
    proc.kill()
    tail = proc.log_path.read_text(errors="replace")
    received = len(re.findall(r"extract_turns\[[^\]]+\] received", log_before))
    done = len(re.findall(r"extract_turns\[[^\]]+\] succeeded", tail))
    time.sleep(1.0)
    stack.start_worker("worker-extraction")
    return {
        "killed": "extraction worker (SIGKILL to its group), restarted after 1 s",
        "killed_while_busy": busy,
        "extractions_in_flight_at_kill": received - done,
    }


def restart_redis(redis: RedisServer) -> dict[str, Any]:
    redis.stop()
    time.sleep(DOWN_S)
    redis.start()
    return {"down_s": DOWN_S}


def restart_postgres(pg: PostgresServer) -> dict[str, Any]:
    pg.stop()  # fast shutdown: sessions are cut off
    time.sleep(DOWN_S)
    pg.start()
    return {"down_s": DOWN_S}


def fill_disk(disk: Path) -> dict[str, Any]:
    filler = fill(disk)
    time.sleep(DOWN_S)
    filler.unlink()
    return {"full_s": DOWN_S, "disk": DISK}


# --- the run ------------------------------------------------------------------------------


Fault = Callable[[Load], dict[str, Any]]


def _windows(stack: Stack, db: Db, workdir: Path, faults: list[tuple[str, Fault]]) -> list[Any]:
    """Start the stack, let it settle, run one window per fault; the stack stopped after."""
    out = []
    try:
        stack.start(timeout=120)
        time.sleep(SETTLE_S)
        for name, fault in faults:
            out.append(window(name, stack, db, workdir, fault))
            print(json.dumps(out[-1]), flush=True)
    finally:
        stack.stop()
    return out


def _deployment(workdir: Path) -> list[dict[str, Any]]:
    pg = PostgresServer(workdir / "pg")
    redis = RedisServer(workdir)
    pg.init()
    redis.start()
    env = {
        "WAKEMARK_WORKERS": "3",
        "WAKEMARK_SWEEP_INTERVAL_S": str(SWEEP_S),
        "WAKEMARK_MODEL_PATH": str(MODEL.expanduser()),
    }
    stack = Stack(workdir / "deployment", database_url=pg.url, redis_url=redis.url, env=env)
    faults: list[tuple[str, Fault]] = [
        ("0. no fault (baseline)", lambda _: {}),
        ("a. SIGKILL an API worker", lambda load: kill_api_worker(stack, load)),
        ("b. SIGKILL the extraction worker", lambda _: kill_extraction_worker(stack)),
        ("c. restart Redis", lambda _: restart_redis(redis)),
        ("d. restart Postgres", lambda _: restart_postgres(pg)),
    ]
    try:
        return _windows(stack, Db(pg_url=pg.url), workdir, faults)
    finally:
        redis.stop()
        pg.close()


def _sqlite(workdir: Path) -> list[dict[str, Any]]:
    with tmpfs(workdir / "disk", DISK) as disk:
        home = disk / "home"
        env = {
            "WAKEMARK_HOME": str(home),
            "WAKEMARK_WORKERS": "2",
            "WAKEMARK_SWEEP_INTERVAL_S": str(SWEEP_S),
            "WAKEMARK_MODEL_PATH": str(MODEL.expanduser()),
        }
        faults: list[tuple[str, Fault]] = [
            ("0. SQLite, no fault (baseline)", lambda _: {}),
            ("e. SQLite out of disk", lambda _: fill_disk(disk)),
        ]
        db = Db(sqlite_path=home / "wakemark.db")
        return _windows(Stack(workdir / "sqlite", env=env), db, workdir, faults)


def run() -> dict[str, Any]:
    workdir = Path(tempfile.mkdtemp(prefix="wakemark-faults-"))
    load0 = os.getloadavg()[0]
    scenarios = _deployment(workdir)
    scenarios += _sqlite(workdir)
    return {
        "config": {
            "clients": CLIENTS,
            "hook_interval_s": INTERVAL_S,
            "batch": BATCH,
            "batch_every_s": BATCH_EVERY_S,
            "sweep_interval_s": SWEEP_S,
            "settle_s": SETTLE_S,
            "before_s": BEFORE_S,
            "down_s": DOWN_S,
            "after_s": AFTER_S,
            "hook_timeout_s": HOOK_TIMEOUT_S,
            "give_up_s": GIVE_UP_S,
            "api_workers_pg": 3,
            "cpus": os.cpu_count(),
            "loadavg_1m_start": round(load0, 2),
            "loadavg_1m_end": round(os.getloadavg()[0], 2),
            "when": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        },  # fmt: skip
        "targets": {
            "acknowledged_but_lost": 0,
            "duplicate_records": 0,
            "recovery_s_max": 2 * SWEEP_S,
            "postgres_down": f"503 + Retry-After, no attempt past {HOOK_TIMEOUT_S} s",
        },  # fmt: skip
        "scenarios": scenarios,
        "logs": str(workdir),
    }


_COLUMNS = (
    ("acknowledged", "events_acknowledged"), ("stored", "events_stored"),
    ("lost", "acknowledged_but_lost"), ("part-batches", "batches_stored_in_part"),
    ("turns closed / extracted", None), ("records / embedded", None),
    ("duplicates", "duplicate_records"), ("recovery s", "recovery_s"),
    ("max latency s", "max_client_latency_s"), ("statuses", None),
)  # fmt: skip


def markdown(result: dict[str, Any]) -> str:
    cfg = result["config"]
    lines = [
        "# faults",
        "",
        f"{cfg['when']}; {cfg['cpus']} cores, load average {cfg['loadavg_1m_start']} → "
        f"{cfg['loadavg_1m_end']}. {cfg['clients']} hook clients (one hook per "
        f"{cfg['hook_interval_s']} s each) and a bulk client ({cfg['batch']} events a batch, "
        f"every {cfg['batch_every_s']} s); sweep interval {cfg['sweep_interval_s']} s; "
        f"faults {cfg['down_s']} s long; hook timeout {cfg['hook_timeout_s']} s.",
        "",
        "| scenario | " + " | ".join(c for c, _ in _COLUMNS) + " |",
        "|---" * (len(_COLUMNS) + 1) + "|",
    ]
    for s in result["scenarios"]:
        cells = [s["scenario"]]
        for label, key in _COLUMNS:
            if key:
                cells.append(str(s[key]))
            elif label.startswith("turns"):
                cells.append(f"{s['turns_closed']} / {s['turns_extracted']}")
            elif label.startswith("records"):
                cells.append(f"{s['records']} / {s['records_embedded']}")
            else:
                cells.append(", ".join(f"{k}×{v}" for k, v in s["statuses"].items()))
        lines.append("| " + " | ".join(cells) + " |")
    lines += ["", "Per scenario (all fields):", "", "```json",
              json.dumps(result["scenarios"], indent=1), "```", ""]  # fmt: skip
    return "\n".join(lines)

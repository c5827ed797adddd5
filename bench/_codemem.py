"""codemem-dev through the real pipeline: each commit as an agent turn (a prompt, one
``tool_use`` edit per file, a ``session_summary``), stored, extracted and embedded by the
same code the worker runs. The built SQLite database is cached outside the repository
(``$WAKEMARK_BENCH_CACHE``, default ``~/.wakemark-data/codemem``), keyed by the dataset, the
extraction code and ``WAKEMARK_CONSOLIDATE``, so a re-run only replays the prompts. Not a
benchmark on its own: ``bench/gate.py`` and ``bench/fit_gate.py`` use it (the leading
underscore keeps ``python -m bench`` from running it). On Postgres there is no cache: each
run replays the projects into a fresh schema.

Besides codemem-dev's two ``PROJECTS``, ``extra_projects()`` lists the sets of the same
format that ``bench/_history_set.py`` builds under ``EXTRA``
(``$WAKEMARK_EXTRA_DATASETS``, default ``~/.wakemark-data/datasets``); ``open_project``
opens either kind.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from ulid import ULID

from wakemark.shared.config import Settings
from wakemark.shared.jobs import tasks
from wakemark.shared.models import Event
from wakemark.shared.runtime import Runtime
from wakemark.shared.storage import migrate

REPO = Path(__file__).resolve().parents[1]
DATASET = Path(os.environ.get("WAKEMARK_CODEMEM_DIR", "/work/shared/datasets/codemem-dev"))
CACHE = Path(os.environ.get("WAKEMARK_BENCH_CACHE", "~/.wakemark-data/codemem")).expanduser()
EXTRA = Path(os.environ.get("WAKEMARK_EXTRA_DATASETS", "~/.wakemark-data/datasets")).expanduser()
PROJECTS = ("werkzeug", "jinja")
FILES = ("memories.jsonl", "queries.jsonl", "negatives.jsonl")
ACTOR = "eval"
BATCH = 200  # turns extracted (and embedded) per call
BUILD_VERSION = "1"  # bump when turn_events() changes: the cached databases are rebuilt


@dataclass(frozen=True)
class Query:
    qid: str
    text: str
    gold: frozenset[str]  # record ids; empty for a negative


@dataclass(frozen=True)
class Project:
    name: str
    namespace: str
    runtime: Runtime
    queries: list[Query]
    negatives: list[Query]


def missing() -> str | None:
    """Why the dataset cannot be read, or None."""
    if all((DATASET / p / "memories.jsonl").is_file() for p in PROJECTS):
        return None
    return f"codemem-dev not found at {DATASET} (set WAKEMARK_CODEMEM_DIR)"


def extra_projects() -> list[str]:
    """The complete sets under ``EXTRA``, by name; a name of codemem-dev's is not one (its
    cached database would be taken for codemem-dev's)."""
    if not EXTRA.is_dir():
        return []
    return sorted(
        d.name
        for d in EXTRA.iterdir()
        if d.name not in PROJECTS and all((d / f).is_file() for f in FILES)
    )


def directory(project: str) -> Path:
    """Where ``project``'s files are: codemem-dev for its two, else ``EXTRA``."""
    return (DATASET if project in PROJECTS else EXTRA) / project


def namespace(project: str) -> str:
    return f"/actor/{ACTOR}/project/{project}/"


def _ulid(key: str, when: datetime) -> str:
    ms = int(when.timestamp() * 1000).to_bytes(6, "big")
    return str(ULID.from_bytes(ms + hashlib.sha256(key.encode()).digest()[:10]))


def _rows(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def turn_events(project: str, row: dict[str, Any]) -> list[Event]:
    """One commit as an agent turn, with ids derived from the commit (stable re-runs)."""
    when = datetime.fromisoformat(row["date"])
    root = f"/src/{project}"
    common = {
        "session_id": f"commit-{row['id'][:12]}",
        "actor_id": ACTOR,
        "namespace": namespace(project),
        "valid_time": when,
        "source": {"surface": "codemem", "project_path": root},
    }
    events = [
        Event(
            event_id=_ulid(f"{row['id']}:prompt", when),
            kind="prompt",
            body={"type": "text", "content": row["prompt"]},
            **common,
        )
    ]
    for i, path in enumerate(row["files"]):
        data = {"tool_name": "Edit", "tool_input": {"file_path": f"{root}/{path}"}}
        events.append(
            Event(
                event_id=_ulid(f"{row['id']}:tool:{i}", when),
                kind="tool_use",
                body={"type": "json", "data": data},
                **common,
            )
        )
    summary = row["answer"].strip() or row["prompt"]
    events.append(
        Event(
            event_id=_ulid(f"{row['id']}:summary", when),
            kind="session_summary",
            body={"type": "text", "content": summary},
            **common,
        )
    )
    return events


def _fingerprint(project: str) -> str:
    digest = hashlib.sha256()
    for path in sorted(directory(project).glob("*.jsonl")):
        digest.update(path.read_bytes())
    for path in sorted((REPO / "shared" / "extraction").glob("*.py")):
        digest.update(path.read_bytes())
    # consolidation decides which records stay current, so it shapes the built database
    digest.update((REPO / "shared" / "jobs" / "tasks.py").read_bytes())
    digest.update(Settings.from_env().consolidate.encode())
    digest.update(BUILD_VERSION.encode())
    return digest.hexdigest()[:16]


def settings_for(home: Path, model: Path | None = None) -> Settings:
    """A build's settings: of the environment only what shapes the built database (the
    cache's fingerprint holds it), so one cached build serves every run."""
    env = Settings.from_env()
    return Settings(home=home, model_path=model or env.onnx_model_path, consolidate=env.consolidate)


def run_settings(built: Settings, **overrides: Any) -> Settings:
    """A run's settings over its build: the environment's too, so a retrieval setting
    exported for the run (``WAKEMARK_TOPIC_QUERY=on``) applies as in the service."""
    return Settings.from_env().replace(
        home=built.home,
        model_path=built.model_path,
        database_url=built.database_url,
        consolidate=built.consolidate,
        **overrides,
    )


def build(project: str, settings: Settings) -> None:
    """Replay every commit of ``project`` into the fresh database of ``settings``."""
    settings.home.mkdir(parents=True, exist_ok=True)
    migrate(settings)
    runtime = Runtime.build(settings)
    try:
        runtime.embedder.warm()
        rows = _rows(directory(project) / "memories.jsonl")
        rows.sort(key=lambda r: r["date"])
        for start in range(0, len(rows), BATCH):
            events = [e for row in rows[start : start + BATCH] for e in turn_events(project, row)]
            results = runtime.storage.put_events(events)
            closed = list(dict.fromkeys(t for r in results for t in r.closed_turns))
            tasks.extract_turns(runtime, closed)
        missing = runtime.storage.records_missing_embedding(100_000, namespace(project))
        if missing:
            tasks.embed_records(runtime, [r.record_id for r in missing])
    finally:
        runtime.close()


def cached(project: str, model: Path | None = None) -> Path:
    """The home of the project's cached build, built first if missing. Two benches started
    together must not both build (one would delete the other's half-built database): the
    second waits for the first's build and takes it."""
    home = CACHE / f"{project}-{_fingerprint(project)}"
    CACHE.mkdir(parents=True, exist_ok=True)
    with open(CACHE / f"{project}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (home / "complete").exists():
            shutil.rmtree(home, ignore_errors=True)
            build(project, settings_for(home, model))
            (home / "complete").write_text("built\n")
    return home


def _gold_ids(runtime: Runtime, project: str) -> dict[str, str]:
    """Commit sha -> record id, through the prompt event each record cites."""
    by_event: dict[str, str] = {}
    for page in runtime.storage.record_pages(namespace(project)):
        for record in page:
            for event_id in record.source_event_ids:
                by_event[event_id] = record.record_id
    out = {}
    for row in _rows(directory(project) / "memories.jsonl"):
        event_id = _ulid(f"{row['id']}:prompt", datetime.fromisoformat(row["date"]))
        if event_id in by_event:
            out[row["id"]] = by_event[event_id]
    return out


def open_project(
    project: str,
    model: Path | None = None,
    scratch: Path | None = None,
    database_url: str | None = None,
    **overrides: Any,
) -> Project:
    """The project's cached database (built on first use) in a runtime; the caller closes
    ``project.runtime``. With ``scratch`` (a directory), a copy of it there, for runs that
    write (prompt events). With ``database_url`` (an empty Postgres database or schema;
    ``scratch`` then holds the runtime's home), the project is replayed into it instead.
    ``overrides`` change settings of the runtime, not of the build."""
    if database_url is not None:
        assert scratch is not None, "a Postgres run needs a scratch home"
        settings = settings_for(scratch / project, model).replace(database_url=database_url)
        build(project, settings)
        settings = run_settings(settings, **overrides)
    else:
        home = cached(project, model)
        if scratch is not None:
            copy = scratch / project
            shutil.copytree(home, copy, ignore=shutil.ignore_patterns("*-writer", "complete"))
            home = copy
        settings = run_settings(settings_for(home, model), **overrides)
        migrate(settings)  # a cache built before a later migration catches up
    runtime = Runtime.build(settings)
    gold = _gold_ids(runtime, project)

    def queries(name: str) -> list[Query]:
        out = []
        for row in _rows(directory(project) / name):
            ids = frozenset(gold[sha] for sha in row["gold"] if sha in gold)
            if row["gold"] and not ids:
                continue  # its commits produced no record: nothing to find
            out.append(Query(row["qid"], row["query"], ids))
        return out

    return Project(
        project, namespace(project), runtime, queries("queries.jsonl"), queries("negatives.jsonl")
    )

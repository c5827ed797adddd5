"""Typed settings for every wakemark process, read once from ``WAKEMARK_*`` variables.

``Settings.from_env()`` is the only place the environment is read. Tests build a
``Settings`` directly (``Settings(home=tmp_path)``) instead of poking ``os.environ``.
A bad value raises ``ConfigError`` whose message names the variable, and the CLI prints
that one line and exits.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


class ConfigError(ValueError):
    """A setting has a value wakemark cannot use; the message names the variable."""


def _int(lo: int, hi: int) -> Callable[[str], int]:
    def parse(raw: str) -> int:
        try:
            value = int(raw)
        except ValueError:
            raise ValueError(f"expected an integer, got {raw!r}") from None
        if not lo <= value <= hi:
            raise ValueError(f"expected an integer from {lo} to {hi}, got {value}")
        return value

    return parse


def _float(lo: float, hi: float) -> Callable[[str], float]:
    def parse(raw: str) -> float:
        try:
            value = float(raw)
        except ValueError:
            raise ValueError(f"expected a number, got {raw!r}") from None
        if not lo <= value <= hi:  # also rejects nan
            raise ValueError(f"expected a number from {lo} to {hi}, got {raw}")
        return value

    return parse


def _choice(*options: str) -> Callable[[str], str]:
    def parse(raw: str) -> str:
        value = raw.strip().lower()
        if value not in options:
            raise ValueError(f"expected one of {', '.join(options)}, got {raw!r}")
        return value

    return parse


def _optional_str(raw: str) -> str | None:
    return raw.strip() or None


def _path(raw: str) -> Path:
    if not raw.strip():
        raise ValueError("expected a path, got an empty value")
    return Path(raw).expanduser()


def _optional_path(raw: str) -> Path | None:
    return Path(raw).expanduser() if raw.strip() else None


def _database_url(raw: str) -> str | None:
    value = raw.strip()
    if not value:
        return None
    if not value.startswith(("postgresql://", "postgres://")):
        raise ValueError("expected empty (SQLite) or a postgresql:// URL")
    return value


def _redis_url(raw: str) -> str | None:
    value = raw.strip()
    if not value:
        return None
    if not value.startswith(("redis://", "rediss://", "unix://")):
        raise ValueError("expected empty (in-process jobs) or a redis:// URL")
    return value


def _globs(raw: str) -> tuple[str, ...]:
    return tuple(
        os.path.expanduser(g.strip()) for g in raw.replace("\n", ",").split(",") if g.strip()
    )


def _setting(default: Any, parse: Callable[[str], Any], doc: str) -> Any:
    return field(default=default, metadata={"parse": parse, "doc": doc})


DEFAULT_HOME = Path("~/.wakemark").expanduser()
DEFAULT_DB_POOL_SIZE = 8
DEFAULT_TEXT_INDEX_RECORDS = 200_000
# The relevance gate's thresholds as fitted by bench/fit_gate.py (bench/results/fit_gate.md).
DEFAULT_MIN_PROMPT_RELEVANCE = 0.451
DEFAULT_MIN_RELEVANCE = 0.0116


@dataclass(frozen=True)
class Settings:
    """Every setting wakemark reads; field ``foo`` comes from ``WAKEMARK_FOO``."""

    home: Path = _setting(
        DEFAULT_HOME,
        _path,
        "Data directory (database, token, logs, model); created 0700.",
    )
    database_url: str | None = _setting(
        None,
        _database_url,
        "Unset: SQLite at $WAKEMARK_HOME/wakemark.db. postgresql://... : Postgres.",
    )
    db_timeout_s: float = _setting(
        1.0,
        _float(0.1, 60.0),
        "Postgres: seconds a call waits for a connection before it fails as unavailable"
        " (the API answers 503 + Retry-After); keep it under the hooks' 2 s timeout.",
    )
    db_pool_size: int = _setting(
        DEFAULT_DB_POOL_SIZE,
        _int(1, 100),
        "Postgres: connections each API process or job worker may hold open at once"
        " (its pool's ceiling); mind Postgres' max_connections across all processes.",
    )
    redis_url: str | None = _setting(
        None, _redis_url, "Unset: in-process jobs. redis://... : Celery jobs and cache epochs."
    )
    host: str = _setting("127.0.0.1", str, "Address the API binds to.")
    port: int = _setting(37800, _int(1, 65535), "Port the API binds to.")
    token: str | None = _setting(
        None, _optional_str, "API bearer token; unset: read or create $WAKEMARK_HOME/token."
    )
    rate_limit_per_min: int = _setting(
        600,
        _int(0, 1_000_000),
        "Requests a minute per scoped token, per API process (bootstrap token exempt); 0: off.",
    )
    workers: int = _setting(2, _int(1, 64), "gunicorn worker processes for `wakemark serve`.")
    retrieval_budget_ms: int = _setting(
        500, _int(10, 60_000), "Deadline for one search; past it the result is empty."
    )
    vector_cache_mb: int = _setting(
        192,
        _int(0, 1_048_576),
        "Megabytes of vectors each API process caches; on Postgres a namespace that does"
        " not fit beside those searched lately is searched in the database.",
    )
    text_index_records: int = _setting(
        DEFAULT_TEXT_INDEX_RECORDS,
        _int(0, 100_000_000),
        "Postgres: records up to which each API process holds the full-text index in memory"
        " (about a third of a KB a record); past it Postgres ranks the matches.",
    )
    context_max_bytes: int = _setting(
        8192, _int(256, 9500), "Default byte budget of the session-start index."
    )
    min_prompt_relevance: float = _setting(
        DEFAULT_MIN_PROMPT_RELEVANCE,
        _float(0.0, 1.0),
        "Smallest prompt relevance (0-1) for a prompt to get any context (the gate).",
    )
    min_relevance: float = _setting(
        DEFAULT_MIN_RELEVANCE,
        _float(0.0, 1.0),
        "Smallest relevance (0-1) a record needs to be injected at a prompt (the gate).",
    )
    prompt_max_bytes: int = _setting(
        1536, _int(256, 9500), "Byte budget of the context block injected at a prompt."
    )
    fusion: str = _setting(
        "rrf", _choice("rrf", "tuned"), "Rank fusion: plain RRF (k=60) or the tuned variant."
    )
    dates: str = _setting(
        "on",
        _choice("on", "off"),
        "Relative dates in a query (yesterday, last week, in March) favour the records of"
        " that time; `off` searches the words only.",
    )
    session_neighbours: int = _setting(
        0,
        _int(0, 5),
        "Records next to the search's best hit in its session (time order) that join the"
        " results, each side; 0: off.",
    )
    topic_query: str = _setting(
        "off",
        _choice("on", "off"),
        "A query that names someone also searches semantically for its topic alone (its"
        " words without names and function words): a second query embedding.",
    )
    embedder: str = _setting(
        "onnx", _choice("onnx", "off"), "Embedding runtime; `off` runs lexical-only search."
    )
    model_path: Path | None = _setting(
        None, _optional_path, "ONNX model file; unset: $WAKEMARK_HOME/models/all-MiniLM-L6-v2.onnx."
    )
    turn_idle_s: int = _setting(
        600, _int(1, 86_400), "A turn idle this long is closed and extracted."
    )
    sweep_interval_s: int = _setting(
        60, _int(1, 86_400), "How often beat (or the in-process executor) runs the sweep."
    )
    task_time_limit_s: int = _setting(
        300, _int(5, 86_400), "Hard time limit of one job; the soft limit is 80 % of it."
    )
    consolidate: str = _setting(
        "on",
        _choice("on", "off"),
        "A new record about the subject of a current one supersedes it (kept as history).",
    )
    llm_base_url: str | None = _setting(
        None, _optional_str, "OpenAI-compatible endpoint for the LLM extractor (opt-in)."
    )
    llm_model: str | None = _setting(None, _optional_str, "Model name for the LLM extractor.")
    llm_api_key: str | None = _setting(None, _optional_str, "API key for the LLM endpoint.")
    llm_daily_tokens: int = _setting(
        200_000, _int(0, 1_000_000_000), "Hard daily token budget of the LLM extractor."
    )
    llm_timeout_s: int = _setting(30, _int(1, 600), "Timeout of one LLM call.")
    ignore_projects: tuple[str, ...] = _setting(
        (),
        _globs,
        "Comma-separated globs of project paths never stored (like .wakemarkignore), "
        "e.g. `~/work/client-*`.",
    )
    event_retention_days: int = _setting(
        30,
        _int(0, 36_500),
        "Days an extracted turn's raw event bodies are kept before they are trimmed to"
        " stubs (ids, kind, time, tool, files, exit code stay); 0 keeps them forever.",
    )
    event_expiry_days: int = _setting(
        0,
        _int(0, 36_500),
        "Days after extraction an extracted turn's trimmed events (their stubs) and the turn"
        " are deleted; records stay. 0 keeps the stubs forever; counts only once a turn is"
        " trimmed (after WAKEMARK_EVENT_RETENTION_DAYS).",
    )
    record_retention_days: int = _setting(
        0,
        _int(0, 36_500),
        "Days a memory record is kept after it was created, then deleted with its vector and"
        " index entries (pinned records stay); 0 keeps records forever.",
    )
    log_level: str = _setting(
        "info", _choice("debug", "info", "warning", "error"), "Log level of every process."
    )

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> Settings:
        env = os.environ if environ is None else environ
        values: dict[str, Any] = {}
        for f in dataclasses.fields(cls):
            name = env_name(f.name)
            if name not in env:
                continue
            try:
                values[f.name] = f.metadata["parse"](env[name])
            except ValueError as exc:
                raise ConfigError(f"{name}: {exc}") from None
        return cls(**values)

    def replace(self, **changes: Any) -> Settings:
        return dataclasses.replace(self, **changes)

    @property
    def backend(self) -> str:
        return "postgres" if self.database_url else "sqlite"

    @property
    def sqlite_path(self) -> Path:
        return self.home / "wakemark.db"

    @property
    def token_path(self) -> Path:
        return self.home / "token"

    @property
    def log_dir(self) -> Path:
        return self.home / "logs"

    @property
    def onnx_model_path(self) -> Path:
        return self.model_path or self.home / "models" / "all-MiniLM-L6-v2.onnx"


def env_name(field_name: str) -> str:
    return "WAKEMARK_" + field_name.upper()


def documented_settings() -> list[tuple[str, str]]:
    """(variable, description) for every setting: the docs test checks docs/settings.md."""
    return [(env_name(f.name), f.metadata["doc"]) for f in dataclasses.fields(Settings)]


def prepare_home(settings: Settings) -> Path:
    """Create the data directory (0700) if needed and return it. The default directory
    adopts the one wakemark used under its former name, if only that one exists."""
    if settings.home == DEFAULT_HOME:
        from wakemark.shared import legacy

        legacy.adopt_home(settings.home)
    home = settings.home
    try:
        home.mkdir(mode=0o700, parents=True, exist_ok=True)
        os.chmod(home, 0o700)
    except (FileExistsError, NotADirectoryError):
        raise ConfigError(f"WAKEMARK_HOME: {home} is not a directory") from None
    except OSError as exc:
        raise ConfigError(f"WAKEMARK_HOME: cannot use {home}: {exc.strerror}") from None
    if not os.access(home, os.W_OK | os.X_OK):
        raise ConfigError(f"WAKEMARK_HOME: {home} is not writable")
    return home

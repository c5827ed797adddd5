"""Who a request is, and what it may touch: Host (DNS-rebinding), bearer token, rate
limit, Origin (CSRF), read-only and scope checks; the bootstrap token file.

Two kinds of bearer token. The bootstrap token (``WAKEMARK_TOKEN`` or
``$WAKEMARK_HOME/token``) may do everything. A scoped token (``wakemark token create``)
is limited to the namespaces under ``/actor/<actor>/`` (or one project of it), and may
be read-only. Views never look at tokens: they go through the helpers below —
``params.query`` (a namespace parameter defaults to the scope and is checked against
it), ``require_scope`` for a namespace from a body, ``owned`` for a row loaded by id
(outside the scope it is a 404, as if it did not exist), ``visible`` to filter lists,
``audit`` for destructive actions, and ``bootstrap_only`` for operator routes.

A scoped token's row is cached per process for ``TOKEN_CACHE_TTL_S``: a revocation
takes effect in every API process within that time; expiry is checked on every request.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hmac
import math
import os
import secrets
import threading
import time
from collections.abc import Callable, Sequence
from datetime import timedelta
from pathlib import Path
from typing import Any, Protocol, TypeVar

from flask import Flask, Response, current_app, g, request

from wakemark.services.api.errors import ApiError, error_response
from wakemark.services.ui.pages import is_ui_path
from wakemark.shared import tokens
from wakemark.shared.config import Settings, prepare_home
from wakemark.shared.models import utcnow
from wakemark.shared.project import sanitize_actor
from wakemark.shared.storage import ApiToken, AuditEntry, Tokens, Tx
from wakemark.shared.tokens import Principal

# The spec is public like /health: it holds no user content, and tools read it first.
PUBLIC_PATHS = frozenset({"/health", "/openapi.json"})
TOKEN_CACHE_TTL_S = 5.0
# last_used_at is precise to this, so that a busy token is not a write on every lookup.
TOUCH_EVERY = timedelta(minutes=1)
_CACHE_MAX = 10_000
_STATE_CHANGING = frozenset({"POST", "PUT", "PATCH", "DELETE"})
_LOOPBACK = ("127.0.0.1", "localhost", "[::1]")


def ensure_token(settings: Settings) -> str:
    """``WAKEMARK_TOKEN``, else ``$WAKEMARK_HOME/token`` — created 0600 on first start.

    The file appears atomically (written under a private name, then hard-linked into
    place, which fails if it exists), so concurrent workers agree on one token and none
    ever reads a half-written file.
    """
    if settings.token:
        return settings.token
    path = settings.token_path
    existing = _read_token(path)
    if existing:
        return existing
    prepare_home(settings)
    tmp = path.with_name(f".token.{os.getpid()}.{secrets.token_hex(4)}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(fd, "w") as fh:
            fh.write(secrets.token_urlsafe(32) + "\n")
            fh.flush()
            os.fsync(fh.fileno())
        # FileExistsError: another process won the race, and its token is the one.
        with contextlib.suppress(FileExistsError):
            os.link(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    token = _read_token(path)
    if not token:
        raise RuntimeError(f"token file {path} is empty; delete it and restart")
    return token


def _read_token(path: Path) -> str | None:
    try:
        return path.read_text().strip() or None
    except FileNotFoundError:
        return None


def allowed_hosts(settings: Settings) -> frozenset[str]:
    hosts = {f"{h}:{settings.port}" for h in _LOOPBACK}
    if settings.port == 80:
        hosts.update(_LOOPBACK)
    if settings.host not in ("127.0.0.1", "localhost", "::1", "0.0.0.0", "::"):
        # The operator bound a non-loopback address on purpose: accept that name too.
        bound = f"[{settings.host}]" if ":" in settings.host else settings.host
        hosts.add(f"{bound}:{settings.port}")
    return frozenset(h.lower() for h in hosts)


class TokenCache:
    """Token rows by secret hash, each kept ``ttl`` seconds. Unknown secrets are not
    cached (the cache would grow with every guess), only looked up."""

    def __init__(self, ttl: float | None = None) -> None:
        self._ttl = TOKEN_CACHE_TTL_S if ttl is None else ttl
        self._entries: dict[str, tuple[float, ApiToken]] = {}
        self._lock = threading.Lock()

    def get(self, storage: Tokens, secret_sha256: str) -> ApiToken | None:
        now = time.monotonic()
        with self._lock:
            hit = self._entries.get(secret_sha256)
        if hit is not None and now - hit[0] < self._ttl:
            return hit[1]
        token = storage.token_by_hash(secret_sha256)
        if token is None:
            with self._lock:
                self._entries.pop(secret_sha256, None)
            return None
        wall = utcnow()
        last = token.last_used_at
        if tokens.usable(token, wall) and (last is None or wall - last >= TOUCH_EVERY):
            storage.touch_token(token.token_id, wall)
            token = dataclasses.replace(token, last_used_at=wall)
        with self._lock:
            if len(self._entries) >= _CACHE_MAX:
                self._entries.clear()
            self._entries[secret_sha256] = (now, token)
        return token


class RateLimiter:
    """A token bucket per key: ``per_min`` requests a minute on average, bursts of up to
    ``per_min``. In process memory: with N API processes a client gets up to N times it."""

    def __init__(self, per_min: int) -> None:
        self._rate = per_min / 60.0
        self._capacity = float(per_min)
        self._buckets: dict[str, tuple[float, float]] = {}
        self._lock = threading.Lock()

    def wait(self, key: str) -> float:
        """0 and one request taken if allowed, else the seconds until one is."""
        now = time.monotonic()
        with self._lock:
            level, at = self._buckets.get(key, (self._capacity, now))
            level = min(self._capacity, level + (now - at) * self._rate)
            if level >= 1.0:
                self._buckets[key] = (level - 1.0, now)
                return 0.0
            self._buckets[key] = (level, now)
            return (1.0 - level) / self._rate


def init_app(app: Flask, settings: Settings) -> None:
    hosts = allowed_hosts(settings)
    token_box: list[bytes] = []  # loaded on the first request, not at import or build
    cache = TokenCache()
    limiter = RateLimiter(settings.rate_limit_per_min) if settings.rate_limit_per_min else None

    def expected_token() -> bytes:
        if not token_box:
            token_box.append(ensure_token(settings).encode())
        return token_box[0]

    def authenticate() -> Principal:
        scheme, _, given = request.headers.get("Authorization", "").partition(" ")
        secret = given.strip()
        if scheme.lower() == "bearer" and secret:
            if hmac.compare_digest(secret.encode(), expected_token()):
                return tokens.BOOTSTRAP
            if secret.startswith(tokens.SECRET_PREFIX) and len(secret) <= 200:
                storage = current_app.extensions["wakemark"].storage
                token = cache.get(storage, tokens.hash_secret(secret))
                if token is not None and tokens.usable(token, utcnow()):
                    return tokens.principal_of(token)
        raise ApiError(401, "missing, invalid, expired or revoked bearer token")

    @app.before_request
    def _guard() -> Response | None:
        host = (request.headers.get("Host") or "").lower()
        if host not in hosts:
            raise ApiError(403, "Host header not allowed (loopback only)", code="forbidden_host")
        # The viewer's static files (no user data) load without the token; its data
        # calls go to /v1 with it.
        # A public path with a token is authenticated all the same: /health shows more.
        public = request.path in PUBLIC_PATHS and "Authorization" not in request.headers
        if public or is_ui_path(request.path):
            return None
        who = g.wakemark_principal = authenticate()
        if limiter is not None and who.token_id is not None:
            wait = limiter.wait(who.token_id)
            if wait > 0:
                response = error_response(429, "rate_limited", "too many requests for this token")
                response.headers["Retry-After"] = str(math.ceil(wait))
                return response
        origin = request.headers.get("Origin")
        if (
            origin is not None
            and request.method in _STATE_CHANGING
            and origin.lower() != f"http://{host}"
        ):
            raise ApiError(403, "cross-origin request refused", code="forbidden_origin")
        view = current_app.view_functions.get(request.endpoint or "")
        if who is not tokens.BOOTSTRAP and getattr(view, "bootstrap_only", False):
            raise ApiError(403, "only the bootstrap token may use this route", code="forbidden")
        if who.read_only and request.method in _STATE_CHANGING:
            raise ApiError(403, "this token is read-only", code="read_only_token")
        return None


# --- helpers for views ----------------------------------------------------------------

V = TypeVar("V", bound=Callable[..., Any])


def bootstrap_only(view: V) -> V:
    """Mark a view as the operator's: scoped tokens get 403."""
    view.bootstrap_only = True  # type: ignore[attr-defined]
    return view


def principal() -> Principal:
    """Who the current request acts as (set by the guard before any view runs)."""
    who: Principal = g.wakemark_principal
    return who


def visible(namespace: str) -> bool:
    return principal().covers(namespace)


def require_scope(namespace: str) -> None:
    """403 unless the current token may use ``namespace`` (a namespace or a prefix)."""
    if not visible(namespace):
        raise ApiError(
            403, f"this token is limited to {principal().prefix}", code="forbidden_scope"
        )


class _Namespaced(Protocol):
    @property
    def namespace(self) -> str: ...


R = TypeVar("R", bound=_Namespaced)


def owned(row: R | None, what: str) -> R:
    """``row`` if the current token may see it; else 404, as for a row that does not
    exist (a 403 would confirm that the id exists in someone else's namespace)."""
    if row is None or not visible(row.namespace):
        raise ApiError(404, f"no such {what}")
    return row


def write_actor(given: str | None) -> str | None:
    """The actor a request writes as: a scoped token's own (403 if the request names
    another, in a hook header or an event's ``actor_id``), else the one the request
    names (None: the caller's default)."""
    mine = principal().actor
    if mine is None:
        return given
    if given and sanitize_actor(given) != mine:
        raise ApiError(403, f"this token writes as actor {mine!r}", code="forbidden_scope")
    return mine


def audit_entry(action: str, namespace: str | None, targets: Sequence[str]) -> AuditEntry:
    """The audit log's entry of a destructive action by this request's caller."""
    return AuditEntry(principal().who, action, namespace, tuple(targets), len(targets), utcnow())


def audit(tx: Tx, action: str, namespace: str | None, targets: Sequence[str]) -> None:
    """Record a destructive action in ``tx``, so it commits (or not) with the action."""
    tx.audit(audit_entry(action, namespace, targets))

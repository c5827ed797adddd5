"""Bearer token, Host (DNS-rebinding) and Origin (CSRF) checks, and the token file."""

from __future__ import annotations

import contextlib
import hmac
import os
import secrets
from pathlib import Path

from flask import Flask, request

from wakemark.services.api.errors import ApiError
from wakemark.services.ui.pages import is_ui_path
from wakemark.shared.config import Settings, prepare_home

PUBLIC_PATHS = frozenset({"/health"})
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


def init_app(app: Flask, settings: Settings) -> None:
    hosts = allowed_hosts(settings)
    token_box: list[bytes] = []  # loaded on the first request, not at import or build

    def expected_token() -> bytes:
        if not token_box:
            token_box.append(ensure_token(settings).encode())
        return token_box[0]

    @app.before_request
    def _guard() -> None:
        host = (request.headers.get("Host") or "").lower()
        if host not in hosts:
            raise ApiError(403, "Host header not allowed (loopback only)", code="forbidden_host")
        # The viewer's static files (no user data) load without the token; its data
        # calls go to /v1 with it.
        if request.path in PUBLIC_PATHS or is_ui_path(request.path):
            return
        auth = request.headers.get("Authorization", "")
        scheme, _, given = auth.partition(" ")
        if scheme.lower() != "bearer" or not hmac.compare_digest(
            given.strip().encode(), expected_token()
        ):
            raise ApiError(401, "missing or invalid bearer token")
        origin = request.headers.get("Origin")
        if (
            origin is not None
            and request.method in _STATE_CHANGING
            and origin.lower() != f"http://{host}"
        ):
            raise ApiError(403, "cross-origin request refused", code="forbidden_origin")

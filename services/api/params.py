"""Request parsing shared by the blueprints: JSON bodies and validated query parameters."""

from __future__ import annotations

import json
from typing import Any

from flask import Flask, request

from wakemark.services.api.errors import ApiError
from wakemark.shared.models import NAMESPACE_RE, is_namespace_prefix

_BODY_METHODS = frozenset({"POST", "PUT", "PATCH"})


def init_app(app: Flask) -> None:
    @app.before_request
    def _require_json() -> None:
        # Only JSON is accepted; anything else is refused before a view reads it. A
        # body-less DELETE or GET carries no content type and is not checked.
        if request.method in _BODY_METHODS and request.mimetype != "application/json":
            raise ApiError(415, "Content-Type must be application/json")


def json_body() -> Any:
    """The parsed request body; 400 if it is not valid JSON."""
    return parse_json(request.get_data(cache=False))


def parse_json(raw: bytes) -> Any:
    try:
        return json.loads(raw)
    except (ValueError, UnicodeDecodeError) as exc:
        raise ApiError(400, f"malformed JSON: {exc.__class__.__name__}", code="bad_json") from None


def json_object() -> dict[str, Any]:
    data = json_body()
    if not isinstance(data, dict):
        raise ApiError(422, "request body must be a JSON object", code="validation_error")
    return data


def text_without_nul(value: Any) -> Any:
    """``value`` as given; 422 if any string in it holds a NUL, which a Postgres text
    column refuses (stored events keep theirs: their bodies are stored as escaped JSON)."""

    def walk(v: Any) -> bool:
        if isinstance(v, str):
            return "\x00" in v
        if isinstance(v, dict):
            return any(walk(k) or walk(x) for k, x in v.items())
        if isinstance(v, list):
            return any(walk(x) for x in v)
        return False

    if walk(value):
        raise ApiError(422, "text must not contain NUL characters", code="validation_error")
    return value


def int_arg(name: str, default: int, lo: int, hi: int) -> int:
    raw = request.args.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ApiError(400, f"{name} must be an integer from {lo} to {hi}") from None
    if not lo <= value <= hi:
        raise ApiError(400, f"{name} must be an integer from {lo} to {hi}")
    return value


def bool_arg(name: str, default: bool = False) -> bool:
    raw = request.args.get(name)
    if raw is None or raw == "":
        return default
    value = raw.lower()
    if value in ("1", "true", "yes"):
        return True
    if value in ("0", "false", "no"):
        return False
    raise ApiError(400, f"{name} must be true or false")


def str_arg(name: str, max_len: int = 200, required: bool = False) -> str | None:
    raw = request.args.get(name)
    if raw is None or raw == "":
        if required:
            raise ApiError(400, f"{name} is required")
        return None
    if len(raw) > max_len:
        raise ApiError(400, f"{name} must be at most {max_len} characters")
    return raw


def namespace_arg(required: bool = False, full: bool = False) -> str | None:
    """A full namespace, or (unless ``full``) an actor prefix like ``/actor/a/``."""
    value = str_arg("namespace", max_len=500, required=required)
    if value is None:
        return None
    ok = NAMESPACE_RE.match(value) if full else is_namespace_prefix(value)
    if not ok:
        want = "/actor/<actor>/project/<id>/" + ("" if full else " or a prefix /actor/<actor>/")
        raise ApiError(400, f"namespace must look like {want}")
    return value

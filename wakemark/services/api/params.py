"""Request parsing shared by the blueprints: JSON bodies and validated query parameters."""

from __future__ import annotations

import json
import math
import re
from typing import Any, TypeVar

import numpy as np
from flask import Flask, request
from pydantic import BaseModel, ValidationError

from wakemark.services.api import security
from wakemark.services.api.errors import ApiError, validation_details

Q = TypeVar("Q", bound=BaseModel)
_BODY_METHODS = frozenset({"POST", "PUT", "PATCH"})

# Deeper than any agent payload; far below where the decoder, the scrub and pydantic
# recurse out of stack (Python's json gives up near 1,000 levels, pydantic near 255).
MAX_JSON_DEPTH = 64
_NOT_BRACKET = bytes(b for b in range(256) if b not in b"[]{}")
# Each bracket as a signed step of the nesting depth: +1 opens, -1 (0xFF) closes.
_STEP = bytes.maketrans(b"[{]}", b"\x01\x01\xff\xff")
# \uD800-\uDFFF: half of a surrogate pair, or (unpaired) not a character at all.
_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")


def init_app(app: Flask) -> None:
    @app.before_request
    def _refuse_nul() -> None:
        # Postgres text cannot hold U+0000: refused here, not a 500 from the driver.
        # (Query strings: by the models' patterns, in ``query``.)
        if "\x00" in request.path:
            raise ApiError(404, "not found")
        if any("\x00" in value for value in request.headers.values()):
            raise ApiError(400, "header values must not contain NUL")

    @app.before_request
    def _require_json() -> None:
        # Only JSON is accepted; anything else is refused before a view reads it. A
        # body-less request carries no content type and is not checked (a split takes
        # no body; a view that needs one finds it empty: 400), nor is a request no route
        # takes (its 404 or 405 says more than a 415 would).
        if request.method not in _BODY_METHODS or request.routing_exception is not None:
            return
        if not request.mimetype and not _has_body():
            return
        if request.mimetype != "application/json":
            raise ApiError(415, "Content-Type must be application/json")
        if request.mimetype_params.get("charset", "utf-8").lower() not in ("utf-8", "utf8"):
            raise ApiError(415, "JSON must be UTF-8 (charset=utf-8 or none)")
        # The body is parsed as it arrives: a compressed one would be garbage to the
        # parser, and one merely labelled so would be taken as if it were not.
        if request.headers.get("Content-Encoding", "identity").strip().lower() != "identity":
            raise ApiError(415, "Content-Encoding must be identity: send the JSON uncompressed")


def _has_body() -> bool:
    # HTTP/1.1's rule (RFC 9112, 6.3): a request has a body when it gives a length or
    # a transfer coding. (Not ``wsgi.input_terminated``: gunicorn sets it on every one.)
    return bool(request.content_length) or "Transfer-Encoding" in request.headers


def json_body() -> Any:
    """The parsed request body; 400 if it is not valid JSON."""
    return parse_json(request.get_data(cache=False))


def parse_json(raw: bytes) -> Any:
    """Strict JSON (RFC 8259 as I-JSON narrows it): UTF-8 without a BOM, at most
    ``MAX_JSON_DEPTH`` levels, finite numbers, unique keys, no lone surrogates. Anything
    else is a 400 ``bad_json`` naming the rule broken, never a 500. A ``\\u0000`` in a
    string (or key) becomes U+FFFD: Postgres text cannot hold it, and a tool's output
    with a NUL in it is still worth keeping.

    UTF-8 only because the privacy pre-check (``may_contain_tag``) reads the raw bytes:
    a UTF-16 body would hide its tags from it."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise _bad_json("body is not valid UTF-8") from None
    if _too_deep(raw):
        raise _bad_json(f"nested deeper than {MAX_JSON_DEPTH} levels")
    try:
        value = json.loads(
            text,
            object_pairs_hook=_unique_keys,
            parse_constant=_no_constant,
            parse_float=_finite_float,
        )
    except json.JSONDecodeError as exc:
        raise _bad_json(f"{exc.msg} at line {exc.lineno} column {exc.colno}") from None
    except ValueError as exc:  # from the hooks below, or an integer over 4,300 digits
        raise _bad_json(str(exc) if isinstance(exc, _Rule) else "integer too long") from None
    if _SURROGATE_ESCAPE.search(raw):
        try:
            json.dumps(value, ensure_ascii=False).encode("utf-8")
        except UnicodeEncodeError:
            raise _bad_json("string holds a lone surrogate (\\uD800-\\uDFFF)") from None
    # A raw NUL byte cannot be in a string (the decoder refuses control characters).
    return _without_nul(value) if b"\\u0000" in raw else value


def _without_nul(value: Any) -> Any:
    if isinstance(value, str):
        return value.replace("\x00", "\ufffd")
    if isinstance(value, dict):
        return {_without_nul(k): _without_nul(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_without_nul(v) for v in value]
    return value


class _Rule(ValueError):
    """A strictness rule broken; its message is safe to show (it never quotes input)."""


def _bad_json(why: str) -> ApiError:
    return ApiError(400, f"malformed JSON: {why}", code="bad_json")


def _too_deep(raw: bytes) -> bool:
    """Whether arrays and objects nest deeper than ``MAX_JSON_DEPTH``, in C-speed passes.

    Fast path: too few brackets to nest that deep. Otherwise drop the escaped pairs
    (``\\\\`` first, so that ``\\\\"`` still ends a string), split on the quotes that are
    left (odd pieces are string contents, whose brackets are text) and take the running
    depth's maximum. Exact for valid JSON; on invalid JSON the decoder stops at the first
    error, no deeper than the valid prefix this also measures."""
    if raw.count(b"[") + raw.count(b"{") <= MAX_JSON_DEPTH:
        return False
    outside = b"".join(raw.replace(b"\\\\", b"").replace(b'\\"', b"").split(b'"')[::2])
    steps = np.frombuffer(outside.translate(_STEP, _NOT_BRACKET), dtype=np.int8)
    return bool(steps.size) and int(steps.cumsum(dtype=np.int32).max()) > MAX_JSON_DEPTH


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    obj = dict(pairs)
    if len(obj) != len(pairs):
        raise _Rule("duplicate key in an object")
    return obj


def _no_constant(name: str) -> Any:
    raise _Rule(f"{name} is not JSON")


def _finite_float(literal: str) -> float:
    value = float(literal)
    if not math.isfinite(value):
        raise _Rule("number out of range")
    return value


def json_object() -> dict[str, Any]:
    data = json_body()
    if not isinstance(data, dict):
        raise ApiError(422, "request body must be a JSON object", code="validation_error")
    return data


def query(model: type[Q]) -> Q:
    """The query string as ``model``: the first value of each key, an empty one included
    (``limit=`` is a bad limit, not the default); 400 ``bad_request`` naming the first bad
    parameter, every problem in details."""
    raw = request.args.to_dict()
    scoped = "namespace" in model.model_fields
    if scoped and "namespace" not in raw:
        # A scoped token's request without a namespace means the token's scope.
        scope = security.principal().prefix
        if scope is not None:
            raw["namespace"] = scope
    try:
        args = model.model_validate(raw)
    except ValidationError as exc:
        details = validation_details(exc)
        first = details[0]
        name = ".".join(str(part) for part in first["loc"])
        raise ApiError(400, f"{name}: {first['msg']}", details) from None
    namespace = getattr(args, "namespace", None) if scoped else None
    if namespace is not None:
        security.require_scope(namespace)  # 403 outside a scoped token's scope
    return args

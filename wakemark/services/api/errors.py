"""JSON errors for every failure: ``{"error": code, "message": ..., "details": [...]?}``."""

from __future__ import annotations

import logging
from typing import Any

from flask import Flask, Response, jsonify
from pydantic import ValidationError
from werkzeug.exceptions import HTTPException

from wakemark.shared.storage import (
    ConflictError,
    DuplicateRecordError,
    NotFoundError,
    StorageFullError,
    TransientStorageError,
)

log = logging.getLogger("wakemark.api")

# HTTP status -> machine-readable code for errors werkzeug raises on its own.
_CODES = {
    400: "bad_request",
    401: "unauthorized",
    403: "forbidden",
    404: "not_found",
    405: "method_not_allowed",
    409: "conflict",
    413: "payload_too_large",
    415: "unsupported_media_type",
    422: "validation_error",
    503: "unavailable",
    507: "insufficient_storage",
}
# Seconds a client should wait before retrying a write refused for a full disk: longer
# than a reconnect, yet short enough that writes resume soon after space is freed.
FULL_RETRY_AFTER_S = 5
_MAX_DETAILS = 50


class ApiError(Exception):
    """An error a view raises on purpose; rendered as-is."""

    def __init__(
        self, status: int, message: str, details: list[Any] | None = None, code: str | None = None
    ) -> None:
        super().__init__(message)
        self.status = status
        self.code = code or _CODES.get(status, "error")
        self.message = message
        self.details = details


def validation_details(exc: ValidationError, **extra: Any) -> list[dict[str, Any]]:
    """pydantic errors as ``{loc, msg, type}`` — never the input, which may be huge or private."""
    return [
        {**extra, "loc": list(err["loc"]), "msg": err["msg"], "type": err["type"]}
        for err in exc.errors(include_url=False, include_input=False, include_context=False)
    ][:_MAX_DETAILS]


def error_response(
    status: int, code: str, message: str, details: list[Any] | None = None
) -> Response:
    payload: dict[str, Any] = {"error": code, "message": message}
    if details:
        payload["details"] = details
    response = jsonify(payload)
    response.status_code = status
    return response


def init_app(app: Flask) -> None:
    @app.errorhandler(ApiError)
    def _api_error(exc: ApiError) -> Response:
        return error_response(exc.status, exc.code, exc.message, exc.details)

    @app.errorhandler(ValidationError)
    def _validation(exc: ValidationError) -> Response:
        return error_response(422, "validation_error", "invalid request", validation_details(exc))

    @app.errorhandler(NotFoundError)
    def _not_found(exc: NotFoundError) -> Response:
        return error_response(404, "not_found", str(exc) or "not found")

    @app.errorhandler(DuplicateRecordError)
    @app.errorhandler(ConflictError)
    def _conflict(exc: DuplicateRecordError | ConflictError) -> Response:
        return error_response(409, "conflict", str(exc) or "already exists")

    @app.errorhandler(TransientStorageError)
    def _unavailable(exc: TransientStorageError) -> Response:
        log.warning("database unavailable: %s", exc)
        response = error_response(503, "unavailable", "database unavailable, retry shortly")
        response.headers["Retry-After"] = "1"
        return response

    @app.errorhandler(StorageFullError)
    def _full(exc: StorageFullError) -> Response:
        log.error("disk full, write refused: %s", exc)
        response = error_response(507, "insufficient_storage", "disk full, nothing stored")
        response.headers["Retry-After"] = str(FULL_RETRY_AFTER_S)
        return response

    @app.errorhandler(HTTPException)
    def _http(exc: HTTPException) -> Response:
        status = exc.code or 500
        response = error_response(status, _CODES.get(status, "error"), exc.description or exc.name)
        # Keep werkzeug's own headers (``Allow`` on 405) but not its HTML content type.
        for name, value in exc.get_headers():
            if name.lower() != "content-type":
                response.headers[name] = value
        return response

    @app.errorhandler(Exception)
    def _internal(exc: Exception) -> Response:
        log.exception("unhandled error")
        return error_response(500, "internal", "internal error")

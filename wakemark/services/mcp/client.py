"""A small blocking client of wakemark's HTTP API (stdlib ``http.client``) for the MCP tools.

Every failure becomes an ``ApiUnavailable`` or ``ApiError`` whose message tells an agent
(and the human behind it) what to do next; nothing here raises anything else.
"""

from __future__ import annotations

import http.client
import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import quote, urlencode

if TYPE_CHECKING:
    from wakemark.shared.config import Settings

TIMEOUT_S = 5.0
MAX_REPLY = 8 * 1024 * 1024


class ApiUnavailable(Exception):
    """The server could not be reached or authenticated against: nothing was done."""


class ApiError(Exception):
    """The server answered with an error status."""

    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message


@dataclass(frozen=True)
class ApiClient:
    host: str
    port: int
    token: str | None  # WAKEMARK_TOKEN; None: read token_path on every call
    token_path: Path
    timeout: float = TIMEOUT_S

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def get(self, path: str, **params: Any) -> Any:
        query = {k: _param(v) for k, v in params.items() if v is not None}
        return self.request("GET", path + ("?" + urlencode(query) if query else ""))

    def request(self, method: str, path: str, body: Any = None) -> Any:
        """The decoded JSON reply (``None`` for 204)."""
        headers = {"Authorization": f"Bearer {self._token()}", "Accept": "application/json"}
        payload = None
        if body is not None:
            payload = json.dumps(body).encode()
            headers["Content-Type"] = "application/json"
        conn = http.client.HTTPConnection(self.host, self.port, timeout=self.timeout)
        try:
            conn.request(method, path, body=payload, headers=headers)
            response = conn.getresponse()
            status, raw = response.status, response.read(MAX_REPLY)
        except ConnectionRefusedError:
            raise ApiUnavailable(
                f"wakemark server is not running at {self.base_url}: start it with `wakemark serve`"
            ) from None
        except TimeoutError:
            raise ApiUnavailable(
                f"wakemark server at {self.base_url} did not answer within {self.timeout:g} s "
                "— check `wakemark status`"
            ) from None
        except (OSError, http.client.HTTPException) as exc:
            raise ApiUnavailable(
                f"cannot reach the wakemark server at {self.base_url} ({exc.__class__.__name__}: "
                f"{exc}) — check `wakemark status`"
            ) from None
        finally:
            conn.close()
        return self._decode(status, raw)

    def _decode(self, status: int, raw: bytes) -> Any:
        try:
            data = json.loads(raw) if raw else None
        except ValueError:
            data = None
        if 200 <= status < 300:
            return data
        if status == 401:
            raise ApiUnavailable(
                f"the wakemark server at {self.base_url} rejected the token — make WAKEMARK_TOKEN "
                f"(or {self.token_path}) match the server's token"
            )
        error = data if isinstance(data, dict) else {}
        message = str(error.get("message") or f"HTTP {status}")
        details = error.get("details")
        if isinstance(details, list) and details:
            message += ": " + "; ".join(_detail(d) for d in details[:5])
        raise ApiError(status, str(error.get("error") or "error"), message)

    def _token(self) -> str:
        if self.token:
            return self.token
        try:
            token = self.token_path.read_text().strip()
        except OSError:
            token = ""
        if not token:
            raise ApiUnavailable(
                f"no wakemark token at {self.token_path} — start the server once with "
                "`wakemark serve` (it creates the token) or set WAKEMARK_TOKEN"
            )
        return token


def record_path(record_id: str) -> str:
    return "/v1/memories/" + quote(record_id, safe="")


def code_label(code: dict[str, Any] | None) -> str:
    """What a search hit's ``code`` (the API's JSON of a verdict) tells a reader, as the
    viewer's badge says it: "changed since: …" or "gone: …"; "" when there is nothing to
    warn of (current, unchecked, or no anchors)."""
    if not code or code.get("state") not in ("changed", "gone"):
        return ""
    what = [*code.get("paths", []), *code.get("identifiers", [])]
    return f"{'changed since' if code['state'] == 'changed' else 'gone'}: {', '.join(what)}"


def _param(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _detail(detail: Any) -> str:
    if isinstance(detail, dict):
        loc = ".".join(str(p) for p in detail.get("loc") or [])
        return f"{loc}: {detail.get('msg', '')}" if loc else str(detail.get("msg", ""))
    return str(detail)


def client_for(settings: Settings) -> ApiClient:
    """The client for these settings: always loopback, whatever address the API binds."""
    return ApiClient(
        host="127.0.0.1", port=settings.port, token=settings.token, token_path=settings.token_path
    )

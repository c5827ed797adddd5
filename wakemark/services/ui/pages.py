"""``/ui``: the viewer's static HTML, JS and CSS, served by the API process itself.

The files hold no user data, so they load without the token; every data call they make
goes to ``/v1`` with ``Authorization: Bearer``. The token reaches the page in the URL
fragment (``/ui#token=...``, which browsers never send to a server), or as a one-time code
there (``/ui#code=...``, what ``wakemark ui`` opens) that the page trades for it at
``POST /ui/token`` (``routes``, ``handoff``).
"""

from __future__ import annotations

from pathlib import Path

from flask import Blueprint, Response, request, send_from_directory

bp = Blueprint("viewer", __name__)

STATIC = Path(__file__).resolve().parent / "static"
# Only what the page uses, all from this origin; no inline script or style anywhere.
CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; "
    "base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
)


def is_ui_path(path: str) -> bool:
    return path == "/ui" or path.startswith("/ui/")


@bp.get("/ui")
@bp.get("/ui/")
def index() -> Response:
    return send_from_directory(STATIC, "index.html", max_age=0)


@bp.get("/ui/static/<path:name>")
def static_file(name: str) -> Response:
    # send_from_directory refuses paths outside STATIC (404).
    return send_from_directory(STATIC, name, max_age=0)


@bp.after_app_request
def _headers(response: Response) -> Response:
    if is_ui_path(request.path):
        response.headers["Content-Security-Policy"] = CSP
        response.headers["X-Content-Type-Options"] = "nosniff"
        response.headers["Referrer-Policy"] = "no-referrer"
        response.headers["X-Frame-Options"] = "DENY"  # frame-ancestors, for older engines
        response.headers["Cross-Origin-Opener-Policy"] = "same-origin"
        response.headers["Cross-Origin-Resource-Policy"] = "same-origin"
        response.headers["Cache-Control"] = "no-store"
    return response

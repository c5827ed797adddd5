"""``wakemark ui``: open the viewer in a browser with a one-time code for the token.

A browser's command line is readable by every local user (``/proc/*/cmdline``), so the
address opened carries a one-time code (``#code=...``, services/ui/handoff.py) that the
page trades for the token, never the token itself. The address with the token
(``#token=...``) is printed instead, for the user to paste, when no browser opens or with
``--print``: a fragment never leaves the browser, so the token reaches no server log.
"""

from __future__ import annotations

import argparse
import webbrowser


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--print", dest="print_only", action="store_true", help="print the address, open nothing"
    )


def viewer_url(host: str, port: int, fragment: str) -> str:
    # The Host guard accepts the loopback names; a wildcard bind is reached on 127.0.0.1.
    connect = "127.0.0.1" if host in ("0.0.0.0", "::", "localhost") else host
    netloc = f"[{connect}]:{port}" if ":" in connect else f"{connect}:{port}"
    return f"http://{netloc}/ui#{fragment}"


def run(args: argparse.Namespace) -> int:
    from wakemark.services.api.security import ensure_token
    from wakemark.services.cli.status import fetch
    from wakemark.services.ui import handoff
    from wakemark.shared.config import Settings

    settings = Settings.from_env()
    token = ensure_token(settings)
    try:
        fetch(settings.host, settings.port, "/health")
    except OSError:
        print(
            f"wakemark: the server is not running on port {settings.port}; start it: wakemark serve"
        )
    if not args.print_only:
        code = handoff.issue(settings)
        if _open(viewer_url(settings.host, settings.port, f"code={code}")):
            print(f"Opened the viewer at http://127.0.0.1:{settings.port}/ui in your browser.")
            return 0
    print(f"Open the viewer at: {viewer_url(settings.host, settings.port, f'token={token}')}")
    return 0


def _open(url: str) -> bool:
    try:
        return webbrowser.open(url)
    except webbrowser.Error:
        return False

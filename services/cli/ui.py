"""``wakemark ui``: open the viewer in a browser, the token handed over in the fragment.

The fragment (``#token=...``) never leaves the browser, so the token reaches no server
log; the page moves it to sessionStorage and strips it from the address bar.
"""

from __future__ import annotations

import argparse
import webbrowser


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--print", dest="print_only", action="store_true", help="print the address, open nothing"
    )


def viewer_url(host: str, port: int, token: str) -> str:
    # The Host guard accepts the loopback names; a wildcard bind is reached on 127.0.0.1.
    connect = "127.0.0.1" if host in ("0.0.0.0", "::", "localhost") else host
    netloc = f"[{connect}]:{port}" if ":" in connect else f"{connect}:{port}"
    return f"http://{netloc}/ui#token={token}"


def run(args: argparse.Namespace) -> int:
    from wakemark.services.api.security import ensure_token
    from wakemark.services.cli.status import fetch
    from wakemark.shared.config import Settings

    settings = Settings.from_env()
    url = viewer_url(settings.host, settings.port, ensure_token(settings))
    try:
        fetch(settings.host, settings.port, "/health")
    except OSError:
        print(
            f"wakemark: the server is not running on port {settings.port}; start it: wakemark serve"
        )
    if args.print_only or not _open(url):
        print(f"Open the viewer at: {url}")
        return 0
    print(f"Opened the viewer at http://127.0.0.1:{settings.port}/ui in your browser.")
    return 0


def _open(url: str) -> bool:
    try:
        return webbrowser.open(url)
    except webbrowser.Error:
        return False

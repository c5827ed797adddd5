"""``wakemark status``: is the server up, which backend, how much work is pending."""

from __future__ import annotations

import argparse
import http.client
import json
from typing import Any


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print the raw JSON")


def fetch(host: str, port: int, path: str, token: str | None = None) -> tuple[int, Any]:
    """GET a JSON route of the local server; raises OSError if it is not reachable, or
    if what answers there does not speak HTTP."""
    connect = "127.0.0.1" if host in ("0.0.0.0", "::") else host
    conn = http.client.HTTPConnection(connect, port, timeout=3)
    try:
        headers = {"Host": f"{'[' + connect + ']' if ':' in connect else connect}:{port}"}
        if token:
            headers["Authorization"] = f"Bearer {token}"
        conn.request("GET", path, headers=headers)
        try:
            res = conn.getresponse()
            raw = res.read()
        except http.client.HTTPException as exc:
            raise ConnectionError(f"{connect}:{port} does not answer HTTP: {exc!r}") from exc
        try:
            return res.status, json.loads(raw)
        except ValueError:
            return res.status, None
    finally:
        conn.close()


def local_token(settings: Any) -> str | None:
    """The bootstrap token as this machine has it, if it has one (never creates it)."""
    from wakemark.services.api.security import ensure_token

    if not (settings.token or settings.token_path.exists()):
        return None
    try:
        return ensure_token(settings)
    except OSError:
        return None


def is_wakemark(health: Any) -> bool:
    """Whether a ``/health`` answer is wakemark's (its public form: status and version)."""
    return isinstance(health, dict) and "status" in health and "version" in health


def _project_line(settings: Any) -> str:
    from wakemark.shared import optout, project

    start = project.agent_start_dir()
    root = project.find_root(start)
    reason = optout.ignored(root or start, settings.ignore_projects)
    where = root or f"{start} (no project root: global)"
    return f"{where}: paused, nothing stored ({reason})" if reason else f"{where}: recording"


def run(args: argparse.Namespace) -> int:
    from wakemark.shared.config import Settings

    settings = Settings.from_env()
    url = f"http://{settings.host}:{settings.port}"
    token = local_token(settings)
    try:
        code, health = fetch(settings.host, settings.port, "/health", token)
        if code == 401:  # a token this server does not take: it may still be up
            code, health = fetch(settings.host, settings.port, "/health")
    except OSError as exc:
        print(
            f"wakemark: not running at {url} ({exc.__class__.__name__}); start it:"
            " wakemark serve (or in the background, at login: wakemark service install)"
        )
        return 1
    if not is_wakemark(health):
        print(f"wakemark: something else answers at {url} (HTTP {code}); run: wakemark doctor")
        return 1
    stats: Any = None
    scode = 0
    if token:
        scode, stats = fetch(settings.host, settings.port, "/v1/stats", token)
    if args.json:
        body = {"health": health, "stats": stats, "project": _project_line(settings)}
        print(json.dumps(body, indent=2))
        return 0 if code == 200 else 1
    print(f"wakemark {health.get('version')} at {url}: {health.get('status')}")
    if "backend" in health:
        jobs = health.get("jobs") or {}
        pending = health.get("pending") or {}
        print(f"  backend   {health.get('backend')}")
        print(f"  jobs      {jobs.get('mode')} (queue depth {jobs.get('queue_depth')})")
        print(f"  embedder  {(health.get('embedder') or {}).get('state')}")
        print(
            f"  pending   extraction {pending.get('extraction')}, "
            f"embedding {pending.get('embedding')}"
        )
    print(f"  project   {_project_line(settings)}")
    if scode == 200 and isinstance(stats, dict):
        print(f"  stored    {stats.get('events')} events, {stats.get('memories')} memories")
    elif scode:
        print(f"  stats     HTTP {scode}: token mismatch? (WAKEMARK_TOKEN vs $WAKEMARK_HOME/token)")
    elif not token:
        print(f"  details   need the token ({settings.token_path} or WAKEMARK_TOKEN)")
    return 0 if code == 200 else 1

"""`wakemark install <agent>`: add wakemark's hooks and MCP server to an agent's config.

Idempotent, leaves other tools' entries alone, backs each changed file up first
(``<file>.wakemark-backup-<timestamp>``), and ``--dry-run`` prints a unified diff and
writes nothing. `wakemark uninstall` (``services/cli/uninstall.py``) runs the same edits
in reverse. What each agent's files get is that agent's ``install_targets``
(``services/agents``); entries the pre-rename installer wrote are removed either way.
"""

from __future__ import annotations

import argparse
import difflib
import json
import os
import sys
import time
from typing import Any

from wakemark.services import agents
from wakemark.services.cli.args import existing_dir


def add_arguments(parser: argparse.ArgumentParser, verb: str = "install into") -> None:
    parser.add_argument("agent", choices=agents.names(), help="the agent whose config to change")
    parser.add_argument(
        "--project",
        nargs="?",
        const=".",
        type=existing_dir,
        metavar="DIR",
        help=f"{verb} this project's config instead of your user config"
        " (DIR defaults to the project of the cwd)",
    )
    parser.add_argument("--dry-run", action="store_true", help="print a diff, write nothing")
    if verb == "install into":
        parser.add_argument(
            "--service",
            action=argparse.BooleanOptionalAction,
            help="when no server runs: install the background service (`wakemark service"
            " install`) or not, without asking (default: ask on a terminal)",
        )


def run(args: argparse.Namespace) -> int:
    code = apply(args, install=True)
    if code or args.dry_run:
        return code
    return offer_service(args.service)


def offer_service(choice: bool | None) -> int:
    """When no server answers: install the background service if ``choice`` says so (or
    the user, asked on a terminal, does); otherwise one line on how to start it."""
    from wakemark.services.cli import service
    from wakemark.services.cli.serve import wakemark_at
    from wakemark.shared.config import Settings

    settings = Settings.from_env()
    if choice is False or wakemark_at(settings.host, settings.port) is not None:
        return 0
    url = f"http://{settings.host}:{settings.port}"
    manager = service.manager_for()
    reason = manager.unavailable()
    if reason:
        line = service.no_manager_line(reason)
        print(f"wakemark: no server answers at {url} yet; {line}", file=sys.stderr)
        return 2 if choice else 0
    if choice is None and sys.stdin.isatty() and sys.stdout.isatty():
        try:
            answer = input(f"No server answers at {url}. Install the background service? [Y/n] ")
        except EOFError:
            answer = "n"
        choice = answer.strip().lower() in ("", "y", "yes")
    if choice:
        return service.install(manager)
    print(
        f"wakemark: no server answers at {url} yet; start it: `wakemark service install`"
        " (in the background, at login) or `wakemark serve`",
        file=sys.stderr,
    )
    return 0


def apply(args: argparse.Namespace, install: bool, home: str | None = None) -> int:
    from wakemark.services.agents.configs import Where
    from wakemark.shared.config import Settings
    from wakemark.shared.project import find_root

    settings = Settings.from_env()
    project = None
    if args.project is not None:
        start = os.path.abspath(args.project)
        project = find_root(start) or start
    where = Where(
        home=home or os.path.expanduser("~"),
        project=project,
        port=settings.port,
        token=_token(settings, args.dry_run) if install else _existing_token(settings),
        wakemark_home=None if settings.home == Settings().home else str(settings.home),
    )
    agent = agents.get(args.agent)
    assert agent is not None  # argparse's choices
    changed = 0
    for path, edit in agent.install_targets(where):
        old_text = _read(path)
        try:
            new_value = edit(_parse(path, old_text), install)
            new_text = "" if new_value is None else _render(path, new_value)
        except ValueError as exc:  # a broken file is the user's: never overwrite it
            print(f"wakemark: {path}: cannot parse ({exc}); left unchanged", file=sys.stderr)
            return 1
        if new_text == (old_text or "") or (old_text is None and not install):
            continue
        changed += 1
        if args.dry_run:
            sys.stdout.writelines(
                difflib.unified_diff(
                    _masked(old_text or "", where.token).splitlines(keepends=True),
                    _masked(new_text, where.token).splitlines(keepends=True),
                    fromfile=path if old_text is not None else "/dev/null",
                    tofile=path,
                )
            )
        elif new_value is None:
            _backup(path)
            os.unlink(path)
            print(f"removed {path}")
        else:
            try:
                _write(path, old_text, new_text, where.token)
            except FileExistsError as exc:
                print(f"wakemark: {exc.filename} is in the way; {path} left unchanged "
                      "(remove it and run again)", file=sys.stderr)  # fmt: skip
                return 1
            print(f"{'updated' if old_text is not None else 'created'} {path}")
    verb = "install" if install else "uninstall"
    if not changed:
        print(f"wakemark {verb} {args.agent}: nothing to change")
    elif not args.dry_run and install:
        print(agent.install_note)
    return 0


def _token(settings: Any, dry_run: bool) -> str:
    if dry_run:  # writes nothing, not even the token file
        return _existing_token(settings) or "<token, created on install>"
    from wakemark.services.api.security import ensure_token

    return ensure_token(settings)


def _masked(text: str, token: str | None) -> str:
    # A dry run's diff is for reading and pasting around; the token stays in its file.
    return text.replace(token, "<token>") if token else text


def _existing_token(settings: Any) -> str | None:
    if settings.token:
        return str(settings.token)
    try:
        return settings.token_path.read_text().strip() or None
    except OSError:
        return None


def _read(path: str) -> str | None:
    try:
        with open(path, encoding="utf-8") as fh:
            return fh.read()
    except FileNotFoundError:
        return None


def _parse(path: str, text: str | None) -> Any:
    if path.endswith(".toml"):
        return text or ""
    if not text or not text.strip():
        return {}
    data = json.loads(text)  # ValueError on a broken file
    if not isinstance(data, dict):
        raise ValueError("expected a JSON object")
    return data


def _render(path: str, value: Any) -> str:
    if path.endswith(".toml"):
        return str(value)
    return json.dumps(value, indent=2, ensure_ascii=False) + "\n"


def _write(path: str, old_text: str | None, new_text: str, token: str | None) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    mode = 0o600
    if old_text is not None:
        if not (token and token in new_text):
            mode = os.stat(path).st_mode & 0o777
        _backup(path)
    # Written then renamed: an agent reading its config never sees half a file. A file
    # holding the token is 0600 whatever its old mode (Claude Code's settings are often
    # 0644); others keep theirs.
    tmp = f"{path}.wakemark-tmp-{os.getpid()}"
    _create(tmp, new_text.encode("utf-8"), mode)
    os.replace(tmp, path)


def _create(path: str, data: bytes, mode: int) -> None:
    """A new file, never an existing one or a symlink's target: something planted at
    ``path`` makes this fail (FileExistsError) instead of being written through."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, mode)
    try:
        os.fchmod(fd, mode)  # the umask must not loosen or tighten what was asked
        with os.fdopen(fd, "wb", closefd=False) as fh:
            fh.write(data)
    except BaseException:
        os.unlink(path)
        raise
    finally:
        os.close(fd)


def _backup(path: str) -> None:
    """A private copy (it may hold a token) next to ``path``."""
    stamp = time.strftime("%Y%m%dT%H%M%S")
    backup = f"{path}.wakemark-backup-{stamp}"
    n = 1
    while os.path.exists(backup):  # two runs within one second keep both backups
        backup, n = f"{path}.wakemark-backup-{stamp}-{n}", n + 1
    with open(path, "rb") as fh:
        _create(backup, fh.read(), 0o600)

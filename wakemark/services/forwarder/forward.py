"""`wakemark hook <agent> [<event>]`: forward an agent's hook payload to the local API.

Standard library only, and as little of it as possible: it runs on every prompt and
tool use, so start-up time is the product. It speaks HTTP/1.0 over ``_socket`` (the
``socket`` module pulls in ``enum`` and ``selectors``), never imports ``re``,
``json`` (except to unwrap a Kiro reply) or ``pathlib``, and is run by ``hook.py`` beside
it, which agent configs run as ``<python> -S -E -s hook.py ...`` so no site-packages or
``.pth`` runs.

It runs from wherever the package is installed, under whatever Python 3.9+ the installer
picked, so it imports nothing of the package: the project-root detection it shares with
the server is ``shared/project.py``, which is stdlib-only and is loaded by its path in
this installed tree, without ``wakemark/__init__`` or anything else of the package.

Fail-open: whatever happens it exits 0 and prints nothing but the agent's reply; errors
go to ``$WAKEMARK_HOME/logs/hook.log`` (capped, one rotation), and so does the API's
note that it stored nothing because the project is ignored (``X-Wakemark-Ignored``).
Exit code 2 means "block" or "retry" to most agents, so it must never escape from here.
"""

from __future__ import annotations

import os
import sys
import time

TIMEOUT_S = 2.0
MAX_STDIN = 2 * 1024 * 1024  # the API's request limit: more would be refused anyway
MAX_REPLY = 1024 * 1024
LOG_CAP = 256 * 1024
DEFAULT_PORT = 37800
# What an agent must read when wakemark has nothing (or is down): each agent's `failsafe`
# (services/agents), copied here because this file cannot import the registry; a test
# fails when the two differ.
FAILSAFE = {"cursor": '{"continue": true}', "gemini-cli": "{}"}
IGNORED_HEADER = b"x-wakemark-ignored"  # services/api/hooks.py IGNORED_HEADER, lower-cased
# A server that does not read this machine's files asks (WATCH) which of them to hash,
# and gets their SHA-256 with the next prompt or session start (HASHES):
# shared/retrieval/staleness.py.
WATCH_HEADER = b"x-wakemark-watch"
HASHES_HEADER = "X-Wakemark-Hashes"
MAX_WATCHED = 32  # staleness.MAX_REPORTED
MAX_HASHED_BYTES = 1 << 20  # per file: a larger one is not reported (not code)
MAX_HASHES_HEADER = 7000  # under a proxy's usual 8 KB limit for one header line
_CHECKED = (b"prompt", b"beforeagent", b"sessionstart", b"agentspawn")  # hooks given context
# A tool use that wrote files: each one's SHA-256 just after the edit, so a server that
# does not read this machine's files anchors the turn's record to the file as the turn
# left it (shared/retrieval/staleness.py, EDITED_HEADER).
EDITED_HEADER = "X-Wakemark-Edited"
# After the tool ran (each agent's hook name, lower-cased): a pre-tool hook's file is
# not edited yet.
_AFTER_TOOL = (b"posttooluse", b"aftertool", b"afterfileedit")
_EDIT_TOOL = ("edit", "write", "replace", "patch", "create", "insert", "append", "delete")
# The keys an edit tool names its file by (shared/extraction/tools.py _FILE_KEYS, the
# ones the agents' edit tools use), and Codex's apply_patch file lines.
_FILE_KEYS = (b'"file_path"', b'"filePath"', b'"path"', b'"notebook_path"', b'"target_file"')
_PATCH_LINES = (b"*** Update File: ", b"*** Add File: ", b"*** Delete File: ", b"*** Move to: ")
_SAFE = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.")


USAGE = """usage: wakemark hook <agent> [<event>]

Forward an agent's hook payload (JSON on stdin, or a JSON argument) to the local
wakemark API and print the agent's reply. Always exits 0: a hook must never break the
agent. Agent configs run it for you: see `wakemark install <agent>`. Errors go to
$WAKEMARK_HOME/logs/hook.log."""


def main(argv: list[str]) -> int:
    agent = argv[0] if argv else ""
    if agent in ("-h", "--help"):
        print(USAGE)
        return 0
    try:
        reply = _forward(agent, argv[1:], time.monotonic() + TIMEOUT_S)
    except BaseException as exc:  # noqa: BLE001 - fail open, always
        reply = FAILSAFE.get(agent, "")
        _log(f"{agent or '-'}: {exc.__class__.__name__}: {exc}")
    _print(reply)  # once: a second JSON document after the first is not JSON to the agent
    return 0


def _forward(agent: str, rest: list[str], deadline: float) -> str:
    if not agent or not set(agent) <= _SAFE:
        raise ValueError("usage: wakemark hook <agent> [<event>] (payload on stdin)")
    event = ""
    payload = b""
    for arg in rest:
        if arg.startswith("{"):
            payload = arg.encode()  # Codex `notify` passes the JSON as an argument
        elif set(arg) <= _SAFE:
            event = arg
    if not payload:
        payload = _read_stdin(deadline)
    if not payload.strip():
        raise ValueError("empty payload")
    root = _project_dir()
    status, headers, body = _post(agent, event, payload, deadline, root)
    if not 200 <= status < 300:
        raise RuntimeError(f"HTTP {status}: {body[:200]!r}")
    reply = _stdout_for(agent, body)
    try:
        if IGNORED_HEADER in headers:
            _log(f"{agent} {event or '-'}: {headers[IGNORED_HEADER].decode('ascii', 'replace')}")
        if WATCH_HEADER in headers:
            _keep_watch(root, headers[WATCH_HEADER].decode("utf-8", "replace"))
    except Exception as exc:  # noqa: BLE001 - the reply stands; only the watch list is lost
        _log(f"{agent} {event or '-'}: watch list not kept: {exc.__class__.__name__}: {exc}")
    return reply


def _watch_file(root: str) -> str:
    from binascii import crc32  # a C module: no start-up to speak of

    home = os.path.expanduser(os.environ.get("WAKEMARK_HOME") or "~/.wakemark")
    name = f"{crc32(root.encode('utf-8', 'surrogateescape')):08x}"
    return os.path.join(home, "watch", name)


def _keep_watch(root: str, value: str) -> None:
    path = _watch_file(root)
    os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
    with open(path, "w", encoding="utf-8", errors="surrogateescape") as fh:
        fh.write(root + "\n" + "\n".join(value.split(";")[:MAX_WATCHED]) + "\n")


def _hashes(root: str) -> str:
    """The header value for the files the server asked about in this project: each as
    ``path=sha256`` (``-``: not there); empty when it asked about none."""
    try:
        with open(_watch_file(root), encoding="utf-8", errors="surrogateescape") as fh:
            lines = fh.read().split("\n")
    except OSError:
        return ""  # the usual case: a local server reads the files itself
    if lines[0] != root:
        return ""  # another project with the same checksum
    base = os.path.join(os.path.normpath(root), "")
    files = []
    for escaped in lines[1 : MAX_WATCHED + 1]:
        rel = escaped.replace("%3B", ";").replace("%3D", "=").replace("%25", "%")
        full = os.path.normpath(os.path.join(base, rel))
        if rel and full.startswith(base):
            files.append((escaped, full))
    return _hashed(files)


def _hashed(files: list) -> str:  # list[tuple[str, str]]; `typing` costs more than it tells
    """The header value for ``files`` (escaped path, full path): each as
    ``path=sha256`` (``-``: not there), ``;``-joined, within ``MAX_HASHES_HEADER``; a file
    ``_digest`` does not report is left out."""
    if not files:
        return ""
    sha256 = _sha256()
    out = []
    size = 0
    for escaped, full in files:
        digest = _digest(full, sha256)
        if digest is None:
            continue
        size += len(escaped) + len(digest) + 2
        if size > MAX_HASHES_HEADER:
            break
        out.append(f"{escaped}={digest}")
    return ";".join(out)


def _sha256():  # -> the constructor; `typing` costs more than it tells
    try:
        from _sha2 import sha256  # 3.12+; hashlib costs more
    except ImportError:
        try:
            from _sha256 import sha256
        except ImportError:  # a Python built without its own hashes
            from hashlib import sha256
    return sha256


def _digest(full: str, sha256) -> str | None:  # sha256: _sha256()
    """The file's SHA-256, ``-`` when it is not there, None when it is not reported
    (larger than the limit, a directory, unreadable)."""
    from stat import S_ISREG  # imported by os already

    try:
        # Non-blocking: opening a named pipe to read would wait for a writer, forever.
        fd = os.open(full, os.O_RDONLY | os.O_NONBLOCK)
    except FileNotFoundError:
        return "-"
    except OSError:
        return None
    try:
        info = os.fstat(fd)
        if not S_ISREG(info.st_mode) or info.st_size > MAX_HASHED_BYTES:
            return None
        with open(fd, "rb", closefd=False) as fh:
            return sha256(fh.read(MAX_HASHED_BYTES)).hexdigest()
    except OSError:
        return None
    finally:
        os.close(fd)


def _json_string(payload: bytes, at: int) -> str | None:
    """The JSON string value just after a key that ends at ``at`` (past ``:`` and
    blanks), or None when the value is not a string."""
    while payload[at : at + 1] in (b":", b" ", b"\t", b"\r", b"\n"):
        at += 1
    if payload[at : at + 1] != b'"':
        return None
    end = payload.find(b'"', at + 1)
    while end > 0:
        # A quote after an odd run of backslashes is escaped: part of the string. Only
        # the run just before this quote is counted, so each byte is looked at once.
        run = end
        while run > at + 1 and payload[run - 1] == 92:  # a backslash
            run -= 1
        if not (end - run) % 2:
            break
        end = payload.find(b'"', end + 1)
    if end < 0:
        return None
    raw = payload[at + 1 : end]
    if b"\\" in raw:  # rare in a path: let json decode its escapes
        import json

        try:
            value = str(json.loads(payload[at : end + 1]))
            value.encode("utf-8", "surrogateescape")  # a lone surrogate names no file
        except ValueError:  # JSONDecodeError, UnicodeEncodeError: not a path to report
            return None
        return value
    return raw.decode("utf-8", "surrogateescape")


def _edited_paths(payload: bytes, named: bytes) -> list[str]:
    """The files an edit tool use names (as written: absolute or relative); ``named``:
    the hook's name and the payload's start, lower-cased."""
    at = payload.find(b'"tool_name"')
    tool = "" if at < 0 else (_json_string(payload, at + 11) or "").lower()
    if not any(word in tool for word in _EDIT_TOOL) and b"afterfileedit" not in named:
        return []
    found: list[str] = []
    for key in _FILE_KEYS:
        at = payload.find(key)
        while at >= 0 and len(found) < MAX_WATCHED:
            value = _json_string(payload, at + len(key))
            if value and "\n" not in value:
                found.append(value)
            at = payload.find(key, at + len(key))
    for marker in _PATCH_LINES:  # in the JSON text a patch's newline is the two bytes \n
        at = payload.find(marker)
        while at >= 0 and len(found) < MAX_WATCHED:
            start = at + len(marker)
            end = payload.find(b"\\n", start)
            if end < 0:
                break  # no newline after this marker, so none after a later one either
            if end > start:
                found.append(payload[start:end].strip().decode("utf-8", "surrogateescape"))
            at = payload.find(marker, start)
    return list(dict.fromkeys(found))


def _edited(root: str, payload: bytes, named: bytes) -> str:
    """The header value for the project files this tool use wrote: ``path=sha256``
    (``-``: not there, a deleted file); empty for any other tool use. Sent to any
    server: a local one, which reads the files itself, drops it."""
    base = os.path.join(os.path.normpath(root), "")
    files = []
    for path in _edited_paths(payload, named):
        full = os.path.normpath(os.path.join(base, path))
        # Outside the project: not the server's business; a path past the server's limit
        # would have it refuse the whole event.
        if full.startswith(base) and len(full) - len(base) <= 1000:
            rel = full[len(base) :]
            files.append((rel.replace("%", "%25").replace(";", "%3B").replace("=", "%3D"), full))
    return _hashed(files)


def _stdout_for(agent: str, body: bytes) -> str:
    text = body.decode("utf-8", "replace").strip()
    if text and agent in FAILSAFE and not (text.startswith("{") and text.endswith("}")):
        # Not the JSON object this agent parses (HTML, a list: not wakemark answering).
        raise ValueError(f"reply is not a JSON object: {text[:80]!r}")
    if text.startswith('{"context"'):
        import json  # only Kiro-style replies need unwrapping to plain text

        reply = json.loads(text)
        if isinstance(reply, dict) and set(reply) == {"context"}:
            return str(reply["context"] or "")
    return text or FAILSAFE.get(agent, "")


def _read_stdin(deadline: float) -> bytes:
    import select

    if os.isatty(0):
        return b""
    chunks: list[bytes] = []
    size = 0
    while True:
        left = deadline - time.monotonic()
        if left <= 0 or not select.select([0], [], [], left)[0]:
            raise TimeoutError("stdin not closed in time")
        chunk = os.read(0, 65536)
        if not chunk:
            if size > MAX_STDIN:
                raise ValueError(f"payload over {MAX_STDIN} bytes")
            return b"".join(chunks)
        size += len(chunk)
        if size <= MAX_STDIN:
            chunks.append(chunk)
        else:
            # Read to the end all the same: exiting now would leave the agent writing
            # into a closed pipe (EPIPE), which it may take for a failed hook.
            chunks.clear()


def _token() -> str:
    token = os.environ.get("WAKEMARK_TOKEN", "").strip()
    if token:
        return token
    home = os.path.expanduser(os.environ.get("WAKEMARK_HOME") or "~/.wakemark")
    with open(os.path.join(home, "token")) as fh:
        return fh.read().strip()


def _project_dir() -> str:
    start = (
        os.environ.get("CLAUDE_PROJECT_DIR") or os.environ.get("GEMINI_PROJECT_DIR") or os.getcwd()
    )
    return _project_module().find_root(start) or start


def _project_module():  # -> ModuleType; `types` and `typing` cost more than they tell
    """``shared/project.py`` of the tree this file is in, run as a module of its own."""
    # Not importlib.util: its imports (contextlib and more) cost more than this whole file.
    from importlib.machinery import SourceFileLoader

    package = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    path = os.path.join(package, "shared", "project.py")
    module = type(sys)("_wakemark_project")
    module.__file__ = path
    # get_code uses (and writes) the usual __pycache__ entry, so this is not a compile.
    code = SourceFileLoader(module.__name__, path).get_code(module.__name__)
    exec(code, module.__dict__)  # type: ignore[arg-type]  # None only for a bytecode-less loader
    return module


def _post(
    agent: str, event: str, payload: bytes, deadline: float, root: str
) -> tuple[int, dict[bytes, bytes], bytes]:
    """The reply's status, its headers (names lower-cased) and its body."""
    import _socket  # the C module: see the module docstring

    port = int(os.environ.get("WAKEMARK_PORT") or DEFAULT_PORT)
    host = f"127.0.0.1:{port}"
    path = f"/v1/hooks/{agent}" + (f"?event={event}" if event else "")
    headers = [
        f"POST {path} HTTP/1.0",
        f"Host: {host}",
        "Content-Type: application/json",
        f"Content-Length: {len(payload)}",
        f"Authorization: Bearer {_token()}",
        f"X-Wakemark-Project: {_header_value(root)}",
    ]
    # Only a prompt and a session's index are checked against the files; a tool use need
    # not pay for hashing. The hook's name is in ``event`` or near the payload's start.
    named = (event.encode() + payload[:4096]).lower()
    hashes = _hashes(root) if any(h in named for h in _CHECKED) else ""
    if hashes:
        headers.append(f"{HASHES_HEADER}: {_header_value(hashes)}")
    edited = _edited(root, payload, named) if any(h in named for h in _AFTER_TOOL) else ""
    if edited:
        headers.append(f"{EDITED_HEADER}: {_header_value(edited)}")
    if os.environ.get("WAKEMARK_ACTOR"):
        headers.append(f"X-Wakemark-Actor: {_header_value(os.environ['WAKEMARK_ACTOR'])}")
    request = ("\r\n".join(headers) + "\r\n\r\n").encode("utf-8", "surrogateescape") + payload
    sock = _socket.socket(_socket.AF_INET, _socket.SOCK_STREAM)
    try:
        sock.settimeout(_left(deadline))
        sock.connect(("127.0.0.1", port))
        sock.sendall(request)
        chunks: list[bytes] = []
        size = 0
        while True:
            sock.settimeout(_left(deadline))
            chunk = sock.recv(65536)
            if not chunk:
                break
            size += len(chunk)
            if size > MAX_REPLY:
                raise ValueError("reply too large")
            chunks.append(chunk)
    finally:
        sock.close()
    head, _, body = b"".join(chunks).partition(b"\r\n\r\n")
    status_line, *lines = head.split(b"\r\n")
    got: dict[bytes, bytes] = {}
    for line in lines:
        name, _, value = line.partition(b":")
        got[name.strip().lower()] = value.strip()
    # A server that died mid-reply closes early: part of a reply is not a reply.
    length = int(got.get(b"content-length", len(body)))
    if len(body) < length:
        raise ValueError(f"reply truncated: {len(body)} of {length} bytes")
    return int(status_line.split()[1]), got, body


def _left(deadline: float) -> float:
    left = deadline - time.monotonic()
    if left <= 0:
        raise TimeoutError(f"no reply within {TIMEOUT_S} s")
    return left


def _header_value(value: str) -> str:
    # Header injection guard: a path with a newline must not start a new header.
    return "".join(c for c in value if c not in "\r\n")


def _print(text: str) -> None:
    if not text:
        return
    try:
        sys.stdout.write(text + "\n")
        sys.stdout.flush()
    except Exception:  # noqa: BLE001 - a closed stdout is the agent's business
        pass


def _log(line: str) -> None:
    try:
        home = os.path.expanduser(os.environ.get("WAKEMARK_HOME") or "~/.wakemark")
        logs = os.path.join(home, "logs")
        os.makedirs(logs, mode=0o700, exist_ok=True)
        path = os.path.join(logs, "hook.log")
        try:
            if os.path.getsize(path) > LOG_CAP:
                os.replace(path, path + ".1")
        except OSError:
            pass
        stamp = time.strftime("%Y-%m-%dT%H:%M:%S")
        with open(path, "a", encoding="utf-8", errors="replace") as fh:
            fh.write(f"{stamp} {line[:2000]}\n")
    except Exception:  # noqa: BLE001 - logging must not be the thing that fails
        pass


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

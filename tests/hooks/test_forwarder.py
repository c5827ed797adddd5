"""`wakemark hook` as a real subprocess against a real HTTP server (or none at all)."""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.conftest import free_port
from tests.served import serving
from wakemark.services.api.security import ensure_token
from wakemark.services.forwarder import forward
from wakemark.shared.config import Settings, prepare_home
from wakemark.shared.runtime import Runtime
from wakemark.shared.storage import migrate

from .conftest import ACTOR, FIXTURES, load, remember

HOOK = str(Path(__file__).resolve().parents[2] / "wakemark" / "services" / "forwarder" / "hook.py")
# The forwarder's former path, which configs installed before it moved still name.
FORMER = Path(HOOK).parents[1] / "cli" / "hook.py"


@dataclass
class Server:
    settings: Settings
    runtime: Runtime
    token: str


@pytest.fixture
def server(settings: Settings) -> Iterator[Server]:
    settings = settings.replace(port=free_port())
    prepare_home(settings)
    migrate(settings)
    runtime = Runtime.build(settings)
    token = ensure_token(settings)
    with serving(runtime, settings.port):
        yield Server(settings, runtime, token)
    runtime.close()


def _env(home: Path, port: int, token: str | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("WAKEMARK_", "CLAUDE_"))}
    env.update(WAKEMARK_HOME=str(home), WAKEMARK_PORT=str(port), WAKEMARK_ACTOR=ACTOR)
    if token:
        env["WAKEMARK_TOKEN"] = token
    return env


def _hook(
    env: dict[str, str], cwd: Path, *args: str, stdin: bytes = b""
) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [sys.executable, "-S", "-E", "-s", HOOK, *args],
        input=stdin, env=env, cwd=cwd, capture_output=True, timeout=10,
    )  # fmt: skip


def test_prints_claude_code_session_start_context(
    server: Server, project_dir: Path, namespace: str
) -> None:
    record = remember(server.runtime, namespace)
    payload = json.dumps(load("claude-code", "SessionStart", project_dir)).encode()
    # The token comes from $WAKEMARK_HOME/token: no WAKEMARK_TOKEN in the environment.
    env = _env(server.settings.home, server.settings.port)
    out = _hook(env, project_dir, "claude-code", "SessionStart", stdin=payload)
    assert (out.returncode, out.stderr) == (0, b"")
    reply = json.loads(out.stdout)
    assert record.title in reply["hookSpecificOutput"]["additionalContext"]


def test_prints_kiro_context_as_plain_text_and_stores_the_prompt(
    server: Server, project_dir: Path, namespace: str
) -> None:
    record = remember(server.runtime, namespace)
    payload = load("kiro-cli", "userPromptSubmit")
    del payload["cwd"]  # the forwarder's own project detection (cwd) must find the root
    env = _env(server.settings.home, server.settings.port, server.token)
    out = _hook(env, project_dir / "src", "kiro-cli", stdin=json.dumps(payload).encode())
    assert out.returncode == 0
    text = out.stdout.decode()
    assert record.title in text and not text.lstrip().startswith("{")
    [event] = server.runtime.storage.list_events(namespace=namespace)
    assert event.kind == "prompt"


def test_codex_notify_payload_comes_as_an_argument(
    server: Server, project_dir: Path, namespace: str
) -> None:
    arg = (FIXTURES / "codex" / "notify.agent-turn-complete.json").read_text()
    env = _env(server.settings.home, server.settings.port, server.token)
    out = _hook(env, project_dir, "codex", "notify", arg)
    assert (out.returncode, out.stdout, out.stderr) == (0, b"", b"")
    kinds = [e.kind for e in server.runtime.storage.list_events(namespace=namespace)]
    assert sorted(kinds) == ["prompt", "session_summary"]


def test_an_ignored_projects_hook_says_so_in_the_log(
    server: Server, project_dir: Path, namespace: str
) -> None:
    (project_dir / ".wakemarkignore").write_text("")
    log = server.settings.home / "logs" / "hook.log"
    env = _env(server.settings.home, server.settings.port, server.token)
    payload = json.dumps(load("claude-code", "UserPromptSubmit", project_dir)).encode()
    out = _hook(env, project_dir, "claude-code", "UserPromptSubmit", stdin=payload)
    assert (out.returncode, out.stderr) == (0, b"")  # the agent's reply is unchanged
    assert server.runtime.storage.list_events(namespace=namespace) == []
    [line] = log.read_text().splitlines()
    marker = project_dir.resolve() / ".wakemarkignore"
    assert line.endswith(f"claude-code UserPromptSubmit: 1 event(s) not stored: {marker} exists")
    (project_dir / ".wakemarkignore").unlink()
    out = _hook(env, project_dir, "claude-code", "UserPromptSubmit", stdin=payload)
    assert len(log.read_text().splitlines()) == 1  # a stored event logs nothing
    assert len(server.runtime.storage.list_events(namespace=namespace)) == 1


@pytest.mark.parametrize("stdin", [b"{not json", b"", b"[1, 2]", b"\xff\xfe"])
def test_malformed_stdin_exits_0_quietly(server: Server, project_dir: Path, stdin: bytes) -> None:
    env = _env(server.settings.home, server.settings.port, server.token)
    out = _hook(env, project_dir, "claude-code", stdin=stdin)
    assert (out.returncode, out.stdout, out.stderr) == (0, b"", b"")
    assert (server.settings.home / "logs" / "hook.log").read_text().strip()


def test_server_down_exits_0_silently(tmp_path: Path, project_dir: Path) -> None:
    env = _env(tmp_path / "home", free_port(), "t")
    payload = json.dumps(load("claude-code", "UserPromptSubmit", project_dir)).encode()
    out = _hook(env, project_dir, "claude-code", stdin=payload)
    assert (out.returncode, out.stdout, out.stderr) == (0, b"", b"")
    log = (tmp_path / "home" / "logs" / "hook.log").read_text()
    assert "ConnectionRefusedError" in log


def test_server_down_gemini_still_gets_json(tmp_path: Path, project_dir: Path) -> None:
    env = _env(tmp_path / "home", free_port(), "t")
    payload = json.dumps(load("gemini-cli", "BeforeAgent", project_dir)).encode()
    out = _hook(env, project_dir, "gemini-cli", stdin=payload)
    assert (out.returncode, out.stdout.strip()) == (0, b"{}")


def test_a_payload_over_the_limit_is_read_to_its_end(tmp_path: Path, project_dir: Path) -> None:
    # Written as an agent writes it: had the hook stopped reading at the limit and
    # exited, the rest of the write would fail with a broken pipe on the agent's side.
    env = _env(tmp_path / "home", free_port(), "t")
    payload = json.dumps({"cwd": str(project_dir), "x": "a" * (3 * forward.MAX_STDIN)}).encode()
    proc = subprocess.Popen(
        [sys.executable, "-S", "-E", "-s", HOOK, "cursor"], stdin=subprocess.PIPE,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, cwd=project_dir,
    )  # fmt: skip
    assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
    proc.stdin.write(payload)  # raises BrokenPipeError if the hook has gone
    proc.stdin.close()
    out, err = proc.stdout.read(), proc.stderr.read()
    proc.wait(timeout=10)
    assert (proc.returncode, out.strip(), err) == (0, b'{"continue": true}', b"")
    assert "payload over" in (tmp_path / "home" / "logs" / "hook.log").read_text()


def test_a_server_that_never_answers_is_abandoned(tmp_path: Path, project_dir: Path) -> None:
    # Accepts the connection, never replies: the 2 s deadline must end the hook.
    with socket.socket() as sink:
        sink.bind(("127.0.0.1", 0))
        sink.listen()
        env = _env(tmp_path / "home", sink.getsockname()[1], "t")
        payload = json.dumps(load("claude-code", "Stop", project_dir)).encode()
        out = _hook(env, project_dir, "claude-code", stdin=payload)
    assert (out.returncode, out.stdout, out.stderr) == (0, b"", b"")
    assert "timed out" in (tmp_path / "home" / "logs" / "hook.log").read_text()


def test_hook_log_is_capped(tmp_path: Path, project_dir: Path) -> None:
    logs = tmp_path / "home" / "logs"
    logs.mkdir(parents=True)
    (logs / "hook.log").write_text("x" * 300_000)
    env = _env(tmp_path / "home", free_port(), "t")
    _hook(env, project_dir, "claude-code", stdin=b"{}")
    assert (logs / "hook.log.1").stat().st_size == 300_000
    assert (logs / "hook.log").stat().st_size < 1000


def test_forwarder_imports_only_the_standard_library(tmp_path: Path, project_dir: Path) -> None:
    # Run exactly as installed (the file by path, -S -E -s); -X importtime lists every
    # module the interpreter imports, its own start-up included.
    env = _env(tmp_path / "home", free_port(), "t")
    out = subprocess.run(
        [sys.executable, "-S", "-E", "-s", "-X", "importtime", HOOK, "claude-code"],
        input=b'{"session_id": "s"}', env=env, cwd=project_dir, capture_output=True, timeout=10,
    )  # fmt: skip
    assert (out.returncode, out.stdout) == (0, b"")
    modules = set(re.findall(r"^import time:\s+\d+ \|\s+\d+ \| +(\S+)$", out.stderr.decode(), re.M))
    assert {"encodings", "importlib.machinery", "_socket"} <= modules
    foreign = {m for m in modules if m.split(".")[0] not in sys.stdlib_module_names}
    assert foreign == set()  # nothing of wakemark's package either: not even its __init__
    heavy = {"socket", "re", "json", "pathlib", "typing", "importlib.util", "http.client"}
    assert not modules & heavy
    # It got past the project detection (shared/project.py, loaded by path) to the connect.
    assert "ConnectionRefusedError" in (tmp_path / "home" / "logs" / "hook.log").read_text()


@pytest.mark.parametrize("script", ["services/forwarder/hook.py", "services/cli/hook.py"])
def test_forwarder_runs_from_an_installed_tree(
    server: Server, project_dir: Path, namespace: str, tmp_path: Path, script: str
) -> None:
    # What a wheel installs, minus everything the forwarder must not need: its own file,
    # its former path and the project detection. No checkout, no wakemark/__init__.py.
    package = tmp_path / "site-packages" / "wakemark"
    (package / "services" / "forwarder").mkdir(parents=True)
    (package / "services" / "cli").mkdir()
    (package / "shared").mkdir()
    shutil.copy(HOOK, package / "services" / "forwarder" / "hook.py")
    shutil.copy(Path(HOOK).with_name("forward.py"), package / "services" / "forwarder")
    shutil.copy(FORMER, package / "services" / "cli" / "hook.py")
    shutil.copy(Path(HOOK).parents[2] / "shared" / "project.py", package / "shared")
    record = remember(server.runtime, namespace)
    payload = load("kiro-cli", "userPromptSubmit")
    del payload["cwd"]  # the root must come from the forwarder's own detection
    env = _env(server.settings.home, server.settings.port, server.token)
    out = subprocess.run(
        ["/usr/bin/python3" if os.access("/usr/bin/python3", os.X_OK) else sys.executable,
         "-S", "-E", "-s", str(package / script), "kiro-cli"],
        input=json.dumps(payload).encode(), env=env, cwd=project_dir / "src",
        capture_output=True, timeout=10,
    )  # fmt: skip
    assert (out.returncode, out.stderr) == (0, b"")
    assert record.title in out.stdout.decode()
    [event] = server.runtime.storage.list_events(namespace=namespace)
    assert event.kind == "prompt"


def test_the_command_install_writes_runs_the_forwarder(
    server: Server, project_dir: Path, namespace: str
) -> None:
    import shlex

    from wakemark.services.agents.configs import Where, hook_command

    record = remember(server.runtime, namespace)
    payload = json.dumps(load("claude-code", "SessionStart", project_dir)).encode()
    # The agent's environment knows nothing of wakemark: the command carries the port and
    # home it was installed with, and the token comes from that home.
    env = _env(server.settings.home, server.settings.port)
    del env["WAKEMARK_HOME"], env["WAKEMARK_PORT"]
    where = Where(
        home=str(project_dir),
        project=None,
        port=server.settings.port,
        token=None,
        wakemark_home=str(server.settings.home),
    )
    argv = shlex.split(hook_command(where, "claude-code", "SessionStart"))
    out = subprocess.run(argv, input=payload, env=env, cwd=project_dir, capture_output=True)
    assert (out.returncode, out.stderr) == (0, b"")
    assert record.title in json.loads(out.stdout)["hookSpecificOutput"]["additionalContext"]


def test_forwarder_python_prefers_a_working_system_python3(tmp_path: Path) -> None:
    from wakemark.services.agents.configs import forwarder_python

    too_old = tmp_path / "python2"
    too_old.write_text("#!/bin/sh\nexit 1\n")
    too_old.chmod(0o755)
    assert forwarder_python(str(too_old)) == sys.executable
    assert forwarder_python(str(tmp_path / "missing")) == sys.executable
    system = "/usr/bin/python3"
    if os.access(system, os.X_OK):
        assert forwarder_python(system) == system


@pytest.mark.parametrize(
    "path",
    [
        "services/forwarder/hook.py",
        "services/forwarder/forward.py",
        "services/cli/hook.py",
        "shared/project.py",
    ],
)
def test_the_forwarders_files_parse_as_python_3_9(path: str) -> None:
    # The installer may pick a system python3 as old as 3.9 to run them.
    import ast

    source = (Path(HOOK).parents[3] / path).read_text()
    ast.parse(source, feature_version=(3, 9))


@contextmanager
def _answering(reply: bytes) -> Iterator[int]:
    """A server on a free port that reads one request and answers it with ``reply``
    (the raw bytes, status line and all); yields the port."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()

        def answer() -> None:
            conn, _ = listener.accept()
            with conn:
                conn.settimeout(5)
                data = b""
                while b"\r\n\r\n" not in data:
                    data += conn.recv(65536)
                head, _, body = data.partition(b"\r\n\r\n")
                length = int(re.findall(rb"Content-Length: (\d+)", head)[0])
                while len(body) < length:
                    body += conn.recv(65536)
                conn.sendall(reply)

        thread = threading.Thread(target=answer, daemon=True)
        thread.start()
        yield listener.getsockname()[1]
        thread.join(5)


GEMINI_REPLY = b'{"hookSpecificOutput": {"additionalContext": "remember the cart"}}'


def test_a_reply_is_printed_once_when_keeping_the_watch_list_fails(
    tmp_path: Path, project_dir: Path
) -> None:
    # A team server asks which files to hash; the forwarder cannot write that down
    # (`watch` is a file here). The agent must still read exactly one JSON reply.
    home = tmp_path / "home"
    home.mkdir()
    (home / "watch").write_text("")
    reply = b"HTTP/1.0 200 OK\r\nX-Wakemark-Watch: a.py\r\n\r\n" + GEMINI_REPLY
    payload = json.dumps(load("gemini-cli", "BeforeAgent", project_dir)).encode()
    with _answering(reply) as port:
        out = _hook(_env(home, port, "t"), project_dir, "gemini-cli", stdin=payload)
    assert (out.returncode, json.loads(out.stdout)) == (0, json.loads(GEMINI_REPLY))
    assert "watch" in (home / "logs" / "hook.log").read_text()


@pytest.mark.parametrize(
    ("agent", "body"),
    [
        ("gemini-cli", b"<html><body>Not wakemark</body></html>"),
        ("cursor", b"[1, 2]"),
        ("gemini-cli", GEMINI_REPLY[:30]),  # the server died mid-reply
    ],
)
def test_a_2xx_reply_the_agent_cannot_parse_gets_its_failsafe(
    tmp_path: Path, project_dir: Path, agent: str, body: bytes
) -> None:
    head = f"HTTP/1.0 200 OK\r\nContent-Length: {len(GEMINI_REPLY)}\r\n\r\n".encode()
    with _answering(head + body) as port:
        out = _hook(_env(tmp_path / "home", port, "t"), project_dir, agent, stdin=b"{}")
    assert (out.returncode, out.stdout.decode().strip()) == (0, forward.FAILSAFE[agent])


def test_a_truncated_reply_prints_nothing_rather_than_part_of_it(
    tmp_path: Path, project_dir: Path
) -> None:
    # Claude Code reads a non-JSON stdout as plain context: half a reply would be injected.
    head = f"HTTP/1.0 200 OK\r\nContent-Length: {len(GEMINI_REPLY)}\r\n\r\n".encode()
    with _answering(head + GEMINI_REPLY[:30]) as port:
        out = _hook(_env(tmp_path / "home", port, "t"), project_dir, "claude-code", stdin=b"{}")
    assert (out.returncode, out.stdout) == (0, b"")
    assert "truncated" in (tmp_path / "home" / "logs" / "hook.log").read_text()


def _fifo_edit(project_dir: Path) -> bytes:
    os.mkfifo(project_dir / "pipe")  # opening it to read waits for a writer, forever
    return b'{"tool_name": "write_file", "tool_input": {"file_path": "pipe"}}'


HOSTILE_EDITS = {
    # Each escaped quote used to re-scan the whole string before it.
    "escaped quotes": lambda _: (
        b'{"tool_name": "write_file", "file_path": "' + b'\\"' * 400_000 + b'"}'
    ),
    # Each patch marker used to search the rest of the payload for a newline.
    "patch markers, no newline": lambda _: (
        b'{"tool_name": "apply_patch", "x": "' + b"*** Add File: a" * 100_000 + b'"}'
    ),
    "a named pipe": _fifo_edit,
    # Not a file name this system can have: the event must still be sent.
    "a lone surrogate": lambda _: b'{"tool_name": "write_file", "file_path": "a\\ud800"}',
}


@pytest.mark.parametrize("case", list(HOSTILE_EDITS))
def test_a_hostile_edit_payload_is_still_forwarded_within_the_deadline(
    tmp_path: Path, project_dir: Path, case: str
) -> None:
    # The edited files are hashed before the connect: no port answers, so reaching the
    # connect (ConnectionRefusedError) within _hook's timeout is the behaviour under test.
    payload = HOSTILE_EDITS[case](project_dir)
    env = _env(tmp_path / "home", free_port(), "t")
    out = _hook(env, project_dir, "gemini-cli", "AfterTool", stdin=payload)
    assert (out.returncode, out.stdout.strip()) == (0, b"{}")
    log = (tmp_path / "home" / "logs" / "hook.log").read_text()
    assert "ConnectionRefusedError" in log

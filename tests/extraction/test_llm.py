"""The LLM extractor against a real chat-completions server on loopback: success, every
failure falling back to the deterministic record, and the persisted daily budget."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from wakemark.shared.config import Settings
from wakemark.shared.extraction import extract, llm_usage
from wakemark.shared.extraction.deterministic import extract_deterministic

from .turns import PROJECT, fixture_turn

GOOD = {
    "title": "Coupon applied twice in Cart.total",
    "summary": "Cart.total subtracted the coupon twice; removed the second subtraction.",
    "facts": ["pytest -q failed: assert 90 == 81", "pytest -q passes after the fix"],
    "concepts": ["Cart.total", "coupon"],
    "files_touched": ["src/shop/cart.py"],
    "observation_type": "bugfix",
}


class ChatServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), ChatHandler)
        self.mode = "good"
        self.requests: list[tuple[str, dict[str, str], dict[str, Any]]] = []


class ChatHandler(BaseHTTPRequestHandler):
    server: ChatServer

    def log_message(self, *args: Any) -> None:  # keep test output quiet
        pass

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.server.requests.append((self.path, dict(self.headers), body))
        mode = self.server.mode
        if mode == "500":
            return self._send(500, b'{"error": {"message": "boom"}}')
        if mode == "slow":
            time.sleep(2.5)
        content: Any = json.dumps(GOOD)
        if mode == "malformed":
            content = '{"title": "cut off'
        elif mode == "wrong_type":
            content = json.dumps({**GOOD, "observation_type": "epic"})
        elif mode == "extra_key":
            content = json.dumps({**GOOD, "record_id": "mr_x"})
        elif mode == "too_many_facts":
            content = json.dumps({**GOOD, "facts": [f"f{i}" for i in range(31)]})
        elif mode == "climbing_paths":
            paths = ["src/../../etc/passwd", "src/./shop/cart.py", f"{PROJECT}/src/../../x.py",
                     "/home/dev/.claude/plans/p.md", "~/notes.md"]  # fmt: skip
            content = json.dumps({**GOOD, "files_touched": paths})
        elif mode == "not_object":
            content = json.dumps([GOOD])
        reply: dict[str, Any] = {
            "id": "chatcmpl-1",
            "object": "chat.completion",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": content}}],
        }
        if mode != "no_usage":
            reply["usage"] = {"prompt_tokens": 300, "completion_tokens": 21, "total_tokens": 321}
        self._send(200, json.dumps(reply).encode())

    def _send(self, status: int, payload: bytes) -> None:
        try:
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client gave up (the timeout case)


@pytest.fixture
def server() -> Iterator[ChatServer]:
    srv = ChatServer()
    thread = threading.Thread(target=srv.serve_forever, daemon=True)
    thread.start()
    yield srv
    srv.shutdown()
    srv.server_close()


@pytest.fixture
def llm_settings(settings: Settings, server: ChatServer) -> Settings:
    return settings.replace(
        llm_base_url=f"http://127.0.0.1:{server.server_address[1]}/v1/",
        llm_model="qwen2.5-coder",
        llm_api_key="sk-test",
        llm_timeout_s=1,
    )


def test_success(llm_settings: Settings, server: ChatServer) -> None:
    turn = fixture_turn("bugfix")
    [record] = extract(turn, llm_settings)
    assert record.strategy == "llm" and record.quality == "full"
    assert record.title == GOOD["title"] and record.summary == GOOD["summary"]
    assert record.facts == GOOD["facts"] and record.concepts == GOOD["concepts"]
    assert record.files_touched == ["src/shop/cart.py"]
    assert record.observation_type == "bugfix"
    assert record.source_event_ids == [e.event_id for e in turn.events]  # ours, not the model's
    [(path, headers, body)] = server.requests
    assert path == "/v1/chat/completions"
    assert headers["Authorization"] == "Bearer sk-test"
    assert body["model"] == "qwen2.5-coder"
    assert body["response_format"] == {"type": "json_object"}
    user = body["messages"][-1]["content"]
    assert "the checkout total is wrong when a coupon is applied" in user
    assert "pytest -q (exit 1)" in user
    usage = llm_usage(llm_settings)
    assert usage["tokens_used"] == 321
    assert (usage["calls"], usage["failures"], usage["budget"]) == (1, 0, 200_000)
    stored = json.loads((llm_settings.home / "llm_usage.json").read_text())
    assert stored[datetime.now(UTC).date().isoformat()]["tokens"] == 321


def test_no_key_no_auth_header_and_estimated_usage(
    llm_settings: Settings, server: ChatServer
) -> None:
    server.mode = "no_usage"
    [record] = extract(fixture_turn("question"), llm_settings.replace(llm_api_key=None))
    assert record.strategy == "llm"
    [(_, headers, body)] = server.requests
    assert "Authorization" not in headers
    prompt_chars = sum(len(m["content"]) for m in body["messages"])
    used = llm_usage(llm_settings)["tokens_used"]
    assert prompt_chars // 4 < used < prompt_chars // 4 + 1000  # estimated from chars/4


def _assert_fallback(record: Any, turn: Any) -> None:
    expected = extract_deterministic(turn)
    assert expected is not None
    assert record.strategy == "deterministic" and record.quality == "fallback"
    skip = {"record_id", "quality"}
    assert record.model_dump(exclude=skip) == expected.model_dump(exclude=skip)


@pytest.mark.parametrize(
    ("mode", "tokens"),
    [
        ("malformed", 321),  # the model answered: its usage counts
        ("wrong_type", 321),
        ("extra_key", 321),
        ("too_many_facts", 321),
        ("not_object", 321),
        ("500", 0),  # no work done: the reservation is released
    ],
)
def test_bad_replies_fall_back(
    llm_settings: Settings, server: ChatServer, mode: str, tokens: int
) -> None:
    server.mode = mode
    turn = fixture_turn("bugfix")
    [record] = extract(turn, llm_settings)
    _assert_fallback(record, turn)
    assert len(server.requests) == 1
    usage = llm_usage(llm_settings)
    assert (usage["tokens_used"], usage["calls"], usage["failures"]) == (tokens, 1, 1)


def test_timeout_falls_back_and_keeps_the_estimate(
    llm_settings: Settings, server: ChatServer
) -> None:
    server.mode = "slow"
    turn = fixture_turn("refactor")
    [record] = extract(turn, llm_settings)
    _assert_fallback(record, turn)
    usage = llm_usage(llm_settings)
    assert usage["failures"] == 1 and usage["tokens_used"] > 1024  # the reservation stays


def test_connection_refused_falls_back(settings: Settings) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # closed again before the call: nothing listens
    llm = settings.replace(llm_base_url=f"http://127.0.0.1:{port}", llm_model="m")
    turn = fixture_turn("question")
    [record] = extract(turn, llm)
    _assert_fallback(record, turn)
    usage = llm_usage(llm)
    assert (usage["tokens_used"], usage["failures"]) == (0, 1)


def test_daily_budget_is_hard_and_survives_restarts(
    llm_settings: Settings, server: ChatServer
) -> None:
    turn = fixture_turn("bugfix")
    tight = llm_settings.replace(llm_daily_tokens=100)  # less than one call's reservation
    [record] = extract(turn, tight)
    _assert_fallback(record, turn)
    assert server.requests == []  # the call was never made
    assert llm_usage(tight)["skipped"] == 1

    # Room for exactly one call: the first spends from the budget, the next is skipped.
    from wakemark.shared.extraction.llm import MAX_OUTPUT_TOKENS

    one_call = llm_settings.replace(llm_daily_tokens=MAX_OUTPUT_TOKENS + 4000)
    assert extract(turn, one_call)[0].strategy == "llm"
    # A "restart": fresh settings over the same home read the persisted count.
    again = Settings(
        home=llm_settings.home,
        llm_base_url=llm_settings.llm_base_url,
        llm_model="m",
        llm_daily_tokens=321 + MAX_OUTPUT_TOKENS,
    )
    assert llm_usage(again)["tokens_used"] == 321
    assert extract(turn, again)[0].quality == "fallback"
    assert len(server.requests) == 1
    assert llm_usage(again)["remaining"] == MAX_OUTPUT_TOKENS


@pytest.mark.slow
def test_budget_is_shared_by_processes(tmp_path: Path) -> None:
    home = tmp_path / "home"
    script = (
        "import sys; from pathlib import Path;"
        "from wakemark.shared.config import Settings;"
        "from wakemark.shared.extraction import budget;"
        "s = Settings(home=Path(sys.argv[1]), llm_daily_tokens=10**6);"
        "[budget.reserve(s, 7) for _ in range(200)]"
    )
    root = Path(__file__).resolve().parents[2]
    procs = [
        subprocess.Popen([sys.executable, "-c", script, str(home)], cwd=root) for _ in range(4)
    ]
    assert [p.wait(timeout=120) for p in procs] == [0, 0, 0, 0]
    usage = llm_usage(Settings(home=home, llm_daily_tokens=10**6))
    assert (usage["calls"], usage["tokens_used"]) == (800, 5600)  # no update was lost


def test_the_models_paths_stay_inside_the_project(
    llm_settings: Settings, server: ChatServer
) -> None:
    server.mode = "climbing_paths"
    [record] = extract(fixture_turn("bugfix"), llm_settings)
    assert record.strategy == "llm" and record.files_touched == ["src/shop/cart.py"]

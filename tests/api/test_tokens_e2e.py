"""Scoped tokens over a real ``wakemark serve`` with two workers: the CLI makes and
revokes them on the database, and every API process honours the revocation in seconds."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from tests.conftest import free_port
from wakemark.services.api.security import TOKEN_CACHE_TTL_S

from .test_serve_e2e import _call, _env, _serving, _wakemark

pytestmark = pytest.mark.slow

ALICE = "/actor/alice/project/p1/"


def test_cli_tokens_over_a_real_server(tmp_path: Path) -> None:
    port = free_port()
    home = tmp_path / "home"
    env = _env(home, port)
    created = _wakemark(env, "token", "create", "--actor", "bob", "--name", "e2e")
    assert created.returncode == 0, created.stderr
    secret = created.stdout.strip()
    assert secret.startswith("wmk_") and "created tok_" in created.stderr
    listed = _wakemark(env, "token", "list")
    assert "e2e" in listed.stdout and "/actor/bob/" in listed.stdout
    assert secret not in listed.stdout
    token_id = listed.stdout.splitlines()[1].split()[0]

    with _serving(env, port, "--workers", "2"):
        admin = (home / "token").read_text().strip()
        memory = {"namespace": ALICE, "title": "alice's plan", "summary": "s"}
        code, body = _call(port, "POST", "/v1/memories", admin, memory)
        assert code == 201
        alice_id = body["record_id"]
        assert _call(port, "GET", f"/v1/memories?namespace={ALICE}", secret)[0] == 403
        assert _call(port, "GET", f"/v1/memories/{alice_id}", secret)[0] == 404
        assert _call(port, "DELETE", f"/v1/memories/{alice_id}", secret)[0] == 404
        code, body = _call(port, "GET", "/v1/memories", secret)
        assert (code, body["items"]) == (200, [])
        assert _call(port, "GET", "/v1/audit", secret)[0] == 403

        # The database holds the hash, never the secret (WAL included).
        stored = b"".join(p.read_bytes() for p in home.glob("wakemark.db*"))
        assert secret.encode() not in stored and secret[4:].encode() not in stored

        revoked = _wakemark(env, "token", "revoke", token_id)
        assert revoked.returncode == 0, revoked.stderr
        deadline = time.monotonic() + TOKEN_CACHE_TTL_S + 5  # + slack for a loaded machine
        streak = 0
        while streak < 20 and time.monotonic() < deadline:
            # A fresh connection each time, so both workers get asked.
            streak = streak + 1 if _call(port, "GET", "/v1/stats", secret)[0] == 401 else 0
        assert streak == 20, "the revoked token still works after the cache TTL"
        assert _call(port, "GET", "/v1/stats", admin)[0] == 200

    audit = _wakemark(env, "audit", "--limit", "5")
    assert audit.returncode == 0, audit.stderr
    lines = audit.stdout.splitlines()
    assert "token_revoke" in lines[1] and "token_create" in lines[2] and token_id in lines[2]

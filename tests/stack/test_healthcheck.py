"""The image's healthcheck (docker/healthcheck.py), run against the real process stack."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from .stack import RedisServer, Stack

pytestmark = [pytest.mark.slow, pytest.mark.postgres, pytest.mark.redis]

HEALTHCHECK = Path(__file__).resolve().parents[2] / "docker" / "healthcheck.py"


def _check(stack: Stack, role: str) -> subprocess.CompletedProcess[str]:
    argv = [sys.executable, str(HEALTHCHECK), role]
    return subprocess.run(argv, env=stack.env(), capture_output=True, text=True, timeout=60)


def test_healthchecks_follow_what_each_role_needs(
    deployment: Stack, private_redis: RedisServer
) -> None:
    for role in ("api", "worker", "beat"):
        done = _check(deployment, role)
        assert done.returncode == 0, f"{role}: {done.stderr}"
    assert _check(deployment, "nonsense").returncode == 2

    private_redis.stop()
    for role in ("worker", "beat"):  # both are useless without their broker
        done = _check(deployment, role)
        assert done.returncode == 1, f"{role} healthy without Redis: {done.stdout}"
    assert _check(deployment, "api").returncode == 0  # ingest still works without Redis

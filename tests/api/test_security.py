"""Token, Host (DNS rebinding) and Origin checks, and the token file itself."""

from __future__ import annotations

import os
import stat

import pytest

from tests.threads import race
from wakemark.services.api.security import allowed_hosts, ensure_token
from wakemark.shared.config import Settings

from .conftest import Api, make_event


def test_token_file_is_created_0600_and_stable(settings: Settings) -> None:
    first = ensure_token(settings)
    mode = stat.S_IMODE(os.stat(settings.token_path).st_mode)
    assert mode == 0o600
    assert len(first) >= 40
    assert ensure_token(settings) == first
    assert stat.S_IMODE(os.stat(settings.home).st_mode) == 0o700


def test_concurrent_first_start_agrees_on_one_token(settings: Settings) -> None:
    results: list[str] = []
    assert race([lambda: results.append(ensure_token(settings))] * 8) == []
    assert len(set(results)) == 1
    assert settings.token_path.read_text().strip() == results[0]
    assert [p.name for p in settings.home.iterdir()] == ["token"]  # no temp files left


def test_env_token_overrides_file(settings: Settings) -> None:
    assert ensure_token(settings.replace(token="from-env")) == "from-env"
    assert not settings.token_path.exists()


@pytest.mark.parametrize(
    "auth",
    [None, "", "Bearer", "Bearer wrong", "Basic abc", "bearer"],
)
def test_missing_or_wrong_token_is_401(sqlite_api: Api, auth: str | None) -> None:
    headers = {} if auth is None else {"Authorization": auth}
    res = sqlite_api.get("/v1/stats", token=None, headers=headers)
    assert res.status_code == 401
    assert res.json["error"] == "unauthorized"


def test_token_is_checked_before_anything_is_stored(sqlite_api: Api) -> None:
    event = make_event()
    assert sqlite_api.post("/v1/events", json=event, token="nope").status_code == 401
    assert sqlite_api.get(f"/v1/events/{event['event_id']}").status_code == 404


def test_health_is_public_and_metrics_is_not(sqlite_api: Api) -> None:
    assert sqlite_api.get("/health", token=None).status_code == 200
    assert sqlite_api.get("/metrics", token=None).status_code == 401
    assert sqlite_api.get("/metrics").status_code == 200


@pytest.mark.parametrize("host", ["127.0.0.1:37800", "localhost:37800", "[::1]:37800"])
def test_loopback_hosts_are_allowed(sqlite_api: Api, host: str) -> None:
    assert sqlite_api.get("/v1/stats", headers={"Host": host}).status_code == 200


@pytest.mark.parametrize(
    "host", ["evil.example:37800", "127.0.0.1:9999", "localhost", "127.0.0.1.nip.io:37800", ""]
)
def test_foreign_host_is_403_even_on_health(sqlite_api: Api, host: str) -> None:
    for path in ("/health", "/v1/stats"):
        res = sqlite_api.get(path, headers={"Host": host})
        assert res.status_code == 403, (path, host)
        assert res.json["error"] == "forbidden_host"


def test_non_loopback_bind_host_is_accepted(settings: Settings) -> None:
    hosts = allowed_hosts(settings.replace(host="10.1.2.3", port=8080))
    assert "10.1.2.3:8080" in hosts and "127.0.0.1:8080" in hosts
    assert "10.1.2.3:37800" not in hosts
    assert "0.0.0.0:37800" not in allowed_hosts(settings.replace(host="0.0.0.0"))


def test_cross_origin_writes_are_403(sqlite_api: Api) -> None:
    event = make_event()
    res = sqlite_api.post("/v1/events", json=event, headers={"Origin": "http://evil.example"})
    assert res.status_code == 403
    assert res.json["error"] == "forbidden_origin"
    res = sqlite_api.post("/v1/events", json=event, headers={"Origin": "null"})
    assert res.status_code == 403
    assert sqlite_api.get(f"/v1/events/{event['event_id']}").status_code == 404


def test_same_origin_and_no_origin_writes_are_allowed(sqlite_api: Api) -> None:
    same = {"Origin": "http://127.0.0.1:37800"}
    assert sqlite_api.post("/v1/events", json=make_event(), headers=same).status_code == 201
    assert sqlite_api.post("/v1/events", json=make_event()).status_code == 201


def test_cross_origin_reads_still_need_the_token(sqlite_api: Api) -> None:
    res = sqlite_api.get("/v1/stats", token=None, headers={"Origin": "http://evil.example"})
    assert res.status_code == 401

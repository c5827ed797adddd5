"""The deployment's roles, as compose.yaml gives them and the native twin runs them: the
app's database role owns its database but is no superuser (no ``COPY ... TO PROGRAM``),
and Redis refuses a client without the password."""

from __future__ import annotations

from pathlib import Path

import psycopg
import pytest
import redis

from .stack import PostgresServer, RedisServer, StackError, least_privilege

pytestmark = [pytest.mark.slow, pytest.mark.postgres, pytest.mark.redis]


def _superuser_url(server: PostgresServer) -> str:
    return f"postgresql://postgres@127.0.0.1:{server.port}/wakemark"


def test_the_app_role_is_no_superuser_and_cannot_run_programs(pg_url: str) -> None:
    with psycopg.connect(pg_url, autocommit=True) as conn:
        row = conn.execute("SELECT rolsuper FROM pg_roles WHERE rolname = current_user")
        assert row.fetchone() == (False,)
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            conn.execute("COPY (SELECT 1) TO PROGRAM 'true'")


def test_the_twins_private_cluster_has_the_same_roles(private_postgres: PostgresServer) -> None:
    with psycopg.connect(private_postgres.url, autocommit=True) as conn:
        owner, superuser = conn.execute(
            "SELECT pg_get_userbyid(datdba), rolsuper FROM pg_database, pg_roles"
            " WHERE datname = current_database() AND rolname = current_user"
        ).fetchone()  # type: ignore[misc]
        assert (owner, superuser) == ("wakemark", False)
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            conn.execute("COPY (SELECT 1) TO PROGRAM 'true'")
        # The extensions the superuser created are there for the app.
        names = {r[0] for r in conn.execute("SELECT extname FROM pg_extension")}
        assert {"vector", "unaccent", "pg_trgm", "btree_gin"} <= names


def test_redis_refuses_a_client_without_the_password(private_redis: RedisServer) -> None:
    assert private_redis.password
    anonymous = redis.Redis(host="127.0.0.1", port=private_redis.port, socket_timeout=3)
    with pytest.raises(redis.AuthenticationError):
        anonymous.ping()
    wrong = redis.Redis(host="127.0.0.1", port=private_redis.port, password="not-it")
    with pytest.raises(redis.AuthenticationError):
        wrong.ping()
    assert redis.Redis.from_url(private_redis.url, socket_timeout=3).ping() is True


def test_the_twin_refuses_a_superuser_or_an_open_redis(
    private_postgres: PostgresServer, private_redis: RedisServer, tmp_path: Path
) -> None:
    least_privilege(private_postgres.url, private_redis.url)  # the roles compose gives
    with pytest.raises(StackError, match="superuser"):
        least_privilege(_superuser_url(private_postgres), private_redis.url)
    open_redis = RedisServer(tmp_path / "open")
    open_redis.start()
    try:
        with pytest.raises(StackError, match="without a password"):
            least_privilege(private_postgres.url, open_redis.url)
    finally:
        open_redis.stop()

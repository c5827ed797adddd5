from pathlib import Path

import pytest

from wakemark.shared.config import ConfigError, Settings


def test_defaults() -> None:
    s = Settings.from_env({})
    assert s.port == 37800 and s.host == "127.0.0.1"
    assert (
        s.backend == "sqlite" and s.sqlite_path == Path("~/.wakemark").expanduser() / "wakemark.db"
    )


def test_values_are_parsed() -> None:
    s = Settings.from_env(
        {
            "WAKEMARK_HOME": "/tmp/x",
            "WAKEMARK_PORT": "4000",
            "WAKEMARK_DATABASE_URL": "postgresql://u@h/db",
            "WAKEMARK_FUSION": "TUNED",
        }
    )
    assert s.home == Path("/tmp/x") and s.port == 4000 and s.fusion == "tuned"
    assert s.backend == "postgres"


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("WAKEMARK_PORT", "abc"),
        ("WAKEMARK_PORT", "70000"),
        ("WAKEMARK_DATABASE_URL", "mysql://x"),
        ("WAKEMARK_REDIS_URL", "http://x"),
        ("WAKEMARK_FUSION", "max"),
        ("WAKEMARK_HOME", " "),
    ],
)
def test_bad_value_names_the_variable(name: str, value: str) -> None:
    with pytest.raises(ConfigError) as err:
        Settings.from_env({name: value})
    assert str(err.value).startswith(f"{name}: ")
    assert "\n" not in str(err.value)

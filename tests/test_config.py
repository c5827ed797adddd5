from pathlib import Path

import pytest

from shared.config import ConfigError, Settings


def test_defaults() -> None:
    s = Settings.from_env({})
    assert s.port == 37800 and s.host == "127.0.0.1"
    assert s.backend == "sqlite" and s.sqlite_path == Path("~/.engram").expanduser() / "engram.db"


def test_values_are_parsed() -> None:
    s = Settings.from_env(
        {
            "ENGRAM_HOME": "/tmp/x",
            "ENGRAM_PORT": "4000",
            "ENGRAM_DATABASE_URL": "postgresql://u@h/db",
            "ENGRAM_FUSION": "TUNED",
        }
    )
    assert s.home == Path("/tmp/x") and s.port == 4000 and s.fusion == "tuned"
    assert s.backend == "postgres"


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("ENGRAM_PORT", "abc"),
        ("ENGRAM_PORT", "70000"),
        ("ENGRAM_DATABASE_URL", "mysql://x"),
        ("ENGRAM_REDIS_URL", "http://x"),
        ("ENGRAM_FUSION", "max"),
        ("ENGRAM_HOME", " "),
    ],
)
def test_bad_value_names_the_variable(name: str, value: str) -> None:
    with pytest.raises(ConfigError) as err:
        Settings.from_env({name: value})
    assert str(err.value).startswith(f"{name}: ")
    assert "\n" not in str(err.value)

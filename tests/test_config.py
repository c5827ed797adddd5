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


def test_the_former_data_directory_is_adopted_once(tmp_path: Path) -> None:
    from wakemark.shared import legacy

    old, new = tmp_path / ".engram", tmp_path / ".wakemark"
    old.mkdir()
    (old / "engram.db").write_bytes(b"db")
    (old / "engram.db-wal").write_bytes(b"wal")
    (old / "token").write_text("t")
    assert legacy.adopt_home(new, legacy=old)
    assert not old.exists()
    assert (new / "wakemark.db").read_bytes() == b"db"
    assert (new / "wakemark.db-wal").read_bytes() == b"wal"
    assert (new / "token").read_text() == "t"
    # Both exist (or only the new one): nothing moves again.
    old.mkdir()
    assert not legacy.adopt_home(new, legacy=old)
    assert old.exists() and (new / "wakemark.db").exists()

"""Docs that cannot drift: every setting is documented in the README."""

from pathlib import Path

from shared.config import documented_settings

README = (Path(__file__).resolve().parents[1] / "README.md").read_text()


def test_every_setting_is_in_the_readme() -> None:
    missing = [name for name, _ in documented_settings() if f"`{name}`" not in README]
    assert missing == []


def test_readme_opens_with_the_two_commands() -> None:
    head = README.split("\n## ", 1)[0]
    assert "make run" in head and "make test" in head

"""Bad arguments are the parser's one-line usage error (exit 2), caught before a command
opens the database or calls the server; a known failure is one line whatever its text.
In-process: every case here fails before anything is opened."""

from __future__ import annotations

from pathlib import Path

import pytest

from wakemark.services.cli import main as cli
from wakemark.shared.storage import StorageError


def _error(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    with pytest.raises(SystemExit) as exit_:
        cli.main(list(argv))
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    return err.splitlines()[-1]


@pytest.mark.parametrize(
    "argv",
    [
        ["stats", "--namespace", "bogus"],
        ["backfill", "--namespace", "bogus"],
        ["export", "--namespace", "/actor/"],
    ],
)
def test_a_malformed_namespace_is_a_usage_error(
    capsys: pytest.CaptureFixture[str], argv: list[str]
) -> None:
    line = _error(capsys, *argv)
    assert f"wakemark {argv[0]}: error: argument --namespace: expected /actor/" in line


@pytest.mark.parametrize(
    "argv",
    [["audit", "--limit", "-5"], ["backfill", "--batch", "0"], ["service", "logs", "-n", "0"]],
)
def test_a_count_below_one_is_a_usage_error(
    capsys: pytest.CaptureFixture[str], argv: list[str]
) -> None:
    assert "expected a positive integer, got" in _error(capsys, *argv)


def test_a_missing_import_file_is_path_and_reason(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    missing = tmp_path / "missing.jsonl"
    assert cli.main(["import", str(missing)]) == 2
    assert capsys.readouterr().err == f"wakemark import: {missing}: No such file or directory\n"


def test_a_multi_line_failure_is_printed_on_one_line(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # psycopg's connection errors carry a hint on a second, indented line.
    def refused(_args: object) -> int:
        raise StorageError("connection refused\n\tIs the server running on that host?")

    monkeypatch.setattr(cli.COMMANDS["migrate"], "run", refused)
    assert cli.main(["migrate"]) == 1
    err = capsys.readouterr().err
    assert err == (
        "wakemark: database error: connection refused; Is the server running on that host?\n"
    )


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["serve", "--port", "99999"], "argument --port: expected an integer from 1 to 65535"),
        (["serve", "--port", "http"], "argument --port: expected an integer, got 'http'"),
        (["serve", "--workers", "0"], "argument --workers: expected an integer from 1 to 64"),
    ],
)
def test_a_flag_standing_for_a_setting_is_checked_as_the_flag(
    capsys: pytest.CaptureFixture[str], argv: list[str], expected: str
) -> None:
    # serve passes its flags on through the environment; the error names the flag typed.
    line = _error(capsys, *argv)
    assert expected in line
    assert "WAKEMARK_" not in line


@pytest.mark.parametrize(
    "argv",
    [
        ["install", "claude-code", "--project"],
        ["uninstall", "claude-code", "--project"],
        ["pause", "--project"],
        ["resume", "--project"],
        ["mcp", "--project"],
    ],
)
def test_a_project_directory_that_is_not_there_is_a_usage_error(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, argv: list[str]
) -> None:
    # A typo is refused: install would have created the directory and written its config.
    missing = tmp_path / "typo"
    line = _error(capsys, *argv, str(missing))
    assert f"argument --project: no such directory: '{missing}'" in line
    assert not missing.exists()

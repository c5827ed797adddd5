"""`wakemark install/uninstall` as real subprocesses on a temporary HOME."""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

AGENTS = ["claude-code", "kiro-cli", "gemini-cli", "codex", "cursor"]
FOREIGN_STOP = {"hooks": [{"type": "command", "command": "notify-send done"}]}


pytestmark = pytest.mark.slow


def _wakemark(home: Path, *args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("WAKEMARK_")}
    env.update(HOME=str(home), WAKEMARK_HOME=str(home / ".wakemark"))
    return subprocess.run(
        [sys.executable, "-m", "wakemark.services.cli.main", *args],
        env=env, cwd=cwd or home, capture_output=True, text=True, timeout=60,
    )  # fmt: skip


def _snapshot(root: Path) -> dict[str, str]:
    return {
        str(p.relative_to(root)): p.read_text()
        for p in sorted(root.rglob("*"))
        if p.is_file() and "wakemark-backup" not in p.name and ".wakemark" not in p.parts
    }


def _ours(text: str) -> bool:
    return "forwarder/hook.py" in text or '"wakemark"' in text or "/v1/hooks/" in text


@pytest.mark.parametrize("agent", AGENTS)
def test_install_is_idempotent_and_uninstall_removes_it(tmp_path: Path, agent: str) -> None:
    home = tmp_path / "home"
    home.mkdir()
    first = _wakemark(home, "install", agent)
    assert first.returncode == 0, first.stderr
    installed = _snapshot(home)
    assert installed and any(_ours(text) for text in installed.values())
    again = _wakemark(home, "install", agent)
    assert again.returncode == 0 and "nothing to change" in again.stdout
    assert _snapshot(home) == installed
    gone = _wakemark(home, "uninstall", agent)
    assert gone.returncode == 0, gone.stderr
    assert not any(_ours(text) for text in _snapshot(home).values())


def test_claude_code_keeps_foreign_entries_and_backs_up(tmp_path: Path) -> None:
    home = tmp_path / "home"
    settings = home / ".claude" / "settings.json"
    settings.parent.mkdir(parents=True)
    original = {"model": "opus", "hooks": {"Stop": [FOREIGN_STOP]}, "env": {"FOO": "1"}}
    settings.write_text(json.dumps(original))
    assert _wakemark(home, "install", "claude-code").returncode == 0
    assert _wakemark(home, "install", "claude-code").returncode == 0
    data = json.loads(settings.read_text())
    token = (home / ".wakemark" / "token").read_text().strip()
    assert data["model"] == "opus"
    assert data["env"] == {"FOO": "1", "WAKEMARK_TOKEN": token}
    assert data["hooks"]["Stop"][0] == FOREIGN_STOP
    for event in ("UserPromptSubmit", "PostToolUse", "PostToolUseFailure", "Stop"):
        [ours] = [g for g in data["hooks"][event] if g != FOREIGN_STOP]
        [handler] = ours["hooks"]
        assert handler["type"] == "http"
        assert handler["url"].endswith("/v1/hooks/claude-code")
        assert handler["headers"]["Authorization"] == "Bearer $WAKEMARK_TOKEN"
        assert set(handler["allowedEnvVars"]) == {"WAKEMARK_TOKEN", "CLAUDE_PROJECT_DIR"}
    [start] = data["hooks"]["SessionStart"]
    assert start["hooks"][0]["type"] == "command"
    assert start["hooks"][0]["command"].endswith("forwarder/hook.py claude-code SessionStart")
    mcp = json.loads((home / ".claude.json").read_text())["mcpServers"]["wakemark"]
    assert mcp["args"] == ["mcp"]
    backups = list(settings.parent.glob("settings.json.wakemark-backup-*"))
    assert len(backups) == 1 and json.loads(backups[0].read_text()) == original
    assert _wakemark(home, "uninstall", "claude-code").returncode == 0
    assert json.loads(settings.read_text()) == original


def test_dry_run_writes_nothing(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    out = _wakemark(home, "install", "claude-code", "--dry-run")
    assert out.returncode == 0, out.stderr
    assert "+++ " in out.stdout and "/v1/hooks/claude-code" in out.stdout
    assert list(home.rglob("*")) == []  # not even the token file


def test_dry_run_masks_the_token(tmp_path: Path) -> None:
    home = tmp_path / "home"
    (home / ".wakemark").mkdir(parents=True, mode=0o700)
    token = "wm-secret-" + "x" * 20
    (home / ".wakemark" / "token").write_text(token + "\n")
    out = _wakemark(home, "install", "claude-code", "--dry-run")
    assert out.returncode == 0, out.stderr
    assert token not in out.stdout
    assert '"WAKEMARK_TOKEN": "<token>"' in out.stdout


def test_project_install_goes_into_the_project(tmp_path: Path) -> None:
    home = tmp_path / "home"
    repo = tmp_path / "repo"
    (repo / ".git").mkdir(parents=True)
    (repo / "src").mkdir()
    home.mkdir()
    out = _wakemark(home, "install", "claude-code", "--project", cwd=repo / "src")
    assert out.returncode == 0, out.stderr
    # The token-carrying file is the git-ignored local one, never settings.json.
    assert (repo / ".claude" / "settings.local.json").exists()
    assert not (repo / ".claude" / "settings.json").exists()
    assert "wakemark" in json.loads((repo / ".mcp.json").read_text())["mcpServers"]
    assert not (home / ".claude").exists()


def test_codex_toml_keeps_the_users_notify_and_text(tmp_path: Path) -> None:
    home = tmp_path / "home"
    config = home / ".codex" / "config.toml"
    config.parent.mkdir(parents=True)
    original = 'notify = ["say", "done"]\nmodel = "gpt-5"\n\n[mcp_servers.other]\ncommand = "x"\n'
    config.write_text(original)
    assert _wakemark(home, "install", "codex").returncode == 0
    assert _wakemark(home, "install", "codex").returncode == 0
    parsed = tomllib.loads(config.read_text())
    assert parsed["notify"] == ["say", "done"]
    assert parsed["mcp_servers"]["wakemark"]["args"] == ["mcp"]
    assert parsed["mcp_servers"]["other"] == {"command": "x"}
    assert config.read_text().count("[mcp_servers.wakemark]") == 1
    assert _wakemark(home, "uninstall", "codex").returncode == 0
    assert config.read_text().strip() == original.strip()


def test_codex_notify_is_added_when_free(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    assert _wakemark(home, "install", "codex").returncode == 0
    notify = tomllib.loads((home / ".codex" / "config.toml").read_text())["notify"]
    assert notify[-2:] == ["codex", "notify"] and notify[1:4] == ["-S", "-E", "-s"]


def test_a_broken_config_is_left_alone(tmp_path: Path) -> None:
    home = tmp_path / "home"
    settings = home / ".gemini" / "settings.json"
    settings.parent.mkdir(parents=True)
    settings.write_text("{broken")
    out = _wakemark(home, "install", "gemini-cli")
    assert out.returncode == 1 and "cannot parse" in out.stderr
    assert settings.read_text() == "{broken"


def test_cursor_registers_session_start(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    assert _wakemark(home, "install", "cursor").returncode == 0
    hooks = json.loads((home / ".cursor" / "hooks.json").read_text())["hooks"]
    assert set(hooks) == {
        "sessionStart",
        "beforeSubmitPrompt",
        "afterShellExecution",
        "afterFileEdit",
        "afterAgentResponse",
    }
    [handler] = hooks["sessionStart"]
    # The event on the command line: some documented payloads do not name it.
    assert handler["command"].endswith("forwarder/hook.py cursor sessionStart")


# `engram install`, the installer before the rename, wrote these (see the fixture's README).
ENGRAM = Path(__file__).resolve().parents[1] / "fixtures" / "engram-install"
FOREIGN_ENGRAM_MCP = {"command": "npx", "args": ["-y", "engram-notes"]}  # another tool's


def _old_home(tmp_path: Path) -> Path:
    home = tmp_path / "home"
    shutil.copytree(ENGRAM, home)
    (home / "README.md").unlink()
    return home


def _leftovers(home: Path) -> dict[str, str]:
    """Files (backups aside) still mentioning the old name."""
    return {
        name: text
        for name, text in _snapshot(home).items()
        if "engram" in text.lower() and ".engram-backup-" not in name
    }


@pytest.mark.parametrize("agent", AGENTS)
def test_install_replaces_what_engram_install_wrote(tmp_path: Path, agent: str) -> None:
    home = _old_home(tmp_path)
    before = _snapshot(home)
    out = _wakemark(home, "install", agent)
    assert out.returncode == 0, out.stderr
    after = _snapshot(home)
    changed = {name for name in before if after.get(name) != before[name]}
    assert changed and not changed & set(_leftovers(home))  # each file touched is clean
    assert all(_ours(after[name]) for name in changed if name in after)
    # Other agents' files are not this install's business.
    assert all(_agent_dir(name) == _agent_dir(next(iter(changed))) for name in changed)
    gone = _wakemark(home, "uninstall", agent)
    assert gone.returncode == 0, gone.stderr
    assert not any(_ours(text) for name, text in _snapshot(home).items() if name in changed)


def _agent_dir(name: str) -> str:
    return {".claude.json": ".claude"}.get(name, name.split("/")[0])


def test_every_old_entry_goes_and_only_those(tmp_path: Path) -> None:
    home = _old_home(tmp_path)
    claude = home / ".claude" / "settings.json"
    settings = json.loads(claude.read_text())
    settings["hooks"]["Stop"].append(FOREIGN_STOP)
    settings["env"]["FOO"] = "1"
    claude.write_text(json.dumps(settings))
    mcp = json.loads((home / ".cursor" / "mcp.json").read_text())
    (home / ".cursor" / "mcp.json").write_text(
        json.dumps({"mcpServers": {"x": {}, **mcp["mcpServers"]}})
    )
    gemini = home / ".gemini" / "settings.json"
    gemini.write_text(json.dumps({"mcpServers": {"engram": FOREIGN_ENGRAM_MCP}}))
    backup = home / ".claude" / "settings.json.engram-backup-20261130T120000"
    backup.write_text("{}")
    for agent in AGENTS:
        assert _wakemark(home, "install", agent).returncode == 0
    assert set(_leftovers(home)) == {".gemini/settings.json"}  # another tool named so
    assert json.loads(gemini.read_text())["mcpServers"]["engram"] == FOREIGN_ENGRAM_MCP
    assert not (home / ".kiro" / "agents" / "engram.json").exists()  # only our skeleton left
    assert (home / ".kiro" / "agents" / "wakemark.json").exists()
    settings = json.loads(claude.read_text())
    assert settings["hooks"]["Stop"][0] == FOREIGN_STOP
    assert set(settings["env"]) == {"FOO", "WAKEMARK_TOKEN"}
    assert set(json.loads((home / ".cursor" / "mcp.json").read_text())["mcpServers"]) == {
        "x",
        "wakemark",
    }
    codex = tomllib.loads((home / ".codex" / "config.toml").read_text())
    assert codex["notify"][-2:] == ["codex", "notify"] and set(codex["mcp_servers"]) == {"wakemark"}
    assert backup.read_text() == "{}"  # backups are the user's, whatever their name


@pytest.mark.parametrize("agent", AGENTS)
def test_uninstall_alone_removes_what_engram_install_wrote(tmp_path: Path, agent: str) -> None:
    home = _old_home(tmp_path)
    out = _wakemark(home, "uninstall", agent)
    assert out.returncode == 0, out.stderr
    left = {_agent_dir(name) for name in _leftovers(home)}
    assert _agent_dir(_first_file_of(agent)) not in left
    assert len(left) == len(AGENTS) - 1  # the other agents' old files are still there


def _first_file_of(agent: str) -> str:
    return {
        "claude-code": ".claude/settings.json",
        "kiro-cli": ".kiro/agents/engram.json",
        "gemini-cli": ".gemini/settings.json",
        "codex": ".codex/config.toml",
        "cursor": ".cursor/hooks.json",
    }[agent]


def test_a_file_that_gets_the_token_becomes_0600_and_so_does_its_backup(tmp_path: Path) -> None:
    home = tmp_path / "home"
    settings = home / ".claude" / "settings.json"
    settings.parent.mkdir(parents=True)
    settings.write_text(json.dumps({"model": "opus"}))
    settings.chmod(0o644)  # what an editor or Claude Code itself usually leaves
    done = _wakemark(home, "install", "claude-code")
    assert done.returncode == 0, done.stderr
    token = (home / ".wakemark" / "token").read_text().strip()
    assert json.loads(settings.read_text())["env"]["WAKEMARK_TOKEN"] == token
    assert stat.S_IMODE(settings.stat().st_mode) == 0o600
    [backup] = settings.parent.glob("settings.json.wakemark-backup-*")
    assert stat.S_IMODE(backup.stat().st_mode) == 0o600
    assert json.loads(backup.read_text()) == {"model": "opus"}


def test_a_file_without_the_token_keeps_its_mode(tmp_path: Path) -> None:
    home = tmp_path / "home"
    hooks = home / ".codex" / "hooks.json"
    hooks.parent.mkdir(parents=True)
    hooks.write_text("{}")
    hooks.chmod(0o644)
    assert _wakemark(home, "install", "codex").returncode == 0
    assert "forwarder/hook.py" in hooks.read_text() and "wmk" not in hooks.read_text()
    assert stat.S_IMODE(hooks.stat().st_mode) == 0o644


def test_a_symlink_planted_at_the_temporary_path_is_not_followed(tmp_path: Path) -> None:
    from wakemark.services.cli import install

    target = tmp_path / "settings.json"
    target.write_text("{}")
    victim = tmp_path / "victim"
    victim.write_text("keep me")
    planted = Path(f"{target}.wakemark-tmp-{os.getpid()}")
    planted.symlink_to(victim)
    with pytest.raises(FileExistsError):
        install._write(str(target), "{}", '{"env": {"WAKEMARK_TOKEN": "t"}}', "t")
    assert victim.read_text() == "keep me" and target.read_text() == "{}"
    assert planted.is_symlink()  # left for the user to look at, not written through
    planted.unlink()
    install._write(str(target), "{}", '{"env": {"WAKEMARK_TOKEN": "t"}}', "t")
    assert json.loads(target.read_text()) == {"env": {"WAKEMARK_TOKEN": "t"}}
    assert stat.S_IMODE(target.stat().st_mode) == 0o600

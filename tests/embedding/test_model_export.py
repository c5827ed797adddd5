"""``wakemark model export`` through the real CLI in a subprocess, and export validity."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from wakemark.shared.embedding import Embedder, is_valid_export
from wakemark.shared.embedding.export import manifest_path


def _wakemark(*args: str, home: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "WAKEMARK_HOME": str(home), "HF_HUB_OFFLINE": "1"}
    env.pop("WAKEMARK_MODEL_PATH", None)
    return subprocess.run(
        [sys.executable, "-m", "wakemark.services.cli.main", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )


@pytest.fixture
def exported_copy(tmp_path: Path, onnx_model_path: Path) -> Path:
    """The session export copied into a home's default model location."""
    dest = tmp_path / "home" / "models" / onnx_model_path.name
    shutil.copytree(onnx_model_path.parent, dest.parent)
    return dest


def test_session_export_is_valid_and_verified(onnx_model_path: Path) -> None:
    assert is_valid_export(onnx_model_path)
    manifest = json.loads(manifest_path(onnx_model_path).read_text())
    assert manifest["min_cosine"] >= 0.9999 and manifest["opset"] >= 14
    assert not list(onnx_model_path.parent.glob(".export-*"))  # no temp files left behind


def test_cli_is_a_noop_when_present(exported_copy: Path) -> None:
    before = exported_copy.stat().st_mtime_ns
    done = _wakemark("model", "export", home=exported_copy.parent.parent)
    assert done.returncode == 0, done.stderr
    assert f"model already exported: {exported_copy}" in done.stdout
    assert exported_copy.stat().st_mtime_ns == before
    quiet = _wakemark("model", "export", "--quiet", home=exported_copy.parent.parent)
    assert quiet.returncode == 0 and quiet.stdout == ""


def test_cli_exports_when_invalid_then_embeds(exported_copy: Path) -> None:
    # A truncated model no longer matches its manifest: export runs again, for real.
    with exported_copy.open("r+b") as f:
        f.truncate(1000)
    assert not is_valid_export(exported_copy)
    done = _wakemark("model", "export", "--quiet", home=exported_copy.parent.parent)
    assert done.returncode == 0, done.stderr
    assert f"exported model to {exported_copy}" in done.stdout
    assert is_valid_export(exported_copy)
    assert Embedder(exported_copy).embed_query("round trip").shape == (384,)


def test_cli_dest_and_force(tmp_path: Path, onnx_model_path: Path) -> None:
    dest = tmp_path / "elsewhere" / "model.onnx"
    shutil.copytree(onnx_model_path.parent, dest.parent)
    (dest.parent / onnx_model_path.name).rename(dest)
    (dest.parent / manifest_path(onnx_model_path).name).rename(manifest_path(dest))
    before = dest.stat().st_mtime_ns
    done = _wakemark("model", "export", "--dest", str(dest), "--force", home=tmp_path / "h")
    assert done.returncode == 0, done.stderr
    assert dest.stat().st_mtime_ns != before and is_valid_export(dest)
    assert not (tmp_path / "h" / "models").exists()  # --dest wins over the home default

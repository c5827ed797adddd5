"""The word-embedding table left in the model file: the same vectors, bit for bit."""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime as ort
import pytest

from tests.embedding.test_embedder import TEXTS
from wakemark.shared.embedding import DIM, Embedder, Model
from wakemark.shared.embedding.export import build_model
from wakemark.shared.embedding.words import TABLE, load_session, split_model

VOCAB = 40
FFN = 4 * DIM


def _weights(seed: int = 3) -> dict[str, np.ndarray]:
    """Random weights of a one-layer BERT of this model's width (shapes as safetensors)."""
    rng = np.random.default_rng(seed)
    shapes = {
        "embeddings.word_embeddings.weight": (VOCAB, DIM),
        "embeddings.token_type_embeddings.weight": (2, DIM),
        "embeddings.position_embeddings.weight": (64, DIM),
    }
    layer = "encoder.layer.0"
    for part in ("self.query", "self.key", "self.value", "output.dense"):
        shapes[f"{layer}.attention.{part}.weight"] = (DIM, DIM)
        shapes[f"{layer}.attention.{part}.bias"] = (DIM,)
    shapes[f"{layer}.intermediate.dense.weight"] = (FFN, DIM)
    shapes[f"{layer}.intermediate.dense.bias"] = (FFN,)
    shapes[f"{layer}.output.dense.weight"] = (DIM, FFN)
    shapes[f"{layer}.output.dense.bias"] = (DIM,)
    for norm in ("embeddings", f"{layer}.attention.output", f"{layer}.output"):
        shapes[f"{norm}.LayerNorm.weight"] = (DIM,)
        shapes[f"{norm}.LayerNorm.bias"] = (DIM,)
    return {k: rng.standard_normal(s).astype(np.float32) * 0.1 for k, s in shapes.items()}


def _save(path: Path, **kwargs: Any) -> Path:
    path.write_bytes(build_model(_weights(), layers=1, **kwargs).SerializeToString())
    return path


def _feed(rng: np.random.Generator, batch: int, width: int) -> dict[str, np.ndarray]:
    ids = rng.integers(0, VOCAB, size=(batch, width), dtype=np.int64)
    mask = np.ones_like(ids)
    mask[0, width // 2 :] = 0  # a padded row
    ids[0, width // 2 :] = 0
    return {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)}


def _run(session: Any, feed: dict[str, np.ndarray]) -> np.ndarray:
    return np.asarray(session.run(["last_hidden_state"], feed)[0])


@pytest.mark.parametrize("memfd", [True, False])
def test_a_session_without_the_table_gives_the_same_floats(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, memfd: bool
) -> None:
    if not memfd:  # as on macOS: onnxruntime gets the bytes
        monkeypatch.delattr(os, "memfd_create", raising=False)
    path = _save(tmp_path / "m.onnx")
    whole = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    session, words = load_session(path, ort.SessionOptions())
    assert words is not None and (words.rows, words.width) == (VOCAB, DIM)
    assert TABLE in {i.name for i in session.get_inputs()}
    rng = np.random.default_rng(5)
    for batch, width in ((1, 1), (1, 7), (3, 12), (4, 33)):
        feed = _feed(rng, batch, width)
        expected = _run(whole, feed)
        got = _run(session, {**feed, **words.feed(feed["input_ids"])})
        assert got.tobytes() == expected.tobytes()


def test_token_ids_outside_the_table_are_refused(tmp_path: Path) -> None:
    _, words = load_session(_save(tmp_path / "m.onnx"), ort.SessionOptions())
    assert words is not None
    with pytest.raises(ValueError, match="outside"):
        words.feed(np.array([[1, VOCAB]], dtype=np.int64))


def _words_twice(g: Any, weights: dict[str, np.ndarray]) -> str:
    # The table read by a second node: feeding it a few rows would change that node's answer.
    table = g.const(TABLE, weights["embeddings.word_embeddings.weight"])
    looked_up = g.op("Gather", table, "input_ids")
    return str(g.op("Add", looked_up, g.op("ReduceMean", table, axes=[0], keepdims=0)))


def _words_renamed(g: Any, weights: dict[str, np.ndarray]) -> str:
    return str(
        g.op("Gather", g.const("vocab", weights["embeddings.word_embeddings.weight"]), "input_ids")
    )


@pytest.mark.parametrize("words", [_words_twice, _words_renamed])
def test_a_model_with_another_lookup_loads_whole(tmp_path: Path, words: Any) -> None:
    path = _save(tmp_path / "m.onnx", words=words)
    assert split_model(path) is None
    session, table = load_session(path, ort.SessionOptions())
    assert table is None
    whole = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    feed = _feed(np.random.default_rng(1), 2, 9)
    assert _run(session, feed).tobytes() == _run(whole, feed).tobytes()


@pytest.mark.parametrize("data", [b"", b"\x0a\xff", b"not a model at all" * 10])
def test_a_file_that_is_no_model_is_left_to_onnxruntime(tmp_path: Path, data: bytes) -> None:
    (tmp_path / "m.onnx").write_bytes(data)
    assert split_model(tmp_path / "m.onnx") is None


def test_the_embedder_embeds_bit_for_bit_from_the_table_in_the_file(
    tmp_path: Path, onnx_model_path: Path
) -> None:
    for name in ("tokenizer.json", f"{onnx_model_path.name}.json", onnx_model_path.name):
        shutil.copy(onnx_model_path.parent / name, tmp_path / name)
    model = tmp_path / onnx_model_path.name
    embedder = Embedder(model)
    loaded = embedder.model()
    assert loaded.words is not None and loaded.words.rows == 30522
    whole = ort.InferenceSession(str(model), providers=["CPUExecutionProvider"])
    encodings = loaded.tokenizer.encode_batch(TEXTS)
    for batch in [[e] for e in encodings] + [encodings]:
        got = Model.run(loaded.session, loaded.words, batch)
        assert got.tobytes() == Model.run(whole, None, batch).tobytes()
    # A new export replacing the file changes nothing this session reads.
    before = embedder.embed(TEXTS)
    replacement = tmp_path / "new.onnx"
    replacement.write_bytes(bytes(model.stat().st_size))
    os.replace(replacement, model)
    assert embedder.embed(TEXTS).tobytes() == before.tobytes()

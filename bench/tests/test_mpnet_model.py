"""all-mpnet-base-v2's graph on a small MPNet made here (the real weights are 438 MB): the
relative position buckets, positions counted from the mask, and the encoder against a
numpy forward pass of the same weights."""

from __future__ import annotations

import json
import math
import struct

import numpy as np
import onnxruntime as ort

from bench import _mpnet_model

WIDTH, FFN, VOCAB, POSITIONS = 24, 48, 40, 64  # 12 heads of 2


def test_buckets_as_mpnet_computes_them() -> None:
    # Offsets are key - query: keys before the query take buckets 0..15, keys after 16..31;
    # exact below 8, then logarithmic up to 128, then the last bucket of the direction.
    offsets = [-1000, -128, -64, -16, -15, -9, -8, -7, -1, 0, 1, 7, 8, 16, 128, 1000]
    expected = [15, 15, 14, 10, 9, 8, 8, 7, 1, 0, 17, 23, 24, 26, 31, 31]
    assert _mpnet_model.bucket(np.array(offsets)).tolist() == expected


def _safetensors(tensors: dict[str, np.ndarray]) -> bytes:
    header, body, at = {}, b"", 0
    for name, array in tensors.items():
        raw = array.astype("<f4").tobytes()
        header[name] = {
            "dtype": "F32",
            "shape": list(array.shape),
            "data_offsets": [at, at + len(raw)],
        }
        body, at = body + raw, at + len(raw)
    text = json.dumps(header).encode()
    return struct.pack("<Q", len(text)) + text + body


def _mpnet_weights() -> dict[str, np.ndarray]:
    """Random weights under MPNet's own names (one layer)."""
    rng = np.random.default_rng(7)
    layer = "encoder.layer.0"
    square, vector = (WIDTH, WIDTH), (WIDTH,)
    shapes: dict[str, tuple[int, ...]] = {
        "embeddings.word_embeddings.weight": (VOCAB, WIDTH),
        "embeddings.position_embeddings.weight": (POSITIONS, WIDTH),
        "encoder.relative_attention_bias.weight": (_mpnet_model.BUCKETS, 12),
        **{f"{layer}.attention.attn.{p}.weight": square for p in "qkvo"},
        **{f"{layer}.attention.attn.{p}.bias": vector for p in "qkvo"},
        f"{layer}.intermediate.dense.weight": (FFN, WIDTH),
        f"{layer}.intermediate.dense.bias": (FFN,),
        f"{layer}.output.dense.weight": (WIDTH, FFN),
        f"{layer}.output.dense.bias": vector,
        **{
            f"{n}.LayerNorm.{p}": vector
            for n in ("embeddings", f"{layer}.attention", f"{layer}.output")
            for p in ("weight", "bias")
        },
    }
    return {k: rng.standard_normal(s).astype(np.float32) for k, s in shapes.items()}


def _forward(w: dict[str, np.ndarray], ids: list[int]) -> np.ndarray:
    """MPNet's forward pass of one unpadded sequence, written out from its definition."""

    def norm(x: np.ndarray, name: str) -> np.ndarray:
        mu, var = x.mean(-1, keepdims=True), x.var(-1, keepdims=True)
        return (x - mu) / np.sqrt(var + _mpnet_model.EPS) * w[f"{name}.weight"] + w[f"{name}.bias"]

    def linear(x: np.ndarray, name: str) -> np.ndarray:
        return x @ w[f"encoder.layer.0.{name}.weight"].T + w[f"encoder.layer.0.{name}.bias"]

    n = len(ids)
    positions = np.arange(n) + _mpnet_model.PAD + 1
    x = w["embeddings.word_embeddings.weight"][ids]
    x = norm(x + w["embeddings.position_embeddings.weight"][positions], "embeddings.LayerNorm")
    offsets = np.arange(n)[None, :] - np.arange(n)[:, None]
    bias = w["encoder.relative_attention_bias.weight"][_mpnet_model.bucket(offsets)]
    q, k, v = (
        linear(x, f"attention.attn.{p}").reshape(n, 12, -1).transpose(1, 0, 2) for p in "qkv"
    )
    scores = q @ k.transpose(0, 2, 1) / math.sqrt(q.shape[-1]) + bias.transpose(2, 0, 1)
    attn = np.exp(scores - scores.max(-1, keepdims=True))
    attn /= attn.sum(-1, keepdims=True)
    context = (attn @ v).transpose(1, 0, 2).reshape(n, WIDTH)
    x = norm(linear(context, "attention.attn.o") + x, "encoder.layer.0.attention.LayerNorm")
    h = linear(x, "intermediate.dense")
    h = h * (1 + np.vectorize(math.erf)(h / math.sqrt(2))) / 2
    return norm(linear(h, "output.dense") + x, "encoder.layer.0.output.LayerNorm")


def test_graph_matches_the_forward_pass_with_padding() -> None:
    raw = _mpnet_weights()
    model = _mpnet_model.build_model(_mpnet_model.weights_from(_safetensors(raw)), layers=1)
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    long, short = [0, 5, 9, 13, 21, 33, 2], [0, 17, 4, 2]
    ids = np.zeros((2, len(long)), dtype=np.int64)  # Embedder pads with id 0
    ids[0], ids[1, : len(short)] = long, short
    mask = (np.arange(len(long))[None, :] < [[len(long)], [len(short)]]).astype(np.int64)
    feed = {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)}
    (hidden,) = session.run(["last_hidden_state"], feed)
    # The padded row's real tokens are as if it stood alone: positions come from the mask,
    # padding takes no attention.
    np.testing.assert_allclose(hidden[0], _forward(raw, long), atol=2e-5)
    np.testing.assert_allclose(hidden[1, : len(short)], _forward(raw, short), atol=2e-5)

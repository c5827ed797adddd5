"""The ONNX embedder against sentence-transformers' vectors, plus its states and fork safety."""

from __future__ import annotations

import base64
import json
import multiprocessing
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from wakemark.shared.config import Settings
from wakemark.shared.embedding import DIM, MAX_TOKENS, Embedder, EmbedderUnavailable, open_embedder

LONG = " ".join(
    f"step {i}: ran pytest -q tests/storage and fixed the flaky assertion" for i in range(60)
)
TEXTS = [
    "fix the flaky test in the retry loop",
    "Postgres connection pool exhausted under load; raised max_size to 20",
    "How do I configure WAL mode and busy_timeout for SQLite?",
    "ran `make test`: 42 passed, 1 failed (tests/api/test_ingest.py::test_limits)",
    "Edited shared/storage/sqlite/queries.py to escape LIKE wildcards",
    "TypeError: unsupported operand type(s) for +: 'int' and 'NoneType'",
    "ünïcödé — naïve café résumé",
    "日本語のテキストも埋め込めるか確認する",
    "Проверка кириллицы в памяти агента",
    "emoji in commit messages 🚀🔥✅",
    "مرحبا بالعالم",
    "a",
    "",
    "   ",
    "SELECT record_id FROM memory_records WHERE namespace LIKE ? ESCAPE '\\'",
    "def embed(texts: Sequence[str]) -> np.ndarray: ...",
    "https://example.invalid/some/path?query=1&other=two#frag",
    "The quick brown fox jumps over the lazy dog. " * 5,
    "gunicorn --max-requests 1000 --max-requests-jitter 100 -w 2",
    LONG,  # far more than 256 tokens: truncated exactly like sentence-transformers
    "word " * 600,
    "\n\t mixed\twhitespace\n\nand newlines\r\n",
    "CamelCaseIdentifiersAndsnake_case_names_with_numbers_123",
]


# Written once by scripts/embedding-reference.py with sentence-transformers (torch): 240
# varied texts and 25 queries with their vectors, so the suite itself needs no torch.
REFERENCE = Path(__file__).resolve().parents[1] / "fixtures" / "embedding_reference.json"


def _vectors(encoded: str) -> np.ndarray:
    return np.frombuffer(base64.b64decode(encoded), dtype="<f4").reshape(-1, DIM)


@pytest.fixture(scope="module")
def reference() -> dict[str, Any]:
    data = json.loads(REFERENCE.read_text())
    data["vectors"] = _vectors(data["vectors_f32le_base64"])
    data["query_vectors"] = _vectors(data["query_vectors_f32le_base64"])
    return data


@pytest.fixture
def embedder(onnx_model_path: Path) -> Embedder:
    return Embedder(onnx_model_path)


def test_vectors_match_sentence_transformers(embedder: Embedder, reference: Any) -> None:
    texts = reference["texts"]
    assert len(texts) >= 200 and LONG in texts and "" in texts
    tokenizer = embedder.model().tokenizer
    lengths = [len(tokenizer.encode(t).ids) for t in texts]
    assert lengths.count(MAX_TOKENS) >= 5  # several texts really truncated at the window
    got = embedder.embed(texts)
    assert got.shape == (len(texts), DIM) and got.dtype == np.float32
    cosines = np.sum(reference["vectors"] * got, axis=1)
    assert cosines.min() >= 0.9999, {
        t[:60]: c for t, c in zip(texts, cosines.round(6), strict=True) if c < 0.9999
    }
    np.testing.assert_allclose(np.linalg.norm(got, axis=1), 1.0, atol=1e-5)


def test_retrieval_top10_matches_sentence_transformers(embedder: Embedder, reference: Any) -> None:
    def top10(queries: np.ndarray, corpus: np.ndarray) -> list[list[int]]:
        return np.argsort(-(queries @ corpus.T), axis=1, kind="stable")[:, :10].tolist()

    expected = top10(reference["query_vectors"], reference["vectors"])
    got = top10(embedder.embed(reference["queries"]), embedder.embed(reference["texts"]))
    assert len(expected) >= 20
    assert got == expected


def test_batch_equals_one_by_one(onnx_model_path: Path) -> None:
    embedder = Embedder(onnx_model_path, batch_size=4)  # several length-sorted batches
    batched = embedder.embed(TEXTS)
    single = np.stack([embedder.embed_query(t) for t in TEXTS])
    np.testing.assert_allclose(batched, single, atol=1e-5)
    assert embedder.embed([]).shape == (0, DIM)


def test_manifest_prefixes_queries_and_stored_texts(tmp_path: Path, onnx_model_path: Path) -> None:
    # A model trained with prefixes (e5: "query: " / "passage: ") declares them in its
    # manifest; the embedder adds them, so callers never know which model runs.
    manifest = f"{onnx_model_path.name}.json"
    for name in (onnx_model_path.name, "tokenizer.json"):
        os.link(onnx_model_path.parent / name, tmp_path / name)
    data = json.loads((onnx_model_path.parent / manifest).read_text())
    prefixes = {"query_prefix": "query: ", "passage_prefix": "p: "}
    (tmp_path / manifest).write_text(json.dumps({**data, **prefixes}))
    prefixed, plain = Embedder(tmp_path / onnx_model_path.name), Embedder(onnx_model_path)
    query = plain.embed_query("query: pool exhausted")
    np.testing.assert_allclose(prefixed.embed_query("pool exhausted"), query, atol=1e-6)
    np.testing.assert_allclose(
        prefixed.embed(["pool exhausted"]), plain.embed(["p: pool exhausted"]), atol=1e-6
    )
    assert float(prefixed.embed_query("x") @ plain.embed_query("x")) < 0.9999


def test_distinct_texts_get_distinct_vectors(embedder: Embedder) -> None:
    a, b, c = embedder.embed(["postgres pool exhausted", "database connection pool ran out", "🚀"])
    assert float(a @ b) > float(a @ c)  # related texts are closer than unrelated ones


def test_lazy_until_first_use(onnx_model_path: Path) -> None:
    embedder = Embedder(onnx_model_path)
    assert embedder.state == "not_loaded" and embedder.reason is None
    embedder.warm()
    assert embedder.state == "ready"


def test_closing_waits_for_a_load_in_the_background(onnx_model_path: Path) -> None:
    # A process that exits while onnxruntime builds a session on another thread aborts
    # (SIGABRT): a server stopped as it starts. ``close`` (gunicorn's worker_exit, through
    # the runtime) waits for that load, so the exit is clean.
    code = (
        "import sys, time; from pathlib import Path; from wakemark.shared.embedding import "
        f"Embedder; e = Embedder(Path({str(onnx_model_path)!r})); e.warm_in_background();\n"
        "while 'onnxruntime' not in sys.modules: time.sleep(0.001)\n"
        "e.close(); print(e.state)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert (out.returncode, out.stdout.strip()) == (0, "ready"), out.stderr[-500:]


def test_missing_model_is_unavailable_without_raising(tmp_path: Path) -> None:
    settings = Settings(home=tmp_path, embedder="onnx")
    embedder = open_embedder(settings)  # constructing never raises
    assert embedder.state == "unavailable"
    assert embedder.reason is not None and "wakemark model export" in embedder.reason
    assert str(settings.onnx_model_path) in embedder.reason
    with pytest.raises(EmbedderUnavailable, match="wakemark model export"):
        embedder.embed_query("hello")


def test_model_appearing_later_is_picked_up(tmp_path: Path, onnx_model_path: Path) -> None:
    dest = tmp_path / "m" / onnx_model_path.name
    embedder = Embedder(dest)
    assert embedder.state == "unavailable"
    dest.parent.mkdir()
    for src in onnx_model_path.parent.iterdir():
        os.link(src, dest.parent / src.name)
    assert embedder.state == "not_loaded"
    assert embedder.embed_query("hello").shape == (DIM,)


def test_corrupt_model_is_unavailable_with_reason(tmp_path: Path, onnx_model_path: Path) -> None:
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"not an onnx graph")
    (tmp_path / "tokenizer.json").write_bytes(
        (onnx_model_path.parent / "tokenizer.json").read_bytes()
    )
    embedder = Embedder(bad)
    assert embedder.state == "not_loaded"
    with pytest.raises(EmbedderUnavailable, match="cannot load"):
        embedder.embed_query("hello")
    assert embedder.state == "unavailable" and "cannot load" in (embedder.reason or "")


def test_off(tmp_path: Path, onnx_model_path: Path) -> None:
    embedder = open_embedder(Settings(home=tmp_path, embedder="off", model_path=onnx_model_path))
    assert embedder.state == "off" and "off" in (embedder.reason or "")
    with pytest.raises(EmbedderUnavailable):
        embedder.embed(["x"])


def _embed_in_child(embedder: Embedder, queue: Any) -> None:
    try:
        queue.put((embedder.state, embedder.embed_query("fork safety").tolist()))
    except BaseException as exc:  # report instead of dying silently
        queue.put(("error", repr(exc)))


def test_fork_after_load_reloads_in_child(embedder: Embedder) -> None:
    parent = embedder.embed_query("fork safety")
    assert embedder.state == "ready"
    ctx = multiprocessing.get_context("fork")
    queue = ctx.Queue()
    child = ctx.Process(target=_embed_in_child, args=(embedder, queue))
    child.start()
    state, vector = queue.get(timeout=120)
    child.join(timeout=60)
    assert child.exitcode == 0
    assert state == "not_loaded"  # the parent's session is not reused after fork
    np.testing.assert_allclose(np.array(vector, dtype=np.float32), parent, atol=1e-6)
    assert embedder.state == "ready"  # the parent keeps its own


def test_nothing_heavy_is_imported_before_first_use(tmp_path: Path) -> None:
    # onnxruntime starts threads at import, and a process that imported it before fork
    # hangs in its exit handlers (onnxruntime PR #31961): prefork parents must not load it.
    code = (
        "import sys; from pathlib import Path; from wakemark.shared.embedding import Embedder;"
        f"e = Embedder(Path({str(tmp_path / 'm.onnx')!r})); e.state; e.reason;"
        "print(sorted(m for m in ('onnxruntime', 'tokenizers', 'torch') if m in sys.modules))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    assert out.stdout.strip() == "[]"


def test_batches_cover_every_text_within_budget() -> None:
    from wakemark.shared.embedding.onnx import BATCH_TOKENS
    from wakemark.shared.embedding.onnx import batches as batches_of

    lengths = [3, 256, 40, 256, 7, 120, 256, 256, 256, 256, 256, 256, 256, 9] * 5
    batches = batches_of(lengths, 8)
    assert sorted(i for b in batches for i in b) == list(range(len(lengths)))
    for batch in batches:
        width = max(lengths[i] for i in batch)
        assert len(batch) <= 8 and (len(batch) == 1 or len(batch) * width <= BATCH_TOKENS)

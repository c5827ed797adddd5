"""The run-time embedder: all-MiniLM-L6-v2 as ONNX on onnxruntime + tokenizers (no torch)."""

from __future__ import annotations

import ctypes
import hashlib
import json
import logging
import os
import threading
import weakref
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from wakemark.shared.embedding.words import WordTable, load_session
from wakemark.shared.heap import release_free_memory

log = logging.getLogger(__name__)

DIM = 384
MAX_TOKENS = 256  # the model's max_seq_length (sentence_bert_config.json), not the tokenizer's 128
BATCH_SIZE = 32
# Padded tokens per batch: attention memory grows with count x width^2, so long texts go
# in small batches, which also keeps the peak RSS of a worker low (and runs no slower).
BATCH_TOKENS = 2048

_instances: weakref.WeakSet[Embedder] = weakref.WeakSet()
_fork_hook_registered = False


class EmbedderUnavailable(RuntimeError):
    """The embedder is off or cannot load; callers degrade to lexical-only search."""


def tokenizer_path(model_path: Path) -> Path:
    """The tokenizer copy that ``export_onnx`` writes beside the model."""
    return model_path.parent / "tokenizer.json"


def manifest_path(model_path: Path) -> Path:
    return model_path.with_name(model_path.name + ".json")


def _prefixes(model_path: Path) -> tuple[str, str]:
    """(query, passage) prefixes the model was trained with, from its manifest: e5 models
    expect "query: " and "passage: "; all-MiniLM-L6-v2 none."""
    try:
        manifest = json.loads(manifest_path(model_path).read_text())
    except (OSError, ValueError):
        return "", ""
    if not isinstance(manifest, dict):
        return "", ""
    return str(manifest.get("query_prefix", "")), str(manifest.get("passage_prefix", ""))


def file_identity(model_path: Path) -> str:
    """The model's identity: a hash of its file's bytes. Stored beside the vectors it
    made, so that no process compares its query vectors with another model's (a
    re-export, a quantised copy or another model under the same path)."""
    digest = hashlib.sha256()
    with open(model_path, "rb") as f:
        while chunk := f.read(1 << 20):
            digest.update(chunk)
    return "sha256:" + digest.hexdigest()[:16]


def _after_fork_in_child() -> None:
    for embedder in list(_instances):
        # A lock held by another parent thread at fork time stays held forever in the child.
        embedder._lock = threading.Lock()
        if embedder._session is not None:
            _abandon(embedder._session)


def _abandon(session: Any) -> None:
    """Never free a session inherited through fork: its destructor joins thread-pool
    threads that do not exist in the child and hangs forever (seen with onnxruntime 1.32).
    Its memory is the parent's copy-on-write pages, so keeping it costs next to nothing."""
    ctypes.pythonapi.Py_IncRef(ctypes.py_object(session))


class Embedder:
    """Lazy: constructing loads nothing; the first ``embed``/``warm`` loads once per process.

    Fork-safe: a session loaded before a fork is not used (nor freed) in the child, which
    loads its own on first use.
    """

    def __init__(
        self,
        model_path: Path,
        *,
        enabled: bool = True,
        threads: int = 2,
        batch_size: int = BATCH_SIZE,
    ) -> None:
        global _fork_hook_registered
        self.model_path = Path(model_path)
        self.enabled = enabled
        self.threads = max(1, threads)
        self.batch_size = max(1, batch_size)
        self._lock = threading.Lock()
        self._session: Any = None
        self._tokenizer: Any = None
        self._words: WordTable | None = None
        self._query_prefix = ""
        self._passage_prefix = ""
        self._pid: int | None = None
        self._identity = ""
        self._error: str | None = None
        self._error_key: tuple[int, int] | None = None  # (pid, model mtime) of the failure
        _instances.add(self)
        if not _fork_hook_registered:
            os.register_at_fork(after_in_child=_after_fork_in_child)
            _fork_hook_registered = True

    # --- state ---------------------------------------------------------------------------
    @property
    def state(self) -> str:
        """``off``, ``not_loaded``, ``ready`` or ``unavailable`` (see ``reason``)."""
        if not self.enabled:
            return "off"
        if self._loaded():
            return "ready"
        return "unavailable" if self.reason else "not_loaded"

    @property
    def reason(self) -> str | None:
        """Why the embedder is off or unavailable; None when it is usable."""
        if not self.enabled:
            return "embedder is off (WAKEMARK_EMBEDDER=off)"
        if self._loaded():
            return None
        missing = self._missing_files()
        if missing:
            return missing
        # A failed load is remembered until the model file changes (or after a fork).
        if self._error is not None and self._error_key == self._file_key():
            return self._error
        return None

    def _loaded(self) -> bool:
        return self._session is not None and self._pid == os.getpid()

    def _missing_files(self) -> str | None:
        for path in (self.model_path, tokenizer_path(self.model_path)):
            if not path.is_file():
                return f"model file {path} is missing; run `wakemark model export`"
        return None

    def _file_key(self) -> tuple[int, int]:
        try:
            mtime = self.model_path.stat().st_mtime_ns
        except OSError:
            mtime = -1
        return (os.getpid(), mtime)

    # --- loading -------------------------------------------------------------------------
    def warm(self) -> None:
        """Load now (raises EmbedderUnavailable); e.g. in a worker right after fork."""
        self._ensure_loaded()

    def _ensure_loaded(self) -> tuple[Any, Any, WordTable | None]:
        if not self._loaded():
            with self._lock:
                if not self._loaded():
                    reason = self.reason
                    if reason:
                        raise EmbedderUnavailable(reason)
                    self._load()
        return self._session, self._tokenizer, self._words

    def _load(self) -> None:
        try:
            import onnxruntime as ort
            from tokenizers import Tokenizer

            tokenizer = Tokenizer.from_file(str(tokenizer_path(self.model_path)))
            tokenizer.enable_truncation(max_length=MAX_TOKENS)
            tokenizer.no_padding()  # we pad per length-sorted batch ourselves
            options = ort.SessionOptions()
            options.intra_op_num_threads = self.threads
            options.inter_op_num_threads = 1
            # Don't busy-spin between requests: API and worker processes share 2 cores.
            options.add_session_config_entry("session.intra_op.allow_spinning", "0")
            session, words = load_session(self.model_path, options)
            # Hashed once a load, beside it (the file is in the page cache by now), so a
            # process that never embeds never reads the file.
            identity = file_identity(self.model_path)
        except Exception as exc:
            self._error = f"cannot load {self.model_path}: {exc.__class__.__name__}: {exc}"
            self._error_key = self._file_key()
            log.warning("embedder unavailable: %s", self._error)
            raise EmbedderUnavailable(self._error) from exc
        self._query_prefix, self._passage_prefix = _prefixes(self.model_path)
        self._identity = identity  # before the session: another thread may see it loaded
        self._tokenizer, self._session, self._pid = tokenizer, session, os.getpid()
        self._words = words
        self._error = None
        release_free_memory()  # the parsed model file, freed once its weights are copied
        log.info("embedder loaded %s (pid %d)", self.model_path, self._pid)

    @property
    def identity(self) -> str:
        """The loaded model's ``file_identity`` (loads it; raises EmbedderUnavailable)."""
        self._ensure_loaded()
        return self._identity

    # --- embedding -----------------------------------------------------------------------
    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """L2-normalized float32 ``(len(texts), 384)`` of stored texts (records); raises
        EmbedderUnavailable."""
        self._ensure_loaded()
        return self._embed([self._passage_prefix + t for t in texts])

    def _embed(self, texts: list[str]) -> np.ndarray:
        session, tokenizer, words = self._ensure_loaded()
        out = np.zeros((len(texts), DIM), dtype=np.float32)
        if not texts:
            return out
        encodings = tokenizer.encode_batch(texts)
        for chunk in self._batches([len(e.ids) for e in encodings]):
            out[chunk] = self._run(session, words, [encodings[i] for i in chunk])
        return out

    def _batches(self, lengths: list[int]) -> list[list[int]]:
        """Length-sorted batches (short texts don't pay for a long neighbour's padding),
        each at most ``batch_size`` texts and BATCH_TOKENS padded tokens."""
        batches: list[list[int]] = []
        chunk: list[int] = []
        for i in sorted(range(len(lengths)), key=lengths.__getitem__):
            # Sorted ascending, so the newest text is the widest of the chunk.
            if chunk and (
                len(chunk) >= self.batch_size or (len(chunk) + 1) * lengths[i] > BATCH_TOKENS
            ):
                batches.append(chunk)
                chunk = []
            chunk.append(i)
        if chunk:
            batches.append(chunk)
        return batches

    def embed_query(self, text: str) -> np.ndarray:
        """One L2-normalized float32 ``(384,)`` vector of a search query."""
        self._ensure_loaded()
        return self._embed([self._query_prefix + text])[0]

    @staticmethod
    def _run(session: Any, words: WordTable | None, encodings: list[Any]) -> np.ndarray:
        width = max(len(e.ids) for e in encodings)
        ids = np.zeros((len(encodings), width), dtype=np.int64)
        mask = np.zeros_like(ids)
        types = np.zeros_like(ids)
        for row, enc in enumerate(encodings):
            n = len(enc.ids)
            ids[row, :n] = enc.ids
            mask[row, :n] = enc.attention_mask
            types[row, :n] = enc.type_ids
        feed = {"input_ids": ids, "attention_mask": mask, "token_type_ids": types}
        if words is not None:
            feed.update(words.feed(ids))
        (hidden,) = session.run(["last_hidden_state"], feed)
        # Mean pooling over real tokens, then L2 normalize (as sentence-transformers does).
        weights = mask[:, :, None].astype(np.float32)
        pooled = (hidden * weights).sum(axis=1) / np.maximum(weights.sum(axis=1), 1e-9)
        norms = np.linalg.norm(pooled, axis=1, keepdims=True)
        return (pooled / np.maximum(norms, 1e-12)).astype(np.float32)

"""The run-time embedder: all-MiniLM-L6-v2 as ONNX on onnxruntime + tokenizers (no torch)."""

from __future__ import annotations

import ctypes
import hashlib
import json
import logging
import os
import threading
import time
import weakref
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from wakemark.shared.embedding.words import WordTable, load_session
from wakemark.shared.heap import release_free_memory

if TYPE_CHECKING:
    from wakemark.shared.storage import EmbeddingModels

log = logging.getLogger(__name__)

DIM = 384
MAX_TOKENS = 256  # the model's max_seq_length (sentence_bert_config.json), not the tokenizer's 128
BATCH_SIZE = 32
# Padded tokens per batch: attention memory grows with count x width^2, so long texts go
# in small batches, which also keeps the peak RSS of a worker low (and runs no slower).
BATCH_TOKENS = 2048
# How long ``close`` waits for a load under way (a load takes a second or less; gunicorn
# kills a worker 30 s after asking it to stop).
CLOSE_WAIT_S = 10.0

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
        embedder._threads_lock = threading.Lock()
        embedder._threads = []  # the parent's loading threads do not exist here
        embedder._switch_key = embedder.switch_state = None
        if embedder._model is not None:
            _abandon(embedder._model.session)


def _abandon(session: Any) -> None:
    """Never free a session inherited through fork: its destructor joins thread-pool
    threads that do not exist in the child and hangs forever (seen with onnxruntime 1.32).
    Its memory is the parent's copy-on-write pages, so keeping it costs next to nothing."""
    ctypes.pythonapi.Py_IncRef(ctypes.py_object(session))


def _file_key(path: Path) -> tuple[int, int, int] | None:
    try:
        st = path.stat()
    except OSError:
        return None
    return (st.st_ino, st.st_size, st.st_mtime_ns)


@dataclass(frozen=True, eq=False)
class Model:
    """One loaded model. A caller that compares or stores vectors takes one (``Embedder.
    model``) and uses it throughout, so its vectors are all of ``identity`` even when the
    process switches models meanwhile (``Embedder.switch``)."""

    path: Path
    identity: str
    session: Any
    tokenizer: Any
    words: WordTable | None
    query_prefix: str
    passage_prefix: str
    batch_size: int
    pid: int

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """L2-normalized float32 ``(len(texts), 384)`` of stored texts (records)."""
        return self._embed([self.passage_prefix + t for t in texts])

    def embed_query(self, text: str) -> np.ndarray:
        """One L2-normalized float32 ``(384,)`` vector of a search query."""
        return self._embed([self.query_prefix + text])[0]

    def _embed(self, texts: list[str]) -> np.ndarray:
        out = np.zeros((len(texts), DIM), dtype=np.float32)
        if not texts:
            return out
        encodings = self.tokenizer.encode_batch(texts)
        for chunk in batches([len(e.ids) for e in encodings], self.batch_size):
            out[chunk] = self.run(self.session, self.words, [encodings[i] for i in chunk])
        return out

    @staticmethod
    def run(session: Any, words: WordTable | None, encodings: list[Any]) -> np.ndarray:
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


def batches(lengths: list[int], batch_size: int) -> list[list[int]]:
    """Length-sorted batches (short texts don't pay for a long neighbour's padding),
    each at most ``batch_size`` texts and BATCH_TOKENS padded tokens."""
    out: list[list[int]] = []
    chunk: list[int] = []
    for i in sorted(range(len(lengths)), key=lengths.__getitem__):
        # Sorted ascending, so the newest text is the widest of the chunk.
        if chunk and (len(chunk) >= batch_size or (len(chunk) + 1) * lengths[i] > BATCH_TOKENS):
            out.append(chunk)
            chunk = []
        chunk.append(i)
    if chunk:
        out.append(chunk)
    return out


class StoredModels(Protocol):
    """Where the model of the records' vectors is recorded (the storage)."""

    def embedding_models(self) -> EmbeddingModels: ...
    def claim_model(self, model: str, path: str | None = None) -> EmbeddingModels: ...


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
        self.configured_path = Path(model_path)
        self.model_path = self.configured_path  # the file loaded (or to load): see ``switch``
        self.enabled = enabled
        self.threads = max(1, threads)
        self.batch_size = max(1, batch_size)
        self._lock = threading.Lock()
        self._model: Model | None = None
        self._error: str | None = None
        self._error_key: tuple[int, int] | None = None  # (pid, model mtime) of the failure
        # The last stored model this process tried to switch to, and the files it read
        # (``_file_key``): tried again only when one of them changes.
        self._switch_key: tuple[Any, ...] | None = None
        self.switch_state: str | None = None  # the switch under way or failed, for /health
        self._threads_lock = threading.Lock()
        self._threads: list[threading.Thread] = []  # loading in the background (``close``)
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
        return self._model is not None and self._model.pid == os.getpid()

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
        self.model()

    def warm_in_background(self) -> None:
        """Load on a background thread, unless one is loading already: a server starting,
        a search that finds the model not loaded yet."""

        def load() -> None:
            try:
                self.embed_query("warm up")
            except Exception as exc:
                log.warning("embedder warm-up failed: %s", exc)

        self._start("wakemark-embedder-warmup", load, alone=True)

    def _start(
        self, name: str, target: Any, args: tuple[Any, ...] = (), alone: bool = False
    ) -> None:
        """``alone``: not while a thread of that name is still running."""
        with self._threads_lock:
            self._threads = [t for t in self._threads if t.is_alive()]
            if alone and any(t.name == name for t in self._threads):
                return
            thread = threading.Thread(target=target, args=args, name=name, daemon=True)
            self._threads.append(thread)
            thread.start()

    def close(self, timeout_s: float = CLOSE_WAIT_S) -> None:
        """Wait for the loads under way on background threads: a process that exits while
        onnxruntime builds or runs a session on another thread aborts (``terminate called
        without an active exception``, SIGABRT)."""
        end = time.monotonic() + timeout_s
        with self._threads_lock:
            threads = list(self._threads)
        for thread in threads:
            thread.join(max(0.0, end - time.monotonic()))

    def model(self) -> Model:
        """The loaded model (loads it; raises EmbedderUnavailable)."""
        model = self._model
        if model is None or model.pid != os.getpid():
            with self._lock:
                if not self._loaded():
                    reason = self.reason
                    if reason:
                        raise EmbedderUnavailable(reason)
                    self._model = self._load(self.model_path)
                    self._error = None
                model = self._model
        assert model is not None
        return model

    def _load(self, path: Path, identity: str | None = None) -> Model:
        """``identity``: the hash the file must have (checked before it is loaded)."""
        try:
            import onnxruntime as ort
            from tokenizers import Tokenizer

            before = _file_key(path)
            if identity is not None and (found := file_identity(path)) != identity:
                raise ValueError(f"its hash is {found}, not {identity}")
            tokenizer = Tokenizer.from_file(str(tokenizer_path(path)))
            tokenizer.enable_truncation(max_length=MAX_TOKENS)
            tokenizer.no_padding()  # we pad per length-sorted batch ourselves
            options = ort.SessionOptions()
            options.intra_op_num_threads = self.threads
            options.inter_op_num_threads = 1
            # Don't busy-spin between requests: API and worker processes share 2 cores.
            options.add_session_config_entry("session.intra_op.allow_spinning", "0")
            session, words = load_session(path, options)
            if identity is None:
                # Hashed once a load, beside it (the file is in the page cache by now), so
                # a process that never embeds never reads the file.
                identity = file_identity(path)
            elif _file_key(path) != before:
                raise ValueError("the file changed while it loaded")
        except Exception as exc:
            error = f"cannot load {path}: {exc.__class__.__name__}: {exc}"
            if identity is None:  # not a switch, which says why in ``switch_state``
                self._error, self._error_key = error, self._file_key()
                log.warning("embedder unavailable: %s", error)
            raise EmbedderUnavailable(error) from exc
        query_prefix, passage_prefix = _prefixes(path)
        model = Model(
            path, identity, session, tokenizer, words, query_prefix, passage_prefix,
            self.batch_size, os.getpid(),
        )  # fmt: skip
        release_free_memory()  # the parsed model file, freed once its weights are copied
        log.info("embedder loaded %s (%s, pid %d)", path, identity, model.pid)
        return model

    @property
    def identity(self) -> str:
        """The loaded model's ``file_identity`` (loads it; raises EmbedderUnavailable)."""
        return self.model().identity

    # --- switching -----------------------------------------------------------------------
    def stored_other(self, storage: StoredModels, model: Model) -> EmbeddingModels | None:
        """None when the records' vectors are of ``model`` (a database that records none
        yet is claimed for it, with its file); else the models stored, after starting the
        switch to the stored one (``switch``): until it is loaded, ``model``'s vectors do
        not compare with the records'."""
        stored = storage.embedding_models()
        if stored.model is None:
            stored = storage.claim_model(model.identity, str(model.path.absolute()))
        if stored.model == model.identity:
            return None
        if stored.model is not None:
            self.switch(stored.model, stored.path)
        return stored

    def switch(self, identity: str, path: str | None) -> None:
        """The stored vectors are of model ``identity`` (``wakemark backfill --rebuild``
        swapped them in), not of the loaded one: load it on a background thread and use it
        from then on. Its file is ``path`` (where the rebuild read it) or, failing that,
        the configured one (replaced in place by then); a file whose hash is not
        ``identity`` is never loaded. Tried once, and again only when a file changes;
        meanwhile, and after a failure (``switch_state`` says why), the process goes on
        as before: no vector leg, no vectors written."""
        if not self.enabled or not self._loaded() or self.identity == identity:
            return
        candidates = list(dict.fromkeys([*([Path(path)] if path else []), self.configured_path]))
        key = (identity, os.getpid(), *((p, _file_key(p)) for p in candidates))
        with self._lock:
            if key == self._switch_key:
                return
            self._switch_key = key
            self.switch_state = f"loading the stored model {identity}"
        self._start("wakemark-model-switch", self._switch, (identity, candidates))

    def _switch(self, identity: str, candidates: list[Path]) -> None:
        why = []
        for path in candidates:
            if _file_key(path) is None:
                why.append(f"{path} is missing")
                continue
            try:
                model = self._load(path, identity)
            except EmbedderUnavailable as exc:
                why.append(str(exc))
                continue
            with self._lock:
                old, self._model, self.model_path = self._model, model, path
                self.switch_state = None
            log.warning(
                "embedder switched from %s (%s) to the stored model %s (%s), pid %d",
                old.identity if old else None, old.path if old else None, identity, path,
                model.pid,
            )  # fmt: skip
            return
        self.switch_state = f"cannot load the stored model {identity}: " + "; ".join(why)
        log.warning("embedder kept its model: %s", self.switch_state)

    # --- embedding -----------------------------------------------------------------------
    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """L2-normalized float32 ``(len(texts), 384)`` of stored texts (records); raises
        EmbedderUnavailable."""
        return self.model().embed(texts)

    def embed_query(self, text: str) -> np.ndarray:
        """One L2-normalized float32 ``(384,)`` vector of a search query."""
        return self.model().embed_query(text)

"""Sentence embeddings (all-MiniLM-L6-v2, 384-d): ONNX built without torch."""

from __future__ import annotations

from typing import TYPE_CHECKING

from wakemark.shared.config import Settings
from wakemark.shared.embedding.onnx import (
    DIM,
    MAX_TOKENS,
    Embedder,
    EmbedderUnavailable,
    Model,
    tokenizer_path,
)

if TYPE_CHECKING:
    from wakemark.shared.embedding.export import ExportError, export_onnx, is_valid_export

__all__ = [
    "DIM",
    "MAX_TOKENS",
    "Model",
    "Embedder",
    "EmbedderUnavailable",
    "ExportError",
    "export_onnx",
    "is_valid_export",
    "open_embedder",
    "tokenizer_path",
]


def open_embedder(settings: Settings) -> Embedder:
    """The process's embedder; loads nothing until first use."""
    return Embedder(settings.onnx_model_path, enabled=settings.embedder != "off")


def __getattr__(name: str) -> object:
    # The model build (export.py) loads only in a process that builds or checks a model.
    if name in ("ExportError", "export_onnx", "is_valid_export"):
        from wakemark.shared.embedding import export

        return getattr(export, name)
    raise AttributeError(name)

"""Sentence embeddings (all-MiniLM-L6-v2, 384-d): ONNX built without torch."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from wakemark.shared.config import Settings
from wakemark.shared.embedding.onnx import (
    DIM,
    MAX_TOKENS,
    Embedder,
    EmbedderUnavailable,
    tokenizer_path,
)

if TYPE_CHECKING:
    from wakemark.shared.embedding.export import ExportError

__all__ = [
    "DIM",
    "MAX_TOKENS",
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


def export_onnx(
    dest: Path,
    *,
    force: bool = False,
    source: Path | None = None,
    progress: Callable[[str], None] | None = None,
) -> Path:
    """Build the model into ``dest`` from the pinned weights (see ``export.export_onnx``)."""
    from wakemark.shared.embedding.export import export_onnx as _export

    return _export(dest, force=force, source=source, progress=progress)


def is_valid_export(model_path: Path) -> bool:
    from wakemark.shared.embedding.export import is_valid_export as _valid

    return _valid(model_path)


def __getattr__(name: str) -> object:
    if name == "ExportError":
        from wakemark.shared.embedding.export import ExportError

        return ExportError
    raise AttributeError(name)

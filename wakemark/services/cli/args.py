"""Argument types several commands share: a bad value is the parser's one-line usage
error (exit 2), checked before the command opens the database or calls the server."""

from __future__ import annotations

import argparse


def positive_int(raw: str) -> int:
    if not raw.isdigit() or int(raw) < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {raw!r}")
    return int(raw)


def namespace_prefix(raw: str) -> str:
    """A namespace ``/actor/<a>/project/<p>/`` or an actor prefix ``/actor/<a>/``."""
    # Imported here: `wakemark hook` and --help must not pay for pydantic.
    from wakemark.shared.models import is_namespace_prefix

    if not is_namespace_prefix(raw):
        raise argparse.ArgumentTypeError(
            f"expected /actor/<a>/project/<p>/ or /actor/<a>/, got {raw!r}"
        )
    return raw

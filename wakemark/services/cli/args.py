"""Argument types several commands share: a bad value is the parser's one-line usage
error (exit 2), checked before the command opens the database or calls the server."""

from __future__ import annotations

import argparse
import dataclasses
import os
from collections.abc import Callable
from typing import Any


def positive_int(raw: str) -> int:
    if not raw.isdigit() or int(raw) < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {raw!r}")
    return int(raw)


def existing_dir(raw: str) -> str:
    """A project directory named on the command line: one that exists, so a typo is
    refused rather than taken for a project of its own (created, or matched to none)."""
    if not os.path.isdir(raw):
        raise argparse.ArgumentTypeError(f"no such directory: {raw!r}")
    return raw


def namespace_prefix(raw: str) -> str:
    """A namespace ``/actor/<a>/project/<p>/`` or an actor prefix ``/actor/<a>/``."""
    # Imported here: `wakemark hook` and --help must not pay for pydantic.
    from wakemark.shared.models import is_namespace_prefix

    if not is_namespace_prefix(raw):
        raise argparse.ArgumentTypeError(
            f"expected /actor/<a>/project/<p>/ or /actor/<a>/, got {raw!r}"
        )
    return raw


def setting(key: str) -> Callable[[str], Any]:
    """A flag standing in for the setting ``key``: its value is checked by the setting's
    own parser, so a bad one is the flag's usage error rather than a complaint about the
    environment variable the flag is passed on through."""
    from wakemark.shared.config import Settings

    parse = next(f.metadata["parse"] for f in dataclasses.fields(Settings) if f.name == key)

    def check(raw: str) -> Any:
        try:
            return parse(raw)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    return check

"""``wakemark backfill``: embed every record missing a vector, in the foreground;
``--rebuild``: re-embed every record with the configured model (a model change).

Each batch commits on its own, so Ctrl-C (finishing the batch in flight) or a crash
loses nothing: the next run starts from the records still missing a vector (or, for a
rebuild, a staged one). A rebuild stages the new vectors beside the ones searched
meanwhile and swaps them in, in one transaction, at the end (``rebuild_embeddings``).
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import threading
import time
from typing import Any, TextIO

from wakemark.services.cli.args import namespace_prefix, positive_int


class ProgressBar:
    """``\\r``-updated bar on a TTY; a plain line every few seconds otherwise (logs, CI)."""

    def __init__(
        self,
        stream: TextIO = sys.stderr,
        every_s: float = 5.0,
        width: int = 30,
        label: str = "embedding",
    ):
        self.label = label
        self.stream = stream
        self.tty = stream.isatty()
        self.every_s = every_s
        self.width = width
        self.started = time.monotonic()
        self._last: float | None = None  # the first update always prints

    def __call__(self, done: int, total: int) -> None:
        now = time.monotonic()
        recent = self._last is not None and now - self._last < self.every_s
        if not self.tty and recent and done < total:
            return
        self._last = now
        rate = done / max(now - self.started, 1e-9)
        frac = done / total if total else 1.0
        if self.tty:
            bar = "#" * int(frac * self.width)
            self.stream.write(
                f"\r{self.label} [{bar:<{self.width}}] {done}/{total} {frac:4.0%} {rate:6.1f}/s"
            )
        else:
            self.stream.write(f"{self.label}: {done}/{total} ({frac:.0%}, {rate:.1f}/s)\n")
        self.stream.flush()

    def finish(self) -> None:
        if self.tty:
            self.stream.write("\n")
            self.stream.flush()


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--namespace", type=namespace_prefix, help="only records under this namespace"
    )
    parser.add_argument(
        "--rebuild",
        action="store_true",
        help="re-embed every record with the configured model (model change); searches "
        "keep the old vectors until the new ones replace them all at once, then running "
        "services switch to the new model by themselves if they can read its file at the "
        "same path",
    )
    parser.add_argument(
        "--batch", type=positive_int, default=64, help="records per batch (default 64)"
    )


def run(args: argparse.Namespace) -> int:
    from wakemark.services.cli.migrate import migrated_runtime
    from wakemark.shared.embedding import EmbedderUnavailable
    from wakemark.shared.jobs import backfill_embeddings, rebuild_embeddings
    from wakemark.shared.storage.errors import SwapBlockedError

    if args.rebuild and args.namespace is not None:
        print(
            "wakemark: --rebuild re-embeds every record (one model per database)", file=sys.stderr
        )
        return 2
    if args.rebuild:
        # Beside a running service, whose searches embed their queries too: they come first.
        os.nice(10)
        _show_swap_steps()
    runtime = migrated_runtime()
    if runtime.settings.embedder == "off":
        print("wakemark: WAKEMARK_EMBEDDER=off, nothing to embed", file=sys.stderr)
        return 2
    stop = threading.Event()
    previous = signal.signal(signal.SIGINT, lambda *_: _interrupt(stop, previous))
    progress = ProgressBar()
    batch = args.batch
    try:
        if args.rebuild:
            result: dict[str, Any] = rebuild_embeddings(
                runtime.tasks, batch=batch, progress=progress, stop=stop, wait_on_open=True
            )
        else:
            result = backfill_embeddings(
                runtime.tasks,
                batch=batch,
                namespace=args.namespace,
                progress=progress,
                stop=stop,
                wait_on_open=True,
            )
        # Read before the runtime closes, for the message below; only when it is needed.
        stored = runtime.storage.embedding_models().model if result["model"] is None else None
    except (EmbedderUnavailable, SwapBlockedError) as exc:
        print(f"wakemark: {exc}", file=sys.stderr)
        return 1
    finally:
        progress.finish()
        signal.signal(signal.SIGINT, previous)
        runtime.close()
    if result["model"] is None:
        print(
            f"wakemark: the stored vectors are of model {stored}, not of the configured one:"
            " run `wakemark backfill --rebuild` to re-embed every record with it",
            file=sys.stderr,
        )
        return 1
    left = "interrupted" if stop.is_set() else "done"
    print(f"{left}: embedded {result['embedded']} record(s)", file=sys.stderr)
    if args.rebuild and result["swapped"]:
        print(
            f"the records' vectors are now of model {result['model']}: running services load"
            " it from the same file path (or their own, if it now holds it) by themselves;"
            " one that cannot says why in /health (embedder.switch) and searches full-text"
            " only until restarted with this model",
            file=sys.stderr,
        )
    elif args.rebuild:
        print("not swapped yet: run `wakemark backfill --rebuild` again to go on", file=sys.stderr)
    if stop.is_set():
        return 130
    return 1 if args.rebuild and not result["swapped"] else 0


def _show_swap_steps() -> None:
    """The swap's steps on Postgres (its indexes built, its waits for locks) on stderr:
    they come after the bar is full and take minutes at a million records."""
    handler = logging.StreamHandler(sys.stderr)
    # On a terminal the bar's line is still open (``\r``): a step starts a line of its own.
    start = "\n" if sys.stderr.isatty() else ""
    handler.setFormatter(logging.Formatter(start + "wakemark: %(message)s"))
    steps = logging.getLogger("wakemark.shared.storage.postgres.vectors")
    steps.setLevel(logging.INFO)
    steps.addHandler(handler)


def _interrupt(stop: threading.Event, previous: Any) -> None:
    # First Ctrl-C: finish the batch in flight and stop; a second one aborts at once.
    print("\nstopping after the current batch (Ctrl-C again to abort)", file=sys.stderr)
    stop.set()
    signal.signal(signal.SIGINT, previous)

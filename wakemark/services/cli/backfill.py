"""``wakemark backfill``: embed every record missing a vector, in the foreground.

Each batch commits on its own, so Ctrl-C (finishing the batch in flight) or a crash
loses nothing: the next run starts from the records still missing a vector.
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading
import time
from typing import Any, TextIO


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
    parser.add_argument("--namespace", default=None, help="only records under this namespace")
    parser.add_argument(
        "--rebuild", action="store_true", help="clear existing embeddings first (model change)"
    )
    parser.add_argument("--batch", type=int, default=64, help="records per batch (default 64)")


def run(args: argparse.Namespace) -> int:
    from wakemark.services.cli.migrate import migrated_runtime
    from wakemark.shared.jobs import backfill_embeddings

    runtime = migrated_runtime()
    if runtime.settings.embedder == "off":
        print("wakemark: WAKEMARK_EMBEDDER=off, nothing to embed", file=sys.stderr)
        return 2
    stop = threading.Event()
    previous = signal.signal(signal.SIGINT, lambda *_: _interrupt(stop, previous))
    progress = ProgressBar()
    try:
        if args.rebuild:
            cleared = runtime.storage.clear_embeddings(args.namespace)
            print(f"cleared {cleared} embedding(s)", file=sys.stderr)
        result: dict[str, Any] = backfill_embeddings(
            runtime.tasks,
            batch=max(1, args.batch),
            namespace=args.namespace,
            progress=progress,
            stop=stop,
            wait_on_open=True,
        )
    finally:
        progress.finish()
        signal.signal(signal.SIGINT, previous)
        runtime.close()
    left = "interrupted" if stop.is_set() else "done"
    print(f"{left}: embedded {result['embedded']} record(s)", file=sys.stderr)
    return 130 if stop.is_set() else 0


def _interrupt(stop: threading.Event, previous: Any) -> None:
    # First Ctrl-C: finish the batch in flight and stop; a second one aborts at once.
    print("\nstopping after the current batch (Ctrl-C again to abort)", file=sys.stderr)
    stop.set()
    signal.signal(signal.SIGINT, previous)

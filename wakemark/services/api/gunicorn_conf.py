"""gunicorn hooks for ``wakemark serve``: reset what a forked worker inherited, start its
job runner and warm its embedder and full-text index; close it on exit."""

from __future__ import annotations

from typing import Any


def post_fork(server: Any, worker: Any) -> None:
    from wakemark.shared.heap import map_large_blocks
    from wakemark.shared.malloc import cap_arenas

    # Before the worker's request, search and leg threads start (bench/results/scale.md).
    cap_arenas()
    map_large_blocks()
    # The app exists before the fork only when the master loaded it (``--preload``);
    # otherwise each worker builds its own after the fork and inherits nothing.
    app = getattr(worker.app, "callable", None)
    if app is not None:
        app.extensions["wakemark"].after_fork()


def post_worker_init(worker: Any) -> None:
    # Embedded mode runs jobs inside the API worker: start the sweeper now rather than
    # at the first enqueue, so pending work left by a previous run is picked up.
    runtime = worker.wsgi.extensions["wakemark"]
    runtime.jobs.start()
    # Load the model and the full-text index now, in the background and after the fork
    # (onnxruntime must never be loaded in the master), so the first prompt already gets
    # vector results and no search pays for the index.
    runtime.retriever.warm_up()


def worker_exit(server: Any, worker: Any) -> None:
    wsgi = getattr(worker, "wsgi", None)
    if wsgi is not None:
        wsgi.extensions["wakemark"].close()

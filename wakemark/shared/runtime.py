"""The composition root: the one place that builds a process's parts and wires them.

Every service (API, worker, CLI, MCP) builds exactly one ``Runtime`` with
``Runtime.build(settings)``. Each part gets its collaborators through its constructor
(storage, embedder, cache epochs, dispatcher, retriever, the jobs' ``Context``); nothing
below this module imports or receives the ``Runtime``. Parts are created lazily on
first use, so nothing connects or loads a model at import or before it is needed.
"""

from __future__ import annotations

from functools import cached_property
from typing import TYPE_CHECKING

from wakemark.shared.config import Settings, prepare_home

if TYPE_CHECKING:
    from wakemark.shared.cache import Epochs
    from wakemark.shared.embedding import Embedder
    from wakemark.shared.jobs import Context, Dispatcher
    from wakemark.shared.jobs.breaker import Breaker
    from wakemark.shared.retrieval import Retriever
    from wakemark.shared.storage import Storage


class Runtime:
    def __init__(self, settings: Settings) -> None:
        self.settings = settings

    @classmethod
    def build(cls, settings: Settings | None = None) -> Runtime:
        settings = settings or Settings.from_env()
        if settings.backend == "sqlite":
            prepare_home(settings)
        return cls(settings)

    @cached_property
    def epochs(self) -> Epochs:
        from wakemark.shared.cache import open_epochs

        return open_epochs(self.settings)

    @cached_property
    def storage(self) -> Storage:
        from wakemark.shared.storage import open_storage

        return open_storage(self.settings, on_change=self.epochs.bump)

    @cached_property
    def embedder(self) -> Embedder:
        from wakemark.shared.embedding import open_embedder

        return open_embedder(self.settings)

    @cached_property
    def breaker(self) -> Breaker:
        from wakemark.shared.jobs.breaker import Breaker

        return Breaker()

    @cached_property
    def tasks(self) -> Context:
        """What every job runs with; ``enqueue`` goes through this process's dispatcher."""
        from wakemark.shared.jobs import Context

        return Context(
            settings=self.settings,
            storage=self.storage,
            embedder=self.embedder,
            enqueue=lambda job, ids: self.jobs.enqueue(job, ids),
            queued_ids=lambda queue: self.jobs.queued_ids(queue),
            breaker=self.breaker,
        )

    @cached_property
    def jobs(self) -> Dispatcher:
        from wakemark.shared.jobs import open_dispatcher

        return open_dispatcher(self.tasks)

    @cached_property
    def retriever(self) -> Retriever:
        from wakemark.shared.retrieval import Retriever

        return Retriever(self.settings, self.storage, self.embedder, self.epochs)

    def after_fork(self) -> None:
        """In a forked child, before it serves: parts built in the parent drop the threads,
        locks and connections they inherited. Called from gunicorn's ``post_fork`` and
        Celery's ``worker_process_init``. Storage and the embedder guard themselves (a
        connection or model session is only ever used by the process that opened it)."""
        for name in ("retriever", "jobs"):
            part = self.__dict__.get(name)
            if part is not None:
                part.after_fork()

    def close(self) -> None:
        names = ("retriever", "jobs", "embedder", "storage", "epochs")
        # Close every part before forgetting any: a job thread still finishing would
        # otherwise rebuild a popped part (a fresh dispatcher or pool nobody closes).
        for name in names:
            part = self.__dict__.get(name)
            if part is not None:
                part.close()
        for name in (*names, "tasks"):
            self.__dict__.pop(name, None)

"""One process's wiring: settings, storage, cache epochs, embedder, jobs, retrieval.

Every service (API, worker, CLI, MCP) builds exactly one ``Runtime`` with
``Runtime.build(settings)``; parts are created lazily on first use so that nothing
connects or loads a model at import or before it is needed.
"""

from __future__ import annotations

import threading
from functools import cached_property
from typing import TYPE_CHECKING

from wakemark.shared.config import Settings, prepare_home

if TYPE_CHECKING:
    from wakemark.shared.cache import Epochs
    from wakemark.shared.embedding import Embedder
    from wakemark.shared.jobs import Dispatcher
    from wakemark.shared.retrieval import Retriever
    from wakemark.shared.storage import Storage


class Runtime:
    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self._lock = threading.RLock()

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
    def jobs(self) -> Dispatcher:
        from wakemark.shared.jobs import open_dispatcher

        return open_dispatcher(self)

    @cached_property
    def retriever(self) -> Retriever:
        from wakemark.shared.retrieval import Retriever

        return Retriever(self)

    def close(self) -> None:
        names = ("retriever", "jobs", "storage", "epochs")
        # Close every part before forgetting any: a job thread still finishing would
        # otherwise rebuild a popped part (a fresh dispatcher or pool nobody closes).
        for name in names:
            part = self.__dict__.get(name)
            if part is not None:
                part.close()
        for name in names:
            self.__dict__.pop(name, None)

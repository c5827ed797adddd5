"""Per-namespace cache epochs: bumped on every embedding write/delete, read per search."""

from __future__ import annotations

from wakemark.shared.cache.epochs import Epochs, LocalEpochs, RedisEpochs, prefixes
from wakemark.shared.config import Settings

__all__ = ["Epochs", "LocalEpochs", "RedisEpochs", "open_epochs", "prefixes"]


def open_epochs(settings: Settings) -> Epochs:
    """Redis epochs (shared by every process) when ``redis_url`` is set, else in-process."""
    if settings.redis_url:
        return RedisEpochs(settings.redis_url)
    return LocalEpochs()

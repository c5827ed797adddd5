"""Summary figures of samples, one way for every bench."""

from __future__ import annotations

import statistics
from collections.abc import Sequence


def percentiles(
    samples: Sequence[float], qs: Sequence[int] = (50, 95), digits: int = 2, key: str = "p{}_ms"
) -> dict[str, float]:
    """numpy's percentiles (linear between samples), rounded; zeros for no samples."""
    import numpy as np  # here: bench.embedding's worker times its own imports, numpy's too

    arr = np.asarray(samples, dtype=np.float64)
    return {
        key.format(q): round(float(np.percentile(arr, q)), digits) if arr.size else 0.0 for q in qs
    }


def nearest_rank(values: Sequence[float], q: float) -> float:
    """The value at rank ``q`` (0 to 1) of the sorted values, not interpolated."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def mean(values: Sequence[float], digits: int = 4) -> float:
    """The rounded mean; 0.0 for no values."""
    return round(statistics.fmean(values), digits) if values else 0.0

"""A small circuit breaker: after N consecutive failures, stop trying for a cool-down."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any


class Breaker:
    def __init__(
        self,
        threshold: int = 3,
        cooldown_s: float = 30.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.threshold = threshold
        self.cooldown_s = cooldown_s
        self._clock = clock
        self._lock = threading.Lock()
        self._failures = 0
        self._open_until = 0.0
        self.last_error: str | None = None

    @property
    def state(self) -> str:
        """``closed`` (working), ``open`` (cooling down) or ``half_open`` (try once)."""
        with self._lock:
            if self._failures < self.threshold:
                return "closed"
            return "open" if self._clock() < self._open_until else "half_open"

    def remaining_s(self) -> float:
        with self._lock:
            return max(0.0, self._open_until - self._clock())

    def success(self) -> None:
        with self._lock:
            self._failures = 0
            self._open_until = 0.0
            self.last_error = None

    def failure(self, error: BaseException | str) -> None:
        with self._lock:
            self._failures += 1
            self.last_error = str(error)[:200]
            if self._failures >= self.threshold:
                self._open_until = self._clock() + self.cooldown_s

    def snapshot(self) -> dict[str, Any]:
        state = self.state
        with self._lock:
            return {
                "state": state,
                "consecutive_failures": self._failures,
                "last_error": self.last_error,
            }

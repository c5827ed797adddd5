"""Epoch counters: a cache entry for namespace N is fresh while ``get(N)`` is unchanged.
Beside them, when each namespace was last searched: what a process starting up loads
into its caches first (``recently_searched``)."""

from __future__ import annotations

import abc
import logging
import secrets
import threading
import time
from collections.abc import Iterable
from typing import Any

log = logging.getLogger(__name__)

KEY_PREFIX = "wakemark:epoch:"
# A random id stored once per Redis dataset and folded into every epoch: if Redis loses
# its data (restart without persistence, FLUSHDB) the counters restart at 0, but the new
# incarnation id keeps a counter value seen before the loss from matching a cached one.
INCARNATION_KEY = "wakemark:epoch-incarnation"
RETRY_AFTER_S = 1.0  # after a failed get, skip Redis this long (searches stay fast)
SEARCHED_KEY = "wakemark:searched"  # sorted set: namespace -> when last searched (Unix s)
# A process notes a namespace's search at most this often: the warm-up needs the minute,
# not the moment, and a search then costs no extra round trip.
NOTE_EVERY_S = 30.0
SEARCHED_KEEP_S = 7 * 86400.0  # older notes are dropped
MAX_NOTED = 4096  # namespaces a process remembers (a client may search ever new ids)


def prefixes(namespace: str) -> list[str]:
    """Every ``/``-terminated prefix a read may be scoped to, ending with the namespace.

    ``/actor/a/project/p/`` -> ``/``, ``/actor/``, ``/actor/a/``, ``/actor/a/project/``,
    ``/actor/a/project/p/``: a search under any of them sees the change.
    """
    cuts = [i + 1 for i, ch in enumerate(namespace) if ch == "/"]
    out = [namespace[:i] for i in cuts]
    if not out or out[-1] != namespace:
        out.append(namespace)
    return out


def _all_prefixes(namespaces: Iterable[str]) -> set[str]:
    return {p for ns in namespaces for p in prefixes(ns)}


def _fresh() -> int:
    """A value no cache can hold: negative (real epochs are >= 0) and random."""
    return -1 - secrets.randbits(62)


class Epochs(abc.ABC):
    @abc.abstractmethod
    def get(self, namespace: str) -> int:
        """The namespace's current epoch; cheap (called once per search)."""

    @abc.abstractmethod
    def bump(self, namespaces: set[str]) -> None:
        """Invalidate the namespaces and their prefixes; never raises (storage's hook)."""

    @abc.abstractmethod
    def searched(self, namespace: str) -> None:
        """Note that the namespace was searched now; never raises (a search's hook)."""

    @abc.abstractmethod
    def recently_searched(self, within_s: float, limit: int) -> list[str]:
        """The namespaces searched within ``within_s`` seconds, the latest first (at most
        ``limit``); empty if unknown."""

    def close(self) -> None:  # noqa: B027 - optional for implementations without resources
        """Release connections."""


class LocalEpochs(Epochs):
    """One process (embedded mode): dicts behind a lock."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._epochs: dict[str, int] = {}
        self._searched: dict[str, float] = {}  # oldest first

    def get(self, namespace: str) -> int:
        return self._epochs.get(namespace, 0)

    def bump(self, namespaces: set[str]) -> None:
        with self._lock:
            for key in _all_prefixes(namespaces):
                self._epochs[key] = self._epochs.get(key, 0) + 1

    def searched(self, namespace: str) -> None:
        with self._lock:
            self._searched.pop(namespace, None)
            self._searched[namespace] = time.time()
            if len(self._searched) > MAX_NOTED:
                del self._searched[next(iter(self._searched))]

    def recently_searched(self, within_s: float, limit: int) -> list[str]:
        since = time.time() - within_s
        with self._lock:
            latest_first = list(reversed(self._searched.items()))
        return [ns for ns, at in latest_first if at >= since][:limit]


class RedisEpochs(Epochs):
    """Every API/worker process shares counters ``wakemark:epoch:<namespace>`` in Redis."""

    def __init__(self, url: str, *, timeout_s: float = 0.2) -> None:
        import redis  # not at import time of the package: embedded mode never needs it

        self._client: Any = redis.Redis.from_url(
            url, socket_timeout=timeout_s, socket_connect_timeout=timeout_s
        )
        self._errors: tuple[type[BaseException], ...] = (redis.RedisError, OSError)
        self._down_until = 0.0
        self._noted: dict[str, float] = {}  # namespace -> when this process last noted it

    def get(self, namespace: str) -> int:
        if time.monotonic() < self._down_until:
            return _fresh()
        try:
            count, incarnation = self._client.mget(KEY_PREFIX + namespace, INCARNATION_KEY)
            if incarnation is None:
                incarnation = self._new_incarnation()
        except self._errors as exc:
            log.warning(
                "cache epochs: Redis unreachable, caching off for %ss: %s", RETRY_AFTER_S, exc
            )
            self._down_until = time.monotonic() + RETRY_AFTER_S
            return _fresh()
        return (int(incarnation) << 32) + int(count or 0)

    def _new_incarnation(self) -> bytes:
        # SET NX: of several processes racing here, every one ends up with the winner's id.
        self._client.set(INCARNATION_KEY, secrets.randbits(30), nx=True)
        value = self._client.get(INCARNATION_KEY)
        if value is None:  # flushed again in between: no stable id, so no cache hit
            raise OSError("epoch incarnation vanished")
        return bytes(value)

    def bump(self, namespaces: set[str]) -> None:
        keys = sorted(_all_prefixes(namespaces))
        if not keys:
            return
        try:
            pipe = self._client.pipeline(transaction=False)
            for key in keys:
                pipe.incr(KEY_PREFIX + key)
            pipe.execute()
        except self._errors as exc:
            # Ingest must never fail on Redis; while Redis is down every get() misses anyway.
            log.warning("cache epochs: bump of %d namespace(s) failed: %s", len(namespaces), exc)

    def searched(self, namespace: str) -> None:
        now = time.time()
        noted = self._noted.get(namespace, 0.0)
        if time.monotonic() < self._down_until or now - noted < NOTE_EVERY_S:
            return
        self._noted[namespace] = now
        if len(self._noted) > MAX_NOTED:
            self._noted = {ns: t for ns, t in self._noted.items() if now - t < NOTE_EVERY_S}
        try:
            pipe = self._client.pipeline(transaction=False)
            pipe.zadd(SEARCHED_KEY, {namespace: now})
            pipe.zremrangebyscore(SEARCHED_KEY, "-inf", now - SEARCHED_KEEP_S)
            pipe.execute()
        except self._errors as exc:  # only a later warm-up misses it
            log.warning("cache epochs: noting a search failed: %s", exc)

    def recently_searched(self, within_s: float, limit: int) -> list[str]:
        try:
            found = self._client.zrevrangebyscore(
                SEARCHED_KEY, "+inf", time.time() - within_s, start=0, num=limit
            )
        except self._errors as exc:
            log.warning("cache epochs: reading the recent searches failed: %s", exc)
            return []
        return [ns.decode() for ns in found]

    def close(self) -> None:
        self._client.close()

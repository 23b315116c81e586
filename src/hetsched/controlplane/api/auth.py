"""Authentication and rate limiting.

Tokens are random (256 bits) and stored as sha256 digests only; a fast hash is enough for
random secrets. Lookups are cached for a few seconds; revoking through the API clears the
cache at once (one process serves the API). While the store cannot be read (its database
server is down), a token this process has verified before still authenticates, so the
alerts, health and views that need no store stay reachable; an unknown token then answers
503 (the store's error), not 401.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass

from hetsched.controlplane.storage.health import unavailable
from hetsched.controlplane.storage.store import Principal, Store, digest

__all__ = ["Authenticator", "RateLimiter"]


class Authenticator:
    def __init__(self, store: Store, ttl_s: float = 5.0) -> None:
        self.store = store
        self.ttl_s = ttl_s
        self._cache: dict[str, tuple[Principal, float]] = {}
        #: every token verified since the last revocation: who it was, for outages
        self._known: dict[str, Principal] = {}
        self._lock = threading.Lock()

    def principal(self, token: str) -> Principal | None:
        key = digest(token)
        now = time.monotonic()
        with self._lock:
            hit = self._cache.get(key)
        if hit is not None and hit[1] > now:
            return hit[0]
        try:
            principal = self.store.principal(token)
        except Exception as exc:
            with self._lock:
                known = self._known.get(key)
            if known is None or unavailable(exc) is None:
                raise
            return known
        if principal is not None:
            with self._lock:
                if len(self._cache) > 10_000:
                    self._cache.clear()
                    self._known.clear()
                self._cache[key] = (principal, now + self.ttl_s)
                self._known[key] = principal
        return principal

    def cached(self, token: str) -> Principal | None:
        """The principal of ``token`` if the cache holds it unexpired (never reads the
        store, so it may run on the event loop)."""
        with self._lock:
            hit = self._cache.get(digest(token))
        return hit[0] if hit is not None and hit[1] > time.monotonic() else None

    def forget(self) -> None:
        with self._lock:
            self._cache.clear()
            self._known.clear()


@dataclass(slots=True)
class _Bucket:
    tokens: float
    at: float


class RateLimiter:
    """A token bucket per key: ``rate`` requests per second, bursts of ``burst``.

    ``rate`` 0 disables the limiter.
    """

    def __init__(self, rate: float, burst: float | None = None) -> None:
        self.rate = rate
        self.burst = burst if burst is not None else max(1.0, 2 * rate)
        self._buckets: dict[str, _Bucket] = {}
        self._lock = threading.Lock()

    def allow(self, key: str, now: float | None = None) -> float:
        """0.0 if the request may go ahead, else the seconds to wait before retrying."""
        if self.rate <= 0:
            return 0.0
        now = time.monotonic() if now is None else now
        with self._lock:
            bucket = self._buckets.get(key)
            if bucket is None:
                if len(self._buckets) > 100_000:
                    self._buckets.clear()
                bucket = self._buckets[key] = _Bucket(self.burst, now)
            bucket.tokens = min(self.burst, bucket.tokens + (now - bucket.at) * self.rate)
            bucket.at = now
            if bucket.tokens >= 1.0:
                bucket.tokens -= 1.0
                return 0.0
            return (1.0 - bucket.tokens) / self.rate

"""The API client's rate limit: a token bucket, as client-go's ``--kube-api-qps`` and
``--kube-api-burst`` are.

``qps`` tokens are added each second up to ``burst``; every request takes one, waiting for
it when none is left. A waiting request reserves its token first (the bucket goes below
zero), so requests are served in the order they asked and the rate holds under any number
of threads. kube-scheduler's defaults are 50 and 100; hetsched's scheduler sets no limit
unless told (``qps`` 0), since its binding workers are bounded already: the limit is for
an API server that must be protected from it.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

__all__ = ["TokenBucket"]


class TokenBucket:
    def __init__(
        self,
        qps: float,
        burst: int,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        if qps <= 0 or burst < 1:
            raise ValueError(f"a rate limit needs qps > 0 and burst >= 1, got {qps} and {burst}")
        self.qps = qps
        self.burst = burst
        self._clock = clock
        self._sleep = sleep
        self._lock = threading.Lock()
        self._tokens = float(burst)
        self._at = clock()

    def wait_s(self) -> float:
        """Take a token: the seconds the caller must wait for it (0: none)."""
        with self._lock:
            now = self._clock()
            self._tokens = min(self.burst, self._tokens + (now - self._at) * self.qps)
            self._at = now
            self._tokens -= 1
            return 0.0 if self._tokens >= 0 else -self._tokens / self.qps

    def take(self) -> None:
        """Take a token, waiting for it when the bucket is empty."""
        wait = self.wait_s()
        if wait > 0:
            self._sleep(wait)

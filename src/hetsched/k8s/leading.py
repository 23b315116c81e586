"""Schedule only while holding the lease: leader election around a scheduler's loop."""

from __future__ import annotations

import contextlib
import logging
import threading
from typing import Protocol

from hetsched.k8s.api import ApiError
from hetsched.k8s.leader import LeaseLock

__all__ = ["Leadable", "run_leading"]

log = logging.getLogger(__name__)


class Leadable(Protocol):
    """A scheduler that can be started and stopped around a lease."""

    def sync(self) -> None: ...

    def start_watches(self) -> None: ...

    def step(self, timeout_s: float = 1.0) -> None: ...

    def stop(self) -> None: ...


def run_leading(sched: Leadable, lock: LeaseLock, stop: threading.Event) -> int:
    """Wait for the lease, then sync, watch and schedule while renewing it every retry
    period, until ``stop`` (returns 0) or the lease is lost (returns 1: the process should
    exit and start over, as kube-scheduler does, rather than act on a stale view)."""
    while not stop.is_set() and not _attempt(lock):
        stop.wait(lock.retry_period_s)
    if stop.is_set():
        return 0
    sched.sync()
    sched.start_watches()
    renew_at = lock.clock() + lock.retry_period_s
    try:
        while not stop.is_set():
            sched.step(min(1.0, lock.retry_period_s))
            if lock.clock() >= renew_at:
                if not _attempt(lock):
                    log.error("lost the lease %s/%s; stopping", lock.namespace, lock.name)
                    return 1
                renew_at = lock.clock() + lock.retry_period_s
    finally:
        sched.stop()
        with contextlib.suppress(ApiError):
            lock.release()
    return 0


def _attempt(lock: LeaseLock) -> bool:
    try:
        return lock.try_acquire_or_renew()
    except ApiError as exc:
        log.warning("lease %s/%s: %s", lock.namespace, lock.name, exc)
        if lock.leading and lock.lost():
            lock.leading = False
        return lock.leading

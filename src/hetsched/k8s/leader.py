"""Leader election on a ``coordination.k8s.io/v1`` Lease, client-go's algorithm.

Read the lease. Absent: create it (losing a create race is a 409). Held by another holder
whose ``renewTime + leaseDurationSeconds`` has not passed: wait. Otherwise (ours, or
expired): update it carrying the ``resourceVersion`` just read, so a concurrent writer
makes the update fail with 409 and exactly one candidate wins.

Only the holder's own clock is compared with ``renewTime``, as in client-go, where a
candidate judges expiry by when *it* last saw the record change (``observed``), not by the
writer's timestamps: clocks of different machines are never compared.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from hetsched.k8s.api import ClusterAPI

__all__ = ["LeaseLock"]

log = logging.getLogger(__name__)


def _micro(now: datetime) -> str:
    return now.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class LeaseLock:
    """One candidate for the lease ``namespace/name``.

    ``clock`` is a monotonic clock in seconds (injected for tests). Call
    :meth:`try_acquire_or_renew` every ``retry_period_s``; :attr:`leading` says whether this
    candidate holds the lease, and :meth:`lost` whether a leader failed to renew for longer
    than ``renew_deadline_s`` and must step down.
    """

    def __init__(
        self,
        api: ClusterAPI,
        namespace: str,
        name: str,
        identity: str,
        lease_duration_s: int = 15,
        renew_deadline_s: float = 10.0,
        retry_period_s: float = 2.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.api = api
        self.namespace = namespace
        self.name = name
        self.identity = identity
        self.lease_duration_s = lease_duration_s
        self.renew_deadline_s = renew_deadline_s
        self.retry_period_s = retry_period_s
        self.clock = clock
        self.leading = False
        #: when this candidate last renewed the lease (its own clock)
        self.renewed: float | None = None
        #: the last record seen from another holder, and when it was first seen
        self._observed: tuple[str, str] | None = None
        self._observed_at = 0.0

    def _spec(self, transitions: int, acquired: str | None) -> dict[str, Any]:
        stamp = _micro(datetime.now(UTC))
        return {
            "holderIdentity": self.identity,
            "leaseDurationSeconds": self.lease_duration_s,
            "acquireTime": acquired or stamp,
            "renewTime": stamp,
            "leaseTransitions": transitions,
        }

    def try_acquire_or_renew(self) -> bool:
        """One round of the algorithm; returns whether this candidate leads afterwards."""
        now = self.clock()
        current = self.api.get_lease(self.namespace, self.name)
        if current is None:
            body = {
                "apiVersion": "coordination.k8s.io/v1",
                "kind": "Lease",
                "metadata": {"name": self.name, "namespace": self.namespace},
                "spec": self._spec(0, None),
            }
            return self._result(self.api.create_lease(self.namespace, body) is not None, now)
        spec = current.get("spec") or {}
        holder = str(spec.get("holderIdentity") or "")
        if holder and holder != self.identity:
            record = (holder, str(spec.get("renewTime") or ""))
            if record != self._observed:
                self._observed, self._observed_at = record, now
            duration = float(spec.get("leaseDurationSeconds") or self.lease_duration_s)
            if now < self._observed_at + duration:
                self.leading = False  # someone else holds it: certainly not us
                return False
        transitions = int(spec.get("leaseTransitions") or 0)
        acquired = spec.get("acquireTime") if holder == self.identity else None
        if holder != self.identity:
            transitions += 1
        body = {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {
                "name": self.name,
                "namespace": self.namespace,
                "resourceVersion": current["metadata"]["resourceVersion"],
            },
            "spec": self._spec(transitions, acquired),
        }
        replaced = self.api.replace_lease(self.namespace, self.name, body)
        return self._result(replaced is not None, now)

    def _result(self, won: bool, now: float) -> bool:
        if won:
            if not self.leading:
                log.info("%s now leads %s/%s", self.identity, self.namespace, self.name)
            self.leading = True
            self.renewed = now
        elif self.leading and self.lost():
            log.warning("%s lost %s/%s", self.identity, self.namespace, self.name)
            self.leading = False
        return self.leading

    def lost(self) -> bool:
        """A leader that has not renewed within ``renew_deadline_s``: it must stop acting."""
        return self.renewed is None or self.clock() - self.renewed > self.renew_deadline_s

    def release(self) -> None:
        """Step down: clear the holder so another candidate need not wait for expiry."""
        if not self.leading:
            return
        self.leading = False
        current = self.api.get_lease(self.namespace, self.name)
        if current is None or (current.get("spec") or {}).get("holderIdentity") != self.identity:
            return
        current["spec"]["holderIdentity"] = ""
        self.api.replace_lease(self.namespace, self.name, current)

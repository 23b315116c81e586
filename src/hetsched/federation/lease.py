"""The federation's side of a member's lease: what it may assume about the member's expiry.

A renewal names the nonce of the previous answer; the member runs the lease from the time
it issued that nonce (``controlplane/fencing.py``). Both bounds follow on the federation's own
clock (clock rates are assumed equal; ``margin_s`` covers drift):

- **upper**: the member issued a nonce before the federation received it, so once a
  renewal naming nonce *n* has been sent, the member's expiry is at most *received(n) +
  lease*, whatever happens to the renewal on the wire. A federation that (re)starts sets it
  to *start + lease*: every nonce it ever named was received before that.
- **lower**: when an answer says the nonce was applied, the member's expiry is at least
  *sent(the request that obtained it) + lease*: the member issued the nonce after that
  request left.

So the member's jobs surely run under a live lease until ``lower - margin``, and have
surely stopped by ``upper + fence_after + margin`` (``fence_after``: how long the member
lets a task outlive its expiry, as it reports).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from hetsched.federation.member import Report

__all__ = ["LeaseBounds"]


@dataclass(slots=True)
class LeaseBounds:
    """One member's lease as the federation knows it (see the module docstring)."""

    lease_s: float
    margin_s: float
    #: the member's expiry is at most this (federation clock)
    upper: float
    #: ... and at least this
    lower: float = -math.inf
    #: how long the member lets a task outlive its expiry (its last report)
    fence_after_s: float = 30.0
    #: the nonce to name next, when it was received, and when its request was sent
    nonce: str | None = None
    nonce_received: float = 0.0
    nonce_requested: float = 0.0
    _named: str | None = None
    _named_requested: float = 0.0
    _sent: float = 0.0

    @classmethod
    def starting(
        cls,
        lease_s: float,
        margin_s: float,
        now: float,
        fence_after_s: float,
        longest_s: float | None = None,
    ) -> LeaseBounds:
        """The bounds of a federation that starts at ``now`` knowing no nonce; a member may
        hold an expiry from the ``longest_s`` lease the federation ever renewed with."""
        upper = now + max(lease_s, longest_s or 0.0)
        return cls(lease_s, margin_s, upper, fence_after_s=fence_after_s)

    def sending(self, now: float) -> str | None:
        """A renewal leaves now: the nonce it names (and the upper bound it may extend)."""
        self._named = self.nonce
        self._named_requested = self.nonce_requested
        self._sent = now
        if self.nonce is not None:
            self.upper = max(self.upper, self.nonce_received + self.lease_s)
        return self.nonce

    def answered(self, report: Report, now: float) -> None:
        """The answer to the renewal sent last arrived at ``now``."""
        if report.renewed and self._named is not None:
            self.lower = max(self.lower, self._named_requested + self.lease_s)
        self.fence_after_s = report.fence_after_s
        self.nonce = report.nonce
        self.nonce_received = now
        # the member issued it no earlier than this (a member that issues nonces on its own
        # says how old one may be when read)
        self.nonce_requested = self._sent - report.nonce_age_s

    def surely_live(self, now: float) -> bool:
        """The member's lease is live now, with the margin to spare."""
        return now < self.lower - self.margin_s

    @property
    def stopped_by(self) -> float:
        """When every task the member ran under this lease has surely stopped."""
        return self.upper + self.fence_after_s + self.margin_s

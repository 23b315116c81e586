"""The federation's lease bounds against the member's lease book, under any delays.

Both sides' real code: the federation's :class:`LeaseBounds` (what it may assume) and the
member's :class:`Fencing` (what it does), exchanging renewals whose trips on the wire take
any time. Whatever happens, the member's expiry stays within the federation's bounds: at
most ``upper`` (so its tasks have stopped by ``stopped_by``), and at least ``lower`` once a
renewal is confirmed (so the member is surely live before it).
"""

from __future__ import annotations

import math
import tempfile
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from hetsched.controlplane.fencing import Fencing
from hetsched.federation.lease import LeaseBounds
from hetsched.federation.member import Report

LEASE = 5.0


class Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def now(self) -> float:
        return self.t

    def wall(self) -> float:
        return 1_000_000.0 + self.t


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.floats(0.0, 3.0),  # wait before the next renewal
            st.floats(0.0, 6.0),  # the request on the wire
            st.floats(0.0, 6.0),  # the answer on the wire
            st.booleans(),  # the answer is lost (the federation hears nothing)
        ),
        min_size=1,
        max_size=30,
    )
)
def test_the_members_expiry_stays_within_the_federations_bounds(
    trips: list[tuple[float, float, float, bool]],
) -> None:
    clock = Clock()
    with tempfile.TemporaryDirectory() as home:
        member = Fencing(Path(home), backstop_s=3, clock=clock.now, wall=clock.wall)
        bounds = LeaseBounds.starting(LEASE, 0.0, 0.0, member.fence_after_s)
        now = 0.0
        for wait, there, back, lost in trips:
            now += wait
            clock.t = now
            nonce = bounds.sending(now)
            clock.t = now + there
            answer = member.renew("fed", LEASE, nonce, 0)
            expiry = clock.t + answer.expires_in_s if answer.live else -math.inf
            assert expiry <= bounds.upper + 1e-9
            if lost:
                now = clock.t
                continue
            now = clock.t + back
            report = Report(
                answer.nonce,
                answer.renewed,
                answer.live,
                answer.lapsed,
                answer.lapses,
                answer.live_jobs,
                answer.fence_after_s,
            )
            bounds.answered(report, now)
            if answer.renewed:
                assert bounds.lower <= expiry + 1e-9
            assert bounds.stopped_by >= expiry + member.fence_after_s - 1e-9

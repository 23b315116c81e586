"""The member side of the federation's lease: nonces, expiry, lapses, the lease file."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hetsched.controlplane.fencing import Fencing


class Clock:
    """A monotonic and a wall clock that move together, by hand."""

    def __init__(self, wall: float = 1_000_000.0) -> None:
        self.t = 0.0
        self.base = wall

    def mono(self) -> float:
        return self.t

    def wall(self) -> float:
        return self.base + self.t


def _fencing(home: Path, clock: Clock) -> Fencing:
    return Fencing(home, backstop_s=3, clock=clock.mono, wall=clock.wall)


def test_a_lease_runs_from_the_nonces_issue_not_from_the_renewal(tmp_path: Path) -> None:
    clock = Clock()
    leases = _fencing(tmp_path, clock)
    first = leases.renew("fed", 10.0, None, 0)
    assert (first.renewed, first.live) == (False, False)
    assert not leases.live("fed")
    # the renewal naming the first nonce arrives 4 s after the nonce was issued
    clock.t = 4.0
    second = leases.renew("fed", 10.0, first.nonce, 0)
    assert second.renewed and second.live
    assert second.expires_in_s == pytest.approx(6.0)
    clock.t = 9.9
    assert leases.live("fed")
    clock.t = 10.0
    assert not leases.live("fed")
    assert leases.lapsed() == {"fed": 10.0}


@pytest.mark.parametrize(
    ("nonce", "why"),
    [
        (None, "no nonce"),
        ("not-a-nonce", "unknown nonce"),
    ],
)
def test_a_renewal_without_a_known_nonce_renews_nothing(
    tmp_path: Path, nonce: str | None, why: str
) -> None:
    leases = _fencing(tmp_path, Clock())
    answer = leases.renew("fed", 10.0, nonce, 0)
    assert not answer.renewed and why in answer.why
    assert answer.nonce and answer.nonce != nonce


def test_a_lapse_stops_renewals_until_the_jobs_have_ended(tmp_path: Path) -> None:
    clock = Clock()
    leases = _fencing(tmp_path, clock)
    nonce = leases.renew("fed", 5.0, None, 0).nonce
    nonce = leases.renew("fed", 5.0, nonce, 0).nonce
    clock.t = 7.0
    # the last nonce was issued at t=0: the lease ran to t=5 and lapsed
    answer = leases.renew("fed", 5.0, nonce, 2)
    assert answer.lapsed and not answer.renewed and answer.lapses == 1
    assert "unknown nonce" in answer.why  # nonces of the old lease never renew
    answer = leases.renew("fed", 5.0, answer.nonce, 2)
    assert not answer.renewed and "still being stopped" in answer.why
    assert leases.lapsed() == {"fed": 5.0}
    answer = leases.renew("fed", 5.0, answer.nonce, 0)
    assert answer.renewed and answer.live and not answer.lapsed and answer.lapses == 1
    assert leases.lapsed() == {}


def test_jobs_that_lived_across_a_lapse_are_fenced(tmp_path: Path) -> None:
    clock = Clock()
    leases = _fencing(tmp_path, clock)
    nonce = leases.renew("fed", 5.0, None, 0).nonce
    leases.renew("fed", 5.0, nonce, 0)
    clock.t = 6.0
    assert leases.lapsed()
    lapse = clock.base + 5.0
    assert leases.fenced("fed", lapse - 3, None)
    assert leases.fenced("fed", lapse - 3, lapse + 1)
    assert not leases.fenced("fed", lapse - 3, lapse - 1)  # ended before it
    assert not leases.fenced("fed", lapse + 1, None)  # came after it
    assert not leases.fenced("other", lapse - 3, None)


def test_the_file_carries_the_expiry_and_a_restart_reads_it(tmp_path: Path) -> None:
    clock = Clock(wall=1_000_000.7)
    leases = _fencing(tmp_path, clock)
    nonce = leases.renew("fed", 10.0, None, 0).nonce
    leases.renew("fed", 10.0, nonce, 0)
    first = leases.lease_file("fed").read_text().splitlines()[0]
    assert int(first) == math.floor(1_000_010.7)
    # a restart 3 s later: still live (to the rounded-down second)
    clock.t = 3.0
    again = _fencing(tmp_path, clock)
    assert again.live("fed") and not again.lapsed()
    # a restart after the expiry: lapsed, with the lapse on record
    clock.t = 30.0
    late = _fencing(tmp_path, clock)
    assert not late.live("fed") and late.lapsed() == {"fed": 10.0}
    assert late.fenced("fed", 1_000_000.0, None)


@pytest.mark.parametrize("name", ["", "../x", "a/b", ".hidden", "x" * 64])
def test_federation_names_are_checked(tmp_path: Path, name: str) -> None:
    leases = _fencing(tmp_path, Clock())
    with pytest.raises(ValueError, match="federation name"):
        leases.renew(name, 10.0, None, 0)


@pytest.mark.parametrize("lease_s", [0.0, -1.0, math.inf, math.nan])
def test_lease_lengths_are_checked(tmp_path: Path, lease_s: float) -> None:
    with pytest.raises(ValueError, match="lease_s"):
        _fencing(tmp_path, Clock()).renew("fed", lease_s, None, 0)


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.floats(0.0, 3.0),  # wait before the federation sends its next renewal
            st.floats(0.0, 8.0),  # how long the renewal spends on the wire
            st.floats(0.0, 8.0),  # how long the answer spends on the wire
            st.integers(0, 3),  # which of the nonces received so far it names (0: last)
        ),
        min_size=1,
        max_size=25,
    )
)
def test_no_delay_extends_the_lease_past_the_federations_bound(
    steps: list[tuple[float, float, float, int]],
) -> None:
    """Whatever the delays, the member's lease never runs past the federation's bound:
    the latest time it received a nonce it has named, plus the lease."""
    import tempfile

    lease_s = 5.0
    clock = Clock()
    with tempfile.TemporaryDirectory() as home:
        leases = _fencing(Path(home), clock)
        received: list[tuple[str, float]] = []  # (nonce, when the federation got it)
        bound = -math.inf
        now = 0.0
        for wait, there, back, pick in steps:
            now += wait
            nonce = None
            if received:
                nonce, got = received[-1 - min(pick, len(received) - 1)]
                bound = max(bound, got + lease_s)
            clock.t = now + there  # the renewal reaches the member
            answer = leases.renew("fed", lease_s, nonce, 0)
            member_expiry = clock.t + answer.expires_in_s if answer.live else -math.inf
            assert member_expiry <= bound + 1e-9
            now = clock.t + back  # the answer reaches the federation
            received.append((answer.nonce, now))

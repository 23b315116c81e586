"""The API client's token bucket (``--kube-api-qps`` / ``--kube-api-burst``), on a clock of
the test's own."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hetsched.k8s.ratelimit import TokenBucket


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


@pytest.mark.parametrize(
    ("qps", "burst", "requests", "seconds"),
    [
        (50, 100, 100, 0.0),  # the burst goes at once
        (50, 100, 150, 1.0),  # then 50 a second
        (50, 100, 600, 10.0),
        (500, 100, 1100, 2.0),
        (1000, 1, 1000, 0.999),
    ],
)
def test_requests_wait_for_tokens(qps: float, burst: int, requests: int, seconds: float) -> None:
    clock = Clock()
    bucket = TokenBucket(qps, burst, clock, clock.sleep)
    for _ in range(requests):
        bucket.take()
    assert clock.now == pytest.approx(seconds)


@given(
    qps=st.floats(1, 5000),
    burst=st.integers(1, 500),
    gaps=st.lists(st.floats(0, 0.5), min_size=1, max_size=200),
)
def test_never_more_than_burst_plus_qps_times_elapsed(
    qps: float, burst: int, gaps: list[float]
) -> None:
    clock = Clock()
    bucket = TokenBucket(qps, burst, clock, clock.sleep)
    for gap in gaps:
        clock.now += gap
        bucket.take()
    assert len(gaps) <= burst + qps * clock.now + 1e-6


@pytest.mark.parametrize(("qps", "burst"), [(0, 10), (-1, 10), (10, 0)])
def test_a_limit_needs_a_rate_and_a_burst(qps: float, burst: int) -> None:
    with pytest.raises(ValueError, match="rate limit"):
        TokenBucket(qps, burst)

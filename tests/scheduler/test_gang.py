"""Gangs: all-or-nothing, one partial hold at a time, released after gang_timeout."""

from __future__ import annotations

from typing import Any

import pytest

from builders import gpu_node, job
from harness import Harness
from hetsched.cluster import ClusterState
from hetsched.framework.profile import parse_profile
from hetsched.model.lifecycle import JobState
from hetsched.scheduler import Bind, JobSubmitted, Scheduler


def _core(hold: bool, timeout: float = 30.0) -> Scheduler:
    nodes = [gpu_node(f"g{i}", gpus=4) for i in range(3)]  # 12 GPUs
    profile = parse_profile(
        {"gang": {"hold": hold, "timeout_s": timeout, "backoff_s": 5, "max_backoff_s": 20}}
    )
    return Scheduler(ClusterState(nodes), profile)


def _background(durations: list[float]) -> list[Any]:
    return [
        job(f"bg{i}", gpus=1, estimated_runtime_s=d, submit_time=0.0)
        for i, d in enumerate(durations)
    ]


def _gangs() -> list[Any]:
    return [
        job(f"gang{k}", gpus=1, replicas=8, estimated_runtime_s=50.0, submit_time=1.0)
        for k in (1, 2)
    ]


@pytest.mark.parametrize("hold", [True, False])
@pytest.mark.parametrize(
    "durations",
    [
        [10, 20, 30, 40, 50, 60],
        [10, 45, 80, 80, 90, 100],  # long enough that the first hold times out
        [5, 5, 5, 5, 5, 5],
    ],
)
def test_two_gangs_over_half_the_cluster_both_complete(hold: bool, durations: list[float]) -> None:
    core = _core(hold, timeout=30.0)
    longest: list[float] = [0.0]
    holders: list[int] = []

    def watch(now: float) -> None:
        holding = [r for r in core.jobs.values() if r.held]
        holders.append(len(holding))
        for record in holding:
            assert record.hold_since is not None
            longest[0] = max(longest[0], now - record.hold_since)
            # partial holds never reach the gang minimum
            assert len(record.held) < record.job.gang_min

    h = Harness(core, after=watch)
    h.submit(_background(durations))
    h.submit(_gangs())
    h.run(until=1000.0)
    for gang in ("gang1", "gang2"):
        record = core.record(gang)
        assert record.state is JobState.SUCCEEDED
        binds = [a for _, a in h.actions(Bind) if a.job_id == gang]
        assert len(binds) == 1 and len(binds[0].placements) == 8
    assert longest[0] <= 30.0
    assert max(holders) <= 1  # never two partial gangs at once
    if not hold:
        assert longest[0] == 0.0
    assert core.state.allocations == {}


def test_a_hold_that_cannot_complete_is_released_at_the_timeout_with_backoff() -> None:
    core = _core(hold=True, timeout=30.0)
    h = Harness(core)
    h.submit(_background([500.0] * 6))
    h.submit([job("gang", gpus=1, replicas=8, estimated_runtime_s=10.0, submit_time=1.0)])
    h.run(until=200.0)
    record = core.record("gang")
    # the documented rule: hold from t=1, release after timeout_s, wait backoff_s doubling
    # up to max_backoff_s, hold again at once (the background jobs never end)
    expected, t, k = [], 1.0, 0
    while t + 30.0 <= 200.0:
        t += 30.0
        expected.append(t)
        k += 1
        t += min(20.0, 5.0 * 2 ** (k - 1))
    timeouts = [e for e in record.history if e.cause.startswith("gang timeout")]
    assert [e.time for e in timeouts] == expected == [31.0, 66.0, 106.0, 156.0]
    assert record.gang_timeouts == 4
    assert record.explanation is not None
    assert "gang" in str(record.explanation)


def test_gang_explanation_reports_the_hold() -> None:
    core = _core(hold=True)
    core.handle([JobSubmitted(j) for j in _background([100.0] * 6)], 0)
    core.handle([JobSubmitted(job("gang", gpus=1, replicas=8))], 1)
    explanation = core.record("gang").explanation
    assert explanation is not None
    assert "holds 6 of the 8 tasks" in str(explanation)
    assert len(core.record("gang").held) == 6

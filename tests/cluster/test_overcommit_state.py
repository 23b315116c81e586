"""Oversubscription for best-effort work: the slack beyond capacity that only best-effort
allocations take, with the capacity invariants kept for guaranteed work."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hetsched.cluster import ClusterState
from hetsched.cluster.placement import Placement
from hetsched.cluster.state import AllocationError
from hetsched.model.device import Node


def state(cpu_factor: float = 1.5, mem_factor: float = 1.0) -> ClusterState:
    s = ClusterState([Node("n", 4000, 8192)])
    s.set_overcommit(cpu_factor, mem_factor)
    s.best_effort_jobs.add("be")
    return s


# (key, cpu) allocated in order -> (cpu_free, cpu_slack) after, or the error
CASES: list[tuple[list[tuple[str, int]], tuple[int, int] | str]] = [
    ([("be/0", 1500)], (4000, 500)),
    ([("be/0", 2000), ("g/0", 4000)], (0, 0)),
    ([("be/0", 3000)], (3000, 0)),
    ([("be/0", 3000), ("g/0", 3500)], "g/0: cpu: want 3500m, free 3000m"),
    ([("be/0", 6000)], (0, 0)),
    ([("be/0", 6001)], "be/0: cpu: want 6001m, free 6000m"),
    ([("g/0", 4000), ("be/0", 2000)], (0, 0)),
    ([("g/0", 4000), ("be/0", 2001)], "be/0: cpu: want 2001m, free 2000m"),
    ([("g/0", 4001)], "g/0: cpu: want 4001m, free 4000m"),
]


@pytest.mark.parametrize(("steps", "expected"), CASES)
def test_best_effort_takes_the_slack_first(
    steps: list[tuple[str, int]], expected: tuple[int, int] | str
) -> None:
    s = state()
    try:
        for key, cpu in steps:
            s.allocate(key, Placement("n", cpu, 0))
    except AllocationError as exc:
        assert str(exc) == expected
        return
    assert (int(s.cpu_free[0]), int(s.cpu_slack[0])) == expected


def test_release_gives_back_exactly_and_a_fork_is_independent() -> None:
    s = state(1.5, 2.0)
    s.allocate("be/0", Placement("n", 2500, 10000))
    assert (int(s.cpu_free[0]), int(s.mem_free[0])) == (3500, 6384)
    fork = s.fork()
    fork.release("be/0")
    assert (int(s.cpu_slack[0]), int(s.mem_slack[0])) == (0, 0)
    s.release("be/0")
    assert (int(s.cpu_free[0]), int(s.cpu_slack[0])) == (4000, 2000)
    assert (int(s.mem_free[0]), int(s.mem_slack[0])) == (8192, 8192)
    assert (int(fork.cpu_free[0]), int(fork.cpu_slack[0])) == (4000, 2000)


def test_factors_are_refused_below_one_and_while_slack_is_held() -> None:
    s = state()
    with pytest.raises(ValueError, match="at least 1"):
        s.set_overcommit(0.5, 1.0)
    s.allocate("be/0", Placement("n", 4500, 0))
    with pytest.raises(AllocationError, match="while best-effort work holds slack"):
        s.set_overcommit(1.0, 1.0)


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(st.booleans(), st.booleans(), st.integers(0, 3000), st.integers(0, 9000)),
        max_size=30,
    )
)
def test_guaranteed_work_never_exceeds_capacity(
    steps: list[tuple[bool, bool, int, int]],
) -> None:
    s = state(1.5, 1.25)
    s.best_effort_jobs.add("be")
    held: dict[str, tuple[bool, int, int]] = {}
    for index, (release, best_effort, cpu, mem) in enumerate(steps):
        if release and held:
            key = sorted(held)[index % len(held)]
            s.release(key)
            del held[key]
            continue
        key = f"{'be' if best_effort else 'g'}/{index}"
        try:
            s.allocate(key, Placement("n", cpu, mem))
        except AllocationError:
            continue
        held[key] = (best_effort, cpu, mem)
        guaranteed = sum(c for b, c, _ in held.values() if not b)
        total_cpu = sum(c for _, c, _ in held.values())
        total_mem = sum(m for _, _, m in held.values())
        assert guaranteed <= 4000 and total_cpu <= 6000 and total_mem <= 10240
        assert 0 <= s.cpu_free[0] <= 4000 and 0 <= s.cpu_slack[0] <= 2000
        assert 0 <= s.mem_free[0] <= 8192 and 0 <= s.mem_slack[0] <= 2048
    for key in list(held):
        s.release(key)
    assert (int(s.cpu_free[0]), int(s.cpu_slack[0])) == (4000, 2000)
    assert (int(s.mem_free[0]), int(s.mem_slack[0])) == (8192, 2048)

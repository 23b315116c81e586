"""EASY backfill: later jobs start only when they cannot delay the head's reservation."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from builders import gpu_node, job
from harness import Harness
from hetsched.cluster import ClusterState
from hetsched.framework.profile import parse_profile
from hetsched.model.job import Job
from hetsched.model.lifecycle import JobState
from hetsched.scheduler import Bind, Scheduler


def _core(mode: str, backfill: bool, nodes: int = 1, default_runtime: float = 3600) -> Scheduler:
    profile = parse_profile(
        {
            "queue_sort": {"name": "fifo", "args": {"mode": mode}},
            "backfill": {"enabled": backfill, "default_runtime_s": default_runtime},
        }
    )
    return Scheduler(ClusterState([gpu_node(f"g{i}", gpus=8) for i in range(nodes)]), profile)


def _run(core: Scheduler, jobs: list[Job], until: float = 10_000.0) -> Harness:
    h = Harness(core)
    h.submit(jobs)
    h.run(until)
    return h


def _starts(h: Harness) -> dict[str, float]:
    return {a.job_id: t for t, a in h.actions(Bind)}


def _utilization(h: Harness, gpus: int) -> float:
    end = max(i.end for i in h.intervals)
    return h.busy_device_seconds(end) / (gpus * end)


def _example() -> list[Job]:
    return [
        job("j1", gpus=4, estimated_runtime_s=10.0),
        job("head", gpus=8, estimated_runtime_s=10.0),
        job("short", gpus=2, estimated_runtime_s=5.0),  # ends before the head's start
        job("long", gpus=2, estimated_runtime_s=20.0),  # would delay the head
    ]


@pytest.mark.parametrize(
    ("mode", "backfill", "expected"),
    [
        ("strict", False, {"j1": 0, "head": 10, "short": 20, "long": 20}),
        ("best_effort", False, {"j1": 0, "short": 0, "long": 0, "head": 20}),
        ("strict", True, {"j1": 0, "short": 0, "head": 10, "long": 20}),
        ("best_effort", True, {"j1": 0, "short": 0, "head": 10, "long": 20}),
    ],
)
def test_easy_backfill_table(mode: str, backfill: bool, expected: dict[str, float]) -> None:
    h = _run(_core(mode, backfill), _example())
    assert _starts(h) == expected
    if backfill:
        assert h.core.record("head").reserved_starts == [10.0]


def test_backfill_beats_strict_fifo_on_utilization() -> None:
    jobs = _example()[:3]  # j1, head, short
    strict = _run(_core("strict", False), jobs)
    easy = _run(_core("strict", True), jobs)
    busy = 4 * 10 + 8 * 10 + 2 * 5
    # strict: short waits behind the head and ends at 25; easy: it runs at 0, all end at 20
    assert _utilization(strict, 8) == pytest.approx(busy / (8 * 25))
    assert _utilization(easy, 8) == pytest.approx(busy / (8 * 20))
    assert _utilization(easy, 8) > _utilization(strict, 8)


def test_explanation_names_the_reservation_and_the_jobs_to_finish() -> None:
    core = _core("strict", True)
    h = Harness(core)
    h.submit(_example())
    h.run(until=0.0)
    head = str(core.record("head").explanation)
    assert "reserved to start at t=10 once j1" in head
    long = str(core.record("long").explanation)
    assert "held back by the backfill reservation of job head" in long


def test_jobs_without_an_estimate_use_the_maximum_runtime_then_the_default() -> None:
    jobs = [
        job("j1", gpus=4, max_runtime_s=10.0),
        job("head", gpus=8, estimated_runtime_s=10.0),
        job("nomax", gpus=2),  # default 3600 s: would delay the head
    ]
    core = _core("strict", True)
    h = Harness(core, duration=lambda j: 5.0)
    h.submit(jobs)
    h.run(until=0.0)
    assert core.record("head").reserved_start == 10.0
    assert core.record("nomax").state is JobState.PENDING


workloads = st.lists(
    st.tuples(st.integers(1, 8), st.integers(1, 20), st.integers(0, 30)),
    min_size=2,
    max_size=14,
)


@settings(max_examples=80, deadline=None)
@given(specs=workloads, nodes=st.integers(1, 2), mode=st.sampled_from(["strict", "best_effort"]))
def test_generated_workloads_never_delay_the_head(
    specs: list[tuple[int, int, int]], nodes: int, mode: str
) -> None:
    jobs = [
        job(f"j{i:02d}", gpus=g, estimated_runtime_s=float(d), submit_time=float(t))
        for i, (g, d, t) in enumerate(specs)
    ]
    h = _run(_core(mode, True, nodes=nodes), jobs)
    starts = _starts(h)
    for record in h.core.jobs.values():
        assert record.state is JobState.SUCCEEDED
        if record.reserved_starts:
            first = record.reserved_starts[0]
            assert starts[record.id] <= first
            # later reservations only move earlier
            assert record.reserved_starts == sorted(record.reserved_starts, reverse=True)


def test_backfill_raises_utilization_over_strict_fifo_on_random_workloads() -> None:
    better = 0
    for seed in range(12):
        rng = random.Random(seed)
        jobs = [
            job(
                f"j{i:02d}",
                gpus=rng.choice([1, 2, 4, 8]),
                estimated_runtime_s=float(rng.randint(1, 30)),
                submit_time=float(rng.randint(0, 20)),
            )
            for i in range(20)
        ]
        strict = _utilization(_run(_core("strict", False), jobs), 8)
        easy = _utilization(_run(_core("strict", True), jobs), 8)
        assert easy >= strict - 1e-9
        better += easy > strict + 1e-9
    assert better >= 6

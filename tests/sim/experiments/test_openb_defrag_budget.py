"""The defragmentation planner's work budget in the openb experiment: what one arrival and
a whole run may spend, the requests it does not plan again, and a run's progress."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from builders import openb_mini_trace
from hetsched.cli.main import app
from hetsched.cluster import ClusterState
from hetsched.framework.cycle import CycleContext
from hetsched.framework.runtime import Framework
from hetsched.model.device import Device, Node
from hetsched.model.job import Job
from hetsched.sim.alibaba import TracePod
from hetsched.sim.experiments.openb import load_trace, policy_profile, run_openb, target_classes
from hetsched.sim.experiments.openb_defrag import DefragOption, OpenbDefrag

_pod = st.tuples(
    st.sampled_from([1000, 2000, 6000]),
    st.sampled_from([(0, 0), (1, 250), (1, 500), (1, 810), (1, 1000), (2, 1000)]),
)


def _node(name: str, gpus: int, cpu: int) -> Node:
    devices = tuple(Device(f"{name}/gpu{j}", "gpu", model="T4") for j in range(gpus))
    return Node(name, cpu, 4 * cpu, devices)


def _arrive(state: ClusterState, framework: Framework, mover: OpenbDefrag, job: Job) -> bool:
    """Place ``job`` as the experiment does (moving pods if it must); True if placed."""
    placement = framework.select(CycleContext(state, job, job.resources))
    if placement is None:
        placement = mover.place(job.id, job)
    if placement is None:
        return False
    state.allocate(job.id, placement)
    mover.placed(job.id, job, placement)
    return True


@settings(max_examples=60, deadline=None)
@given(
    gpus=st.lists(st.integers(1, 4), min_size=1, max_size=4),
    pods=st.lists(_pod, min_size=1, max_size=40),
    work=st.sampled_from([0.5, 1.0, 4.0]),
    max_work=st.sampled_from([1, 3, 16]),
)
def test_planning_never_spends_more_than_it_earned(
    gpus: list[int], pods: list[tuple[int, tuple[int, int]]], work: float, max_work: int
) -> None:
    """After every arrival the work spent is at most ``work_per_arrival`` per arrival so
    far, and no arrival spent more than ``max_work``."""
    state = ClusterState([_node(f"n{i}", count, 8000) for i, count in enumerate(gpus)])
    traced = [TracePod(f"p{i}", cpu, cpu, n, s, "") for i, (cpu, (n, s)) in enumerate(pods)]
    framework = Framework(policy_profile("fgd", 3, target_classes(traced)), seed=3)
    option = DefragOption(max_moved_fraction=1.0, work_per_arrival=work, max_work=max_work)
    mover = OpenbDefrag(state, framework, option)
    for number, pod in enumerate(traced, start=1):
        spent = mover.work
        _arrive(state, framework, mover, Job(pod.name, pod.request()))
        assert mover.arrivals == number
        assert mover.work - spent <= max_work
        assert mover.work <= work * number
    assert mover.most_work <= max_work


def _one_gpu() -> tuple[ClusterState, Framework, OpenbDefrag]:
    """One node with one GPU and 8 CPUs, and half of the GPU taken by pod ``a``."""
    state = ClusterState([_node("n0", 1, 8000)])
    framework = Framework(policy_profile("bestfit", 1, []), seed=1)
    option = DefragOption(max_moved_fraction=1.0, work_per_arrival=100.0)
    mover = OpenbDefrag(state, framework, option)
    assert _arrive(
        state, framework, mover, Job("a", TracePod("a", 1000, 1024, 1, 500, "").request())
    )
    return state, framework, mover


def test_a_request_refused_is_not_planned_again_nor_a_larger_one() -> None:
    """The whole GPU needs ``a`` gone, and ``a`` can go nowhere else: the plan ranks the
    node (1 unit), tries moving ``a`` (1), places ``a`` again (1: it fits nowhere) and
    ranks the nodes for ``a`` (1: none is left), 4 units in all. A larger request on the
    same devices is then not planned (no work); a smaller one is, the same 4 units."""
    state, framework, mover = _one_gpu()
    whole = TracePod("b", 1000, 1024, 1, 1000, "").request()
    assert not _arrive(state, framework, mover, Job("b", whole))
    assert (mover.work, mover.skipped, mover.arrivals) == (4, 0, 2)
    larger = TracePod("c", 4000, 4096, 1, 1000, "").request()
    assert not _arrive(state, framework, mover, Job("c", larger))
    assert (mover.work, mover.skipped, mover.arrivals) == (4, 1, 3)
    smaller = TracePod("d", 1000, 1024, 1, 600, "").request()
    assert not _arrive(state, framework, mover, Job("d", smaller))
    assert (mover.work, mover.skipped, mover.arrivals) == (8, 1, 4)
    assert set(state.allocations) == {"a"}


def test_without_a_budget_every_arrival_is_planned() -> None:
    """``work_per_arrival=None``: the same arrivals, each planned in full (4 units each)."""
    state, framework, _ = _one_gpu()
    mover = OpenbDefrag(
        state, framework, DefragOption(max_moved_fraction=1.0, work_per_arrival=None)
    )
    placement = state.allocations["a"]
    mover.placed("a", Job("a", TracePod("a", 1000, 1024, 1, 500, "").request()), placement)
    for name, cpu in (("b", 1000), ("c", 4000)):
        assert not _arrive(
            state, framework, mover, Job(name, TracePod(name, cpu, cpu, 1, 1000, "").request())
        )
    assert (mover.work, mover.skipped) == (8, 0)


def test_an_arrival_with_no_work_left_is_not_planned() -> None:
    """Half a unit per arrival: after ``a`` the planner has earned no whole unit, so the
    whole-GPU pod is refused without planning; it counts as not planned."""
    state = ClusterState([_node("n0", 1, 8000)])
    framework = Framework(policy_profile("bestfit", 1, []), seed=1)
    option = DefragOption(max_moved_fraction=1.0, work_per_arrival=0.5)
    mover = OpenbDefrag(state, framework, option)
    assert _arrive(
        state, framework, mover, Job("a", TracePod("a", 1000, 1024, 1, 500, "").request())
    )
    assert mover.work_left() == 0
    assert not _arrive(
        state, framework, mover, Job("b", TracePod("b", 1000, 1024, 1, 1000, "").request())
    )
    assert (mover.work, mover.skipped) == (0, 1)


@pytest.mark.parametrize(
    "option", [{"work_per_arrival": 0.0}, {"max_work": 0}], ids=["no-work", "no-max-work"]
)
def test_bad_work_limits_are_refused_naming_the_field(option: dict[str, float]) -> None:
    field = next(iter(option))
    with pytest.raises(ValueError, match=field):
        DefragOption(**option)  # type: ignore[arg-type]


def test_a_run_reports_its_progress_at_every_percent(tmp_path: Path) -> None:
    """130 % arrival: 131 reports, 0 % to 130 %, with the moves made so far."""
    trace = load_trace(openb_mini_trace(tmp_path), "mini")
    told: list[str] = []
    result = run_openb(trace, "bestfit", 42, defrag=DefragOption(0.5), progress=told.append)
    assert len(told) == 131 and told[0].startswith("0 % arrived")
    moved, rescued = result.extra["moved"], result.extra["rescued"]
    assert told[-1] == f"130 % arrived, {moved} pods moved for {rescued} arrivals"


def test_cli_json_reports_the_work_spent(tmp_path: Path) -> None:
    openb_mini_trace(tmp_path)
    args = ["sim", "openb", "--trace-dir", str(tmp_path), "--trace", "mini", "--policy", "bestfit"]
    result = CliRunner().invoke(app, [*args, "--seed", "42", "--defrag", "0.5", "-o", "json"])
    assert result.exit_code == 0, result.output
    moved = json.loads(result.output)["defrag"]
    assert 0 < moved["most_work_per_arrival"] <= moved["work_spent"]
    assert moved["arrivals_not_planned"] >= 0

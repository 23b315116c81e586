"""Best-effort jobs on oversubscribed capacity, through the core: the profile's overcommit
lets them past a node's capacity (up to factor x capacity); guaranteed jobs never are."""

from __future__ import annotations

from collections.abc import Sequence

from builders import cpu_node, job
from hetsched.cluster import ClusterState
from hetsched.framework.profile import parse_profile
from hetsched.model.lifecycle import JobState
from hetsched.scheduler import Action, Bind, JobSubmitted, Scheduler, TaskFinished


def binds(actions: Sequence[Action]) -> list[str]:
    return [a.job_id for a in actions if isinstance(a, Bind)]


def core(factor: float) -> Scheduler:
    profile = parse_profile({"name": "oc", "overcommit": {"cpu": factor}})
    return Scheduler(ClusterState([cpu_node("n", cpu=4000, memory=8192)]), profile)


def test_best_effort_work_fits_past_capacity_up_to_the_factor() -> None:
    sched = core(1.5)
    actions = sched.handle(
        [
            JobSubmitted(job("g", cpu=4000)),
            JobSubmitted(job("be1", cpu=1500, best_effort=True)),
            JobSubmitted(job("be2", cpu=1000, best_effort=True)),  # 6500m > 1.5 x 4000m
            JobSubmitted(job("g2", cpu=500)),  # guaranteed: capacity is taken
        ],
        0,
    )
    assert binds(actions) == ["g", "be1"]
    assert sched.record("be2").state is JobState.PENDING
    assert sched.record("g2").state is JobState.PENDING
    # be1 ends: its slack comes back, and be2 takes it; g2 still does not fit
    actions = sched.handle([TaskFinished("be1", 0, 1)], 1)
    assert binds(actions) == ["be2"]
    assert sched.state.best_effort_jobs == {"be2"}


def test_without_overcommit_best_effort_is_held_to_capacity() -> None:
    sched = core(1.0)
    actions = sched.handle(
        [JobSubmitted(job("g", cpu=4000)), JobSubmitted(job("be", cpu=100, best_effort=True))],
        0,
    )
    assert binds(actions) == ["g"]


def test_a_best_effort_job_larger_than_capacity_is_not_unresolvable() -> None:
    sched = core(2.0)
    assert binds(sched.handle([JobSubmitted(job("be", cpu=6000, best_effort=True))], 0)) == ["be"]
    assert sched.state.cpu_free.tolist() == [2000]

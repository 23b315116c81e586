"""StartFailed: a run the driver could not start goes back to the queue as it was."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from builders import gpu_node, job
from hetsched.cluster import ClusterState
from hetsched.model.job import RestartPolicy
from hetsched.model.lifecycle import JobState
from hetsched.scheduler import (
    Action,
    Bind,
    Change,
    JobSubmitted,
    JobTransition,
    Kill,
    Scheduler,
    StartFailed,
    TaskStopped,
    Tick,
)


def binds(actions: Sequence[Action]) -> list[Bind]:
    return [a for a in actions if isinstance(a, Bind)]


def gang_core() -> tuple[Scheduler, Bind]:
    core = Scheduler(ClusterState([gpu_node("a", gpus=2), gpu_node("b", gpus=2)]))
    (bound,) = binds(core.handle([JobSubmitted(job("g", gpus=2, replicas=2, gang=2))], 0))
    return core, bound


def test_a_failed_start_stops_every_task_and_requeues_the_job_backed_off() -> None:
    core, bound = gang_core()
    actions = core.handle([StartFailed("g", bound.run, "binding refused", backoff_s=5)], 1)
    kills = [a for a in actions if isinstance(a, Kill)]
    assert sorted((k.task, k.run) for k in kills) == [(0, 1), (1, 1)]
    (change,) = [a for a in actions if isinstance(a, JobTransition)]
    assert (change.source, change.target, change.change) == (
        JobState.RUNNING,
        JobState.PENDING,
        Change.START_FAILED,
    )
    assert change.cause == "run 1 could not start: binding refused"
    record = core.record("g")
    assert (record.state, record.restarts, record.placements) == (JobState.PENDING, 0, {})
    # the allocations stay held until the tasks are reported stopped
    assert int(core.state.dev_free.sum()) == 0
    stopped = [TaskStopped("g", k.task, k.run) for k in kills]
    assert not binds(core.handle(stopped, 2))  # backed off until t=6
    assert core.next_wakeup() == 6
    (again,) = binds(core.handle([Tick()], 6))
    assert again.run == 2
    assert core.record("g").state is JobState.RUNNING


@pytest.mark.parametrize("run", [0, 2])
def test_a_report_for_another_run_is_ignored(run: int) -> None:
    core, _ = gang_core()
    assert core.handle([StartFailed("g", run, "late")], 1) == []
    assert core.record("g").state is JobState.RUNNING


def test_a_report_for_a_job_that_is_not_running_is_ignored() -> None:
    core = Scheduler(ClusterState([gpu_node("a", gpus=1)]))
    core.handle([JobSubmitted(job("big", gpus=4))], 0)
    assert [a for a in core.handle([StartFailed("big", 0, "x")], 1) if isinstance(a, Kill)] == []
    assert core.handle([StartFailed("unknown", 1, "x")], 1) == []
    assert core.record("big").state is JobState.PENDING


def test_no_restart_is_counted_against_the_policy() -> None:
    core = Scheduler(ClusterState([gpu_node("a", gpus=1)]))
    spec = job("r", gpus=1, restart_policy=RestartPolicy.ON_FAILURE, max_restarts=1)
    (bound,) = binds(core.handle([JobSubmitted(spec)], 0))
    for attempt in range(3):
        actions = core.handle([StartFailed("r", bound.run, "refused")], 10 * attempt + 1)
        kill = next(a for a in actions if isinstance(a, Kill))
        (bound,) = binds(core.handle([TaskStopped("r", 0, kill.run)], 10 * attempt + 2))
    record = core.record("r")
    assert (record.state, record.restarts, record.run) == (JobState.RUNNING, 0, 4)

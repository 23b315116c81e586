"""A federated task its lease kept from starting: the run goes back to the queue (the
core's StartFailed), it does not fail the job, and it starts again once backed off."""

from __future__ import annotations

from builders import gpu_node, job
from hetsched.agent.executor import FENCED_EXIT
from hetsched.cluster import ClusterState
from hetsched.controlplane.planner import TurnPlanner
from hetsched.drivers import Exit
from hetsched.model.lifecycle import JobState
from hetsched.scheduler import JobSubmitted, Scheduler


def _exit(run: int, task: int, not_started: bool = False, stopped: bool = False) -> Exit:
    reason = "not started: its federation's lease had expired" if not_started else "stopped"
    code = FENCED_EXIT if not_started else None
    return Exit.of("j", task, run, code, stopped, reason, not_started)


def test_a_run_its_lease_kept_from_starting_is_requeued_not_failed() -> None:
    planner = TurnPlanner(Scheduler(ClusterState([gpu_node("g", gpus=2)])), kill_grace_s=1.0)
    first = planner.plan([JobSubmitted(job("j", gpus=1, replicas=2))], [], 0.0)
    assert sorted(s.key.task for s in first.starts) == [0, 1]
    # both tasks of the run were refused by the wrapper: one run back, not two
    refused = planner.plan([], [_exit(1, 0, not_started=True), _exit(1, 1, True)], 1.0)
    assert [t.target for t in refused.transitions] == [JobState.PENDING]
    assert "not started" in refused.transitions[0].cause
    assert sorted(s.key.task for s in refused.stops) == [0, 1]
    assert not refused.starts
    # the stops find no process: reported stopped; the run starts again after the backoff
    planner.plan([], [_exit(1, 0, stopped=True), _exit(1, 1, stopped=True)], 1.5)
    again = planner.plan([], [], 3.0)
    assert sorted((s.key.run, s.key.task) for s in again.starts) == [(2, 0), (2, 1)]
    assert [t.target for t in again.transitions] == [JobState.RUNNING]


def test_an_ordinary_exit_125_still_fails_the_task() -> None:
    planner = TurnPlanner(Scheduler(ClusterState([gpu_node("g", gpus=1)])), kill_grace_s=1.0)
    planner.plan([JobSubmitted(job("j", gpus=1))], [], 0.0)
    plan = planner.plan([], [Exit.of("j", 0, 1, FENCED_EXIT, False, "exit code 125")], 1.0)
    assert [t.target for t in plan.transitions] == [JobState.FAILED]

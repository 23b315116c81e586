"""Migration in the core: defragmentation, upgrades, and what a move does to a job."""

from __future__ import annotations

from typing import Any

import pytest

from builders import gpu_node, job
from hetsched.cluster import ClusterState
from hetsched.framework.profile import parse_profile
from hetsched.model.checkpoint import Checkpointing
from hetsched.model.device import Health
from hetsched.model.job import Job
from hetsched.model.lifecycle import JobState
from hetsched.model.speed import JobSpeed
from hetsched.scheduler import (
    Action,
    Bind,
    Change,
    DeviceHealthChanged,
    JobCancelled,
    JobSubmitted,
    JobTransition,
    Migrate,
    MigrationKind,
    Scheduler,
    TaskCheckpointed,
    TaskFinished,
    TaskStopped,
    Tick,
)
from hetsched.scheduler.migration import upgrade

SAVES = Checkpointing(interval_s=600, notice_s=20)
ON_B = 'device.attributes["model"] == "B"'


def _profile(**migration: Any) -> Any:
    spec: dict[str, Any] = {"min_runtime_s": 60, "defrag": {"enabled": True, "min_interval_s": 0}}
    for key, value in migration.items():
        if isinstance(value, dict):
            spec.setdefault(key, {}).update(value)
        else:
            spec[key] = value
    return parse_profile({"migration": spec})


def _core(**migration: Any) -> Scheduler:
    nodes = [gpu_node("n1", gpus=2, model="A"), gpu_node("n2", gpus=2, model="B")]
    return Scheduler(ClusterState(nodes), _profile(**migration))


def _of(actions: list[Action], kind: type) -> list[Any]:
    return [a for a in actions if isinstance(a, kind)]


def _spread(core: Scheduler, a: Job | None = None, b: Job | None = None) -> None:
    """a lands on n1 (model A, first), b on n2 (its selector asks for model B)."""
    core.handle([JobSubmitted(a or job("a", gpus=1, checkpoint=SAVES))], 0)
    core.handle([JobSubmitted(b or job("b", gpus=1, checkpoint=SAVES, selector=ON_B))], 0)
    assert core.record("a").placements[0].node == "n1"
    assert core.record("b").placements[0].node == "n2"


def test_defragmentation_moves_a_job_so_that_a_pending_one_fits() -> None:
    core = _core()
    _spread(core)
    actions = core.handle([JobSubmitted(job("c", gpus=2))], 100)
    (move,) = _of(actions, Migrate)
    # b's selector keeps it on B: a moves to n2, next to b, and c gets n1
    assert (move.job_id, move.run, move.tasks, move.kind) == ("a", 1, (0,), MigrationKind.DEFRAG)
    assert move.placements[0][1].node == "n2"
    assert (move.notice_s, move.grace_s, move.for_job) == (20, 30, "c")
    assert "to make room for c" in move.reason
    record = core.record("a")
    assert record.state is JobState.RUNNING and record.moving
    (change,) = [t for t in _of(actions, JobTransition) if t.job_id == "a"]
    assert change.change is Change.MIGRATING
    assert core.record("c").promised and core.record("c").nominated == {"a"}
    explanation = core.record("c").explanation
    assert explanation is not None and "defragmentation: moving a" in str(explanation)
    # a saves inside its notice, stops; its next run starts on n2 resuming, and c starts
    core.handle([TaskCheckpointed("a", 0, 1, step=5)], 105)
    actions = core.handle([TaskStopped("a", 0, 1)], 106)
    binds = {b.job_id: b for b in _of(actions, Bind)}
    assert binds["a"].run == 2 and binds["a"].placements[0][1].node == "n2"
    assert binds["a"].resume is not None and binds["a"].resume.step == 5
    assert binds["c"].placements[0][1].node == "n1"
    moved = [t for t in _of(actions, JobTransition) if t.job_id == "a"]
    assert [t.change for t in moved] == [Change.MIGRATED]
    assert core.record("a").migrations == 1 and not core.record("a").moving
    # the job never waited in line
    assert [h.target for h in core.record("a").history].count(JobState.PENDING) == 1


def test_defragmentation_is_off_by_default() -> None:
    core = Scheduler(
        ClusterState([gpu_node("n1", gpus=2, model="A"), gpu_node("n2", gpus=2, model="B")])
    )
    _spread(core)
    assert not _of(core.handle([JobSubmitted(job("c", gpus=2))], 1000), Migrate)


@pytest.mark.parametrize(
    ("a", "now", "moves"),
    [
        (job("a", gpus=1), 100, False),  # not checkpointable
        (job("a", gpus=1, checkpoint=SAVES, preemptible=False), 100, False),
        (job("a", gpus=1, checkpoint=SAVES), 30, False),  # younger than min_runtime_s
        (job("a", gpus=1, checkpoint=SAVES), 60, True),
    ],
)
def test_who_may_move(a: Job, now: float, moves: bool) -> None:
    core = _core()
    _spread(core, a, job("b", gpus=1, selector=ON_B))
    assert bool(_of(core.handle([JobSubmitted(job("c", gpus=2))], now), Migrate)) is moves


def test_a_job_too_young_to_move_moves_once_it_is_old_enough() -> None:
    core = _core()
    _spread(core)
    assert not _of(core.handle([JobSubmitted(job("c", gpus=2))], 10), Migrate)
    assert not _of(core.handle([Tick()], 40), Migrate)
    assert _of(core.handle([Tick()], 61), Migrate)


def test_plans_are_rate_limited() -> None:
    core = _core(defrag={"min_interval_s": 300})
    _spread(core)
    actions = core.handle([JobSubmitted(job("c", gpus=2, selector=ON_B))], 100)
    # c needs both B GPUs, and b can move nowhere else: its plan fails, and is not tried
    # again before t=400; a job that fails for good does not hold up plans for others
    assert not _of(actions, Migrate)
    (move,) = _of(core.handle([JobSubmitted(job("d", gpus=2))], 200), Migrate)
    assert move.for_job == "d"
    # a plan that moved jobs: no other plan before t=500
    core.handle([JobSubmitted(job("e", gpus=2))], 300)
    assert not _of(core.handle([Tick()], 499), Migrate)


def test_at_most_max_moves_jobs_move_for_one_job() -> None:
    nodes = [gpu_node("n1", gpus=2, model="A"), gpu_node("n2", gpus=2, model="B")]
    core = Scheduler(ClusterState(nodes), _profile(defrag={"max_moves": 1}))
    core.handle([JobSubmitted(job("a1", gpus=1, checkpoint=SAVES, selector=ON_B))], 0)
    core.handle([JobSubmitted(job("a2", gpus=1, checkpoint=SAVES))], 0)
    core.handle([JobSubmitted(job("a3", gpus=1, checkpoint=SAVES))], 0)
    # n1 holds a2 and a3, n2 holds a1: a 3-GPU job fits nowhere; 2 GPUs need 2 moves
    actions = core.handle([JobSubmitted(job("c", gpus=2, selector=ON_B))], 100)
    assert len(_of(actions, Migrate)) <= 1


def test_cancelling_a_moving_job_gives_back_where_it_was_going() -> None:
    core = _core()
    _spread(core)
    (move,) = _of(core.handle([JobSubmitted(job("c", gpus=2))], 100), Migrate)
    destination = move.placements[0][1]
    core.handle([JobCancelled("a")], 101)
    assert core.record("a").state is JobState.CANCELLED and not core.record("a").moving
    keys = [k for k, p in core.state.allocations.items() if p == destination]
    assert [str(k) for k in keys] == ["b/0#1"] or not keys
    actions = core.handle([TaskStopped("a", 0, 1)], 102)
    assert [b.job_id for b in _of(actions, Bind)] == ["c"]


def test_a_move_whose_destination_goes_away_sends_the_job_back_to_the_queue() -> None:
    core = _core()
    _spread(core)
    (move,) = _of(core.handle([JobSubmitted(job("c", gpus=2))], 100), Migrate)
    device = move.placements[0][1].devices[0].device_id
    core.handle([DeviceHealthChanged(device, Health.UNHEALTHY, "removed")], 101)
    record = core.record("a")
    assert record.state is JobState.PENDING and not record.moving
    assert "where it was moving to" in record.history[-1].cause


def test_a_moving_job_is_not_preempted() -> None:
    preemption = parse_profile({"post_filter": ["preemption"]}).post_filter
    profile = _profile().model_copy(update={"post_filter": preemption})
    nodes = [gpu_node("n1", gpus=2, model="A"), gpu_node("n2", gpus=2, model="B")]
    core = Scheduler(ClusterState(nodes), profile)
    _spread(core)
    _of(core.handle([JobSubmitted(job("c", gpus=2))], 100), Migrate)
    actions = core.handle([JobSubmitted(job("hi", gpus=1, priority=9, selector=ON_B))], 101)
    assert "a" not in {a.job_id for a in actions if type(a).__name__ == "Preempt"}


# -- upgrades ------------------------------------------------------------------------------

FAST_ON_B = JobSpeed({"A": 1.0, "B": 3.0})


def test_upgrade_moves_a_job_to_a_faster_model_when_one_is_free() -> None:
    nodes = [gpu_node("n1", gpus=1, model="A"), gpu_node("n2", gpus=1, model="B")]
    core = Scheduler(ClusterState(nodes), _profile())
    core.handle([JobSubmitted(job("hog", gpus=1, selector=ON_B))], 0)
    core.handle([JobSubmitted(job("j", gpus=1, checkpoint=SAVES, speed=FAST_ON_B))], 0)
    record = core.record("j")
    assert record.placements[0].node == "n1"
    assert not upgrade(core, record, 100)  # nothing faster is free
    core.handle([TaskFinished("hog", 0, 1)], 100)
    # the hook a policy calls inside a cycle: the job moves to the free B
    assert upgrade(core, record, 101)
    assert [p.node for p in record.moving.values()] == ["n2"]
    assert record.history[-1].cause.startswith("migrating to n2 (upgrade)")
    assert not upgrade(core, record, 102)  # it is moving already


@pytest.mark.parametrize(
    ("speed", "moves"),
    [
        (JobSpeed({"A": 1.0, "B": 3.0}), True),
        (JobSpeed({"A": 1.0, "B": 1.1}), False),  # below min_speedup 1.25
        (JobSpeed(), False),  # every model is equal
    ],
)
def test_the_upgrade_pass(speed: JobSpeed, moves: bool) -> None:
    nodes = [gpu_node("n1", gpus=1, model="A"), gpu_node("n2", gpus=1, model="B")]
    core = Scheduler(ClusterState(nodes), _profile(upgrade={"enabled": True}))
    core.handle([JobSubmitted(job("hog", gpus=1, selector=ON_B))], 0)
    core.handle([JobSubmitted(job("j", gpus=1, checkpoint=SAVES, speed=speed))], 0)
    actions = core.handle([TaskFinished("hog", 0, 1)], 100)
    assert bool(_of(actions, Migrate)) is moves


def test_a_job_its_driver_cannot_move_is_never_moved_and_the_waiting_job_says_why() -> None:
    core = _core()
    _spread(core, a=job("a", gpus=1, checkpoint=SAVES, movable=False))
    actions = core.handle([JobSubmitted(job("c", gpus=2))], 100)
    assert not _of(actions, Migrate)
    assert core.record("a").state is JobState.RUNNING and not core.record("a").moving
    explanation = core.record("c").explanation
    assert explanation is not None
    assert any("checkpointable a may not move" in line for line in explanation.reasons)

"""Checkpoints in the core: notices, resumes, victims that lose little, and what each
stop keeps."""

from __future__ import annotations

from typing import Any

import pytest

from builders import gpu_node, job
from hetsched.cluster import ClusterState
from hetsched.framework.profile import parse_profile
from hetsched.model.checkpoint import Checkpointing, SavedCheckpoint
from hetsched.model.device import Health
from hetsched.model.job import DeviceFailurePolicy, RestartPolicy
from hetsched.scheduler import (
    Action,
    Bind,
    DeviceHealthChanged,
    JobSubmitted,
    Preempt,
    Scheduler,
    TaskCheckpointed,
    TaskFinished,
    TaskStopped,
)

SAVES = Checkpointing(interval_s=600, notice_s=20)


def _core(gpus: int = 1, **args: Any) -> Scheduler:
    profile = parse_profile(
        {"queue_sort": "priority", "post_filter": [{"name": "preemption", "args": args}]}
    )
    return Scheduler(ClusterState([gpu_node("g", gpus=gpus)]), profile)


def _one(actions: list[Action], kind: type) -> Any:
    found = [a for a in actions if isinstance(a, kind)]
    assert len(found) == 1, actions
    return found[0]


def test_a_preempt_carries_the_victims_notice() -> None:
    core = _core(grace_s=5)
    core.handle([JobSubmitted(job("low", gpus=1, checkpoint=SAVES))], 0)
    preempt = _one(core.handle([JobSubmitted(job("hi", gpus=1, priority=9))], 100), Preempt)
    assert (preempt.notice_s, preempt.grace_s) == (20, 5)
    assert "gets a 20s notice to checkpoint" in preempt.reason


def test_a_job_without_checkpointing_gets_no_notice() -> None:
    core = _core()
    core.handle([JobSubmitted(job("low", gpus=1))], 0)
    preempt = _one(core.handle([JobSubmitted(job("hi", gpus=1, priority=9))], 100), Preempt)
    assert preempt.notice_s == 0
    assert "loses 100s of work" in preempt.reason


def test_a_checkpoint_inside_the_notice_is_what_the_next_run_resumes_from() -> None:
    core = _core()
    core.handle([JobSubmitted(job("low", gpus=1, checkpoint=SAVES))], 0)
    core.handle([JobSubmitted(job("hi", gpus=1, priority=9))], 100)
    # the victim saves during its notice, then stops
    core.handle([TaskCheckpointed("low", 0, 1, step=42, path="/ck/42")], 104)
    bind = _one(core.handle([TaskStopped("low", 0, 1)], 105), Bind)
    assert bind.job_id == "hi" and bind.resume is None
    bind = _one(core.handle([TaskFinished("hi", 0, 1)], 200), Bind)
    assert bind.job_id == "low" and bind.run == 2
    assert bind.resume == SavedCheckpoint(104.0, 1, 42, "/ck/42")
    story = core.record("low").story()
    assert story[-1].startswith("200.000 pending -> running: run 2")


def test_a_checkpointable_victim_does_not_start_again_before_it_stopped() -> None:
    profile = parse_profile({"queue_sort": "priority", "post_filter": ["preemption"]})
    core = Scheduler(ClusterState([gpu_node("a", gpus=1), gpu_node("b", gpus=1)]), profile)
    core.handle([JobSubmitted(job("low", gpus=1, checkpoint=SAVES))], 0)
    core.handle([JobSubmitted(job("mid", gpus=1, priority=1))], 1)
    preempt = _one(core.handle([JobSubmitted(job("hi", gpus=1, priority=9))], 10), Preempt)
    assert preempt.job_id == "low"
    # room appears on b, but low's run 1 is still in its notice: low does not start there
    # before it has saved and stopped (it would not resume from its save)
    actions = core.handle([TaskFinished("mid", 0, 1)], 11)
    assert not [a for a in actions if isinstance(a, Bind)]
    actions = core.handle([TaskStopped("low", 0, 1)], 12)
    assert sorted(a.job_id for a in actions if isinstance(a, Bind)) == ["hi", "low"]


def test_victims_that_checkpointed_recently_go_first_and_say_it_costs_little() -> None:
    core = _core(gpus=2)
    plain = Checkpointing(interval_s=600, notice_s=0)
    core.handle(
        [
            JobSubmitted(job("old", gpus=1, checkpoint=plain)),
            JobSubmitted(job("fresh", gpus=1, checkpoint=plain)),
        ],
        0,
    )
    core.handle([TaskCheckpointed("fresh", 0, 1), TaskCheckpointed("old", 0, 1, at=100)], 990)
    preempt = _one(core.handle([JobSubmitted(job("hi", gpus=1, priority=9))], 1000), Preempt)
    assert preempt.job_id == "fresh"
    assert "loses almost nothing: 10s of work since its checkpoint" in preempt.reason


def test_a_continuous_checkpointer_loses_nothing() -> None:
    core = _core()
    core.handle([JobSubmitted(job("low", gpus=1, checkpoint=Checkpointing(0, 0)))], 0)
    preempt = _one(core.handle([JobSubmitted(job("hi", gpus=1, priority=9))], 500), Preempt)
    assert "loses no work" in preempt.reason
    core.handle([TaskStopped("low", 0, 1)], 501)
    bind = _one(core.handle([TaskFinished("hi", 0, 1)], 600), Bind)
    assert bind.resume == SavedCheckpoint(500.0, 1)


@pytest.mark.parametrize(
    ("event", "kept"),
    [
        (TaskCheckpointed("j", 0, 1, step=1), True),
        (TaskCheckpointed("j", 0, 2), False),  # another run
        (TaskCheckpointed("j", 3, 1), False),  # no such task
        (TaskCheckpointed("x", 0, 1), False),  # no such job
        (TaskCheckpointed("j", 0, 1, at=50), True),  # said late: at its own time
    ],
)
def test_which_reports_count(event: TaskCheckpointed, kept: bool) -> None:
    core = _core()
    core.handle([JobSubmitted(job("j", gpus=1))], 0)
    core.handle([event], 60)
    saved = core.record("j").checkpoint
    assert (saved is not None) is kept
    if saved is not None:
        assert saved.time == (event.at if event.at is not None else 60)


def test_an_older_report_does_not_replace_a_newer_one() -> None:
    core = _core()
    core.handle([JobSubmitted(job("j", gpus=1))], 0)
    core.handle([TaskCheckpointed("j", 0, 1, step=9)], 60)
    core.handle([TaskCheckpointed("j", 0, 1, step=5, at=30)], 61)
    saved = core.record("j").checkpoint
    assert saved is not None and saved.step == 9


@pytest.mark.parametrize(
    ("policy", "resumes"),
    [
        (DeviceFailurePolicy.CHECKPOINT, True),
        (DeviceFailurePolicy.REQUEUE, False),
    ],
)
def test_device_failure_resumes_by_policy(policy: DeviceFailurePolicy, resumes: bool) -> None:
    core = Scheduler(ClusterState([gpu_node("g", gpus=2)]))
    core.handle([JobSubmitted(job("j", gpus=1, on_device_failure=policy, checkpoint=SAVES))], 0)
    device = core.record("j").placements[0].devices[0].device_id
    core.handle([TaskCheckpointed("j", 0, 1, step=3)], 10)
    actions = core.handle([DeviceHealthChanged(device, Health.UNHEALTHY, "removed")], 20)
    bind = _one(actions, Bind)
    assert bind.run == 2
    assert (bind.resume is not None) is resumes
    if resumes:
        assert bind.resume is not None and bind.resume.step == 3


def test_a_restart_after_a_failure_resumes_from_the_checkpoint() -> None:
    core = Scheduler(ClusterState([gpu_node("g", gpus=1)]))
    spec = job("j", gpus=1, restart_policy=RestartPolicy.ON_FAILURE, max_restarts=2)
    core.handle([JobSubmitted(spec)], 0)
    core.handle([TaskCheckpointed("j", 0, 1, step=7)], 10)
    bind = _one(core.handle([TaskFinished("j", 0, 1, succeeded=False)], 20), Bind)
    assert bind.run == 2 and bind.resume is not None and bind.resume.step == 7


def test_a_job_restored_with_its_run_still_stopping_waits_for_it_then_resumes() -> None:
    """After a driver restart inside a notice: the stopping task holds its GPU (nothing else
    gets it) until its TaskStopped, then the job's next run resumes from its checkpoint."""
    from hetsched.cluster.placement import DeviceShare, Placement
    from hetsched.model.lifecycle import JobState

    core = _core()
    placement = Placement("g", 1000, 1024, (DeviceShare("g/gpu0", 1000),))
    saved = SavedCheckpoint(40.0, 1, 7, "/ckpt/7")
    victim = job("v", gpus=1, checkpoint=SAVES)
    record = core.restore_stopping(victim, 1, {0: placement}, 0, 50.0, 60.0, saved)
    assert record.state is JobState.PENDING and record.waits_for_stop
    with pytest.raises(ValueError, match="already in the core"):
        core.restore_stopping(victim, 1, {0: placement}, now=60.0)
    # another job asking for the GPU waits: the stopping task holds it
    actions = core.handle([JobSubmitted(job("other", gpus=1, submit_time=60.0))], 60.0)
    assert not [a for a in actions if isinstance(a, Bind)]
    actions = core.handle([TaskStopped("v", 0, 1)], 70.0)
    bind = _one(actions, Bind)
    assert (bind.job_id, bind.run, bind.resume) == ("v", 2, saved)  # it waited longer


def test_restoring_a_stopping_run_that_does_not_fit_changes_nothing() -> None:
    from hetsched.cluster.placement import DeviceShare, Placement
    from hetsched.cluster.state import AllocationError

    core = _core()
    placement = Placement("g", 1000, 1024, (DeviceShare("g/gpu0", 1000),))
    core.restore(job("r", gpus=1), 1, {0: placement}, now=5.0)
    with pytest.raises(AllocationError):
        core.restore_stopping(job("v", gpus=1, checkpoint=SAVES), 1, {0: placement}, now=6.0)
    assert "v" not in core.jobs

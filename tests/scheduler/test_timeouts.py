"""Timeouts: maximum pending time (Reject) and maximum runtime (Kill), acting on Tick."""

from __future__ import annotations

import pytest

from builders import gpu_node, job
from harness import Harness
from hetsched.cluster import ClusterState
from hetsched.cluster.state import AllocationError
from hetsched.framework.profile import parse_profile
from hetsched.keys import TaskKey
from hetsched.model.lifecycle import JobState
from hetsched.scheduler import Bind, JobSubmitted, Kill, Reject, Scheduler, Tick


def _core(**timeouts: float) -> Scheduler:
    return Scheduler(ClusterState([gpu_node("g", gpus=4)]), parse_profile({"timeouts": timeouts}))


@pytest.mark.parametrize(
    ("job_limit", "profile_limit", "killed_at"),
    [
        (30.0, None, 30.0),
        (None, 50.0, 50.0),
        (30.0, 50.0, 30.0),  # the job's own limit wins
        (None, None, None),
    ],
)
def test_max_runtime_kills_and_fails_the_job(
    job_limit: float | None, profile_limit: float | None, killed_at: float | None
) -> None:
    core = _core(**({"max_runtime_s": profile_limit} if profile_limit else {}))
    h = Harness(core, duration=lambda j: 100.0, tick_s=10.0)
    h.submit([job("j", gpus=2, max_runtime_s=job_limit)])
    h.run(until=200.0)
    record = core.record("j")
    kills = h.actions(Kill)
    if killed_at is None:
        assert record.state is JobState.SUCCEEDED and not kills
        return
    assert [(t, a.reason) for t, a in kills] == [(killed_at, "exceeded max runtime")]
    assert record.state is JobState.FAILED
    assert record.history[-1].cause.startswith("exceeded max runtime")
    assert record.ended == killed_at
    assert core.state.allocations == {}  # released once the driver reported the stop


def test_max_pending_rejects_with_the_last_explanation() -> None:
    core = _core(max_pending_s=60.0)
    core.handle([JobSubmitted(job("big", gpus=4)), JobSubmitted(job("wait", gpus=1))], 0)
    assert core.handle([Tick()], 59.0) == []
    actions = core.handle([Tick()], 60.0)
    rejects = [a for a in actions if isinstance(a, Reject)]
    assert [r.job_id for r in rejects] == ["wait"]
    assert "pending longer than the maximum of 60s" in rejects[0].reason
    assert "no node fits" in rejects[0].reason
    record = core.record("wait")
    assert record.state is JobState.REJECTED and record.ended == 60.0
    assert record.explanation is not None and record.explanation.summary
    assert core.record("big").state is JobState.RUNNING


def test_next_wakeup_names_the_next_deadline() -> None:
    core = _core(max_pending_s=60.0, max_runtime_s=500.0)
    core.handle([JobSubmitted(job("big", gpus=4)), JobSubmitted(job("wait", gpus=1))], 5.0)
    assert core.next_wakeup() == 65.0
    core.handle([Tick()], 65.0)
    assert core.next_wakeup() == 505.0


def test_restore_takes_back_a_running_job_with_its_books() -> None:
    core = Scheduler(
        ClusterState([gpu_node("g", gpus=4)]),
        parse_profile({"flavors": ["gpu"], "queues": [{"name": "q", "nominal": {"gpu": 2}}]}),
    )
    first = Scheduler(ClusterState([gpu_node("g", gpus=4)]))
    bind = next(
        a
        for a in first.handle([JobSubmitted(job("j", gpus=3, queue="q"))], 0)
        if isinstance(a, Bind)
    )
    record = core.restore(
        job("j", gpus=3, queue="q", max_runtime_s=50.0),
        bind.run,
        dict(bind.placements),
        started=10.0,
        now=20.0,
    )
    assert record.state is JobState.RUNNING and record.run == bind.run and record.borrowing
    assert core.ledger.by_queue["q"]["gpu"] == 3000
    assert set(core.state.allocations) == {TaskKey("j", 0, bind.run)}
    # the timers know it: killed at started + max_runtime
    kills = [a for a in core.handle([Tick()], 60.0) if isinstance(a, Kill)]
    assert [k.reason for k in kills] == ["exceeded max runtime"]
    with pytest.raises(AllocationError):
        core.restore(job("k", gpus=3, queue="q"), 1, dict(bind.placements), now=61.0)
    assert "k" not in core.jobs

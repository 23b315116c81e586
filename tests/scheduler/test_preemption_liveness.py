"""Preemption must fire once it becomes allowed, even when no capacity was freed since the
preemptor's last attempt (the victims only aged past the minimum runtime)."""

from builders import gpu_node, job
from hetsched.cluster import ClusterState
from hetsched.framework import parse_profile
from hetsched.scheduler import Bind, JobSubmitted, Preempt, Scheduler, TaskStopped, Tick


def test_preemption_fires_when_the_victim_reaches_its_minimum_runtime() -> None:
    profile = parse_profile(
        {
            "queue_sort": "priority",
            "post_filter": [{"name": "preemption", "args": {"min_runtime_s": 10, "grace_s": 0}}],
        }
    )
    core = Scheduler(ClusterState([gpu_node("g", gpus=2)]), profile)
    core.handle([JobSubmitted(job("low", gpus=2, priority=0))], 0)
    early = core.handle([JobSubmitted(job("high", gpus=2, priority=10))], 1)
    assert not [a for a in early if isinstance(a, Preempt)]  # "low" is too young
    fired: list[tuple[float, Preempt]] = []
    for now in (5.0, 9.0, 11.0, 12.0, 20.0):
        fired += [(now, a) for a in core.handle([Tick()], now) if isinstance(a, Preempt)]
    assert [(t, a.job_id) for t, a in fired] == [(11.0, "low")]
    started = core.handle([TaskStopped("low", 0, 1)], 21)
    assert [a.job_id for a in started if isinstance(a, Bind)] == ["high"]

"""Queue reasons in explanations: position, quota numbers, gang, backfill, preemption."""

from __future__ import annotations

from builders import gpu_node, job
from hetsched.cluster import ClusterState
from hetsched.framework.profile import parse_profile
from hetsched.scheduler import JobSubmitted, Pending, Scheduler, TaskFinished


def test_position_in_queue_counts_jobs_ahead_in_the_same_queue() -> None:
    core = Scheduler(ClusterState([gpu_node("g", gpus=2)]))
    actions = core.handle(
        [
            JobSubmitted(job("run", gpus=2, queue="q1")),
            JobSubmitted(job("w1", gpus=1, queue="q1")),
            JobSubmitted(job("x1", gpus=1, queue="q2")),
            JobSubmitted(job("w2", gpus=1, queue="q1")),
        ],
        0,
    )
    lines = {a.job_id: a.explanation.lines()[1] for a in actions if isinstance(a, Pending)}
    assert lines == {
        "w1": "position 1 in queue q1",  # "run" started: it is not in line
        "x1": "position 1 in queue q2",
        "w2": "position 2 in queue q1",
    }
    # w1 and x1 start: w2 moves up to first; its record says so, but a new place in line is
    # not a new reason, so no Pending is emitted
    actions = core.handle([TaskFinished("run", 0, 1)], 5)
    assert core.position("w2") == ("q1", 1)
    assert core.why("w2").position == ("q1", 1)
    assert not [a for a in actions if isinstance(a, Pending)]


def test_quota_reason_gives_flavor_use_borrowed_and_available() -> None:
    profile = parse_profile(
        {
            "flavors": ["gpu"],
            "queues": [
                {"name": "org"},
                {
                    "name": "a",
                    "parent": "org",
                    "nominal": {"gpu": 2},
                    "borrowing_limit": {"gpu": 1},
                },
                {"name": "b", "parent": "org", "nominal": {"gpu": 6}},
            ],
        }
    )
    core = Scheduler(ClusterState([gpu_node("g", gpus=8)]), profile)
    core.handle([JobSubmitted(job(f"a{i}", gpus=1, queue="a")) for i in range(4)], 0)
    explanation = core.record("a3").explanation
    assert explanation is not None
    assert explanation.summary == "blocked by the quota of queue a"
    assert (
        "quota: queue a gpu: needs 1 gpu, uses 3 gpu (nominal 2 gpu, borrowed 1 gpu); "
        "0 gpu available (borrowing limit of a)"
    ) in explanation.reasons


def test_preemption_reason_names_the_victims() -> None:
    profile = parse_profile({"queue_sort": "priority", "post_filter": ["preemption"]})
    core = Scheduler(ClusterState([gpu_node("g", gpus=2)]), profile)
    core.handle([JobSubmitted(job("low", gpus=2, priority=0))], 0)
    core.handle([JobSubmitted(job("hi", gpus=2, priority=3))], 1)
    explanation = core.record("hi").explanation
    assert explanation is not None
    assert "preempting low (priority); it starts when they have stopped" in explanation.reasons


def test_why_names_the_jobs_that_must_finish_or_would_be_preempted() -> None:
    profile = parse_profile({"queue_sort": "priority", "post_filter": ["preemption"]})
    core = Scheduler(ClusterState([gpu_node("g", gpus=4)]), profile)
    core.handle(
        [
            JobSubmitted(job("short", gpus=2, priority=5, estimated_runtime_s=10)),
            JobSubmitted(job("long", gpus=2, priority=0, estimated_runtime_s=100)),
        ],
        0,
    )
    core.handle([JobSubmitted(job("w", gpus=4, priority=1))], 1)
    answer = core.why("w")
    # cycles explain cheaply; why() adds the what-ifs
    assert core.record("w").explanation is not None
    assert "would fit at t=100 once these finish (expected runtimes): short, long" in (
        answer.reasons
    )
    assert any(r.startswith("preemption cannot make room") for r in answer.reasons)
    assert core.why("short").summary == "job short is running"

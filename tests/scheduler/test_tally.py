"""The core's counters (``Scheduler.tally``) say what a scan of the live jobs says.

A driver reads the pending and running counts after every turn, the oldest pending job per
queue and the live jobs' task shapes at every metrics scrape; they come from counters kept
as jobs move. On generated workloads (priorities, gangs, holds, preemption, quotas,
timeouts, cancellations, device failures), after every call of the core, each answer must
equal the one a scan of every live job gives.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest
from generated_workloads import disturb, disturbances, drawn_job
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from builders import gpu_node, job
from harness import Harness
from hetsched.cluster import ClusterState
from hetsched.cluster.placement import DeviceShare, Placement
from hetsched.framework.profile import parse_profile
from hetsched.model.device import SHARE_UNITS
from hetsched.model.lifecycle import JobState
from hetsched.scheduler import JobCancelled, JobSubmitted, Scheduler
from hetsched.scheduler.tally import Shape

PREEMPTION = {"name": "preemption", "args": {"grace_s": 2, "min_runtime_s": 3}}
QUEUES = [
    {"name": "org"},
    {"name": "a", "parent": "org", "nominal": {"gpu": 4}, "lending_limit": {"gpu": 3}},
    {"name": "b", "parent": "org", "nominal": {"gpu": 3}, "borrowing_limit": {"gpu": 2}},
]
PROFILES: dict[str, dict[str, Any]] = {
    "fifo": {"queue_sort": "fifo"},
    "priority-preemption-timeouts": {
        "queue_sort": {"name": "priority", "args": {"aging_rate": 0.1}},
        "post_filter": [PREEMPTION],
        "timeouts": {"max_runtime_s": 25, "max_pending_s": 40},
    },
    "quotas-gangs": {
        "queue_sort": "drf",
        "flavors": ["gpu"],
        "queues": QUEUES,
        "post_filter": [PREEMPTION],
        "gang": {"hold": True, "timeout_s": 10, "backoff_s": 2, "max_backoff_s": 8},
    },
}

workloads = st.lists(
    st.fixed_dictionaries(
        {
            "queue": st.sampled_from(["a", "b"]),
            "priority": st.integers(0, 3),
            "gpus": st.sampled_from([0, 1, 1, 2, 4, 5]),
            "share": st.sampled_from([1000, 500]),
            "model": st.sampled_from([None, "A100"]),
            "replicas": st.integers(1, 3),
            "duration": st.integers(1, 30),
            "submit": st.integers(0, 40),
            "preemptible": st.booleans(),
        }
    ),
    min_size=1,
    max_size=16,
)


def scanned(core: Scheduler, now: float) -> tuple[Counter[str], int, dict[str, float]]:
    """Pending per queue, running, and the oldest pending wait per queue, by a scan."""
    pending: Counter[str] = Counter()
    running = 0
    oldest: dict[str, float] = {}
    for record in core.active_jobs():
        queue = record.job.queue
        if record.state is JobState.PENDING:
            pending[queue] += 1
            oldest[queue] = max(oldest.get(queue, 0.0), max(0.0, now - record.queued_since))
        elif record.state is JobState.RUNNING:
            running += 1
    return pending, running, oldest


def scanned_shapes(core: Scheduler, device_class: str) -> Counter[Shape]:
    shapes: Counter[Shape] = Counter()
    for record in core.active_jobs():
        resources = record.job.resources
        for request in resources.devices:
            choice = request.primary
            if choice.device_class == device_class:
                share = choice.share if choice.count == 1 else SHARE_UNITS
                shapes[(resources.cpu_milli, choice.count, share, choice.selector)] += (
                    record.job.replicas
                )
                break
    return shapes


def check_tally(core: Scheduler, now: float) -> None:
    pending, running, oldest = scanned(core, now)
    assert core.view.counts() == (pending, running)
    assert core.view.oldest_pending(now) == pytest.approx(oldest)
    assert core.view.live_shapes("gpu") == scanned_shapes(core, "gpu")


def replay(profile: dict[str, Any], workload: list[dict[str, Any]], events: list[Any]) -> int:
    nodes = [gpu_node("a0", gpus=4, cpu=16_000), gpu_node("v0", gpus=2, model="V100")]
    core = Scheduler(ClusterState(nodes), parse_profile(profile))
    specs = [drawn_job(i, w) for i, w in enumerate(workload)]
    calls = [0]

    def after(now: float) -> None:
        calls[0] += 1
        check_tally(core, now)

    h = Harness(core, check_explanations=False, after=after)
    h.submit(specs)
    disturb(h, core, specs, events)
    h.run(until=2000.0)
    check_tally(core, 2000.0)
    return calls[0]


@pytest.mark.parametrize("name", sorted(PROFILES))
def test_the_tally_says_what_a_scan_of_the_live_jobs_says(name: str) -> None:
    @settings(
        max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow], database=None
    )
    @given(workload=workloads, events=disturbances)
    def check(workload: list[dict[str, Any]], events: list[Any]) -> None:
        assert replay(PROFILES[name], workload, events) > 0

    check()


def test_a_restored_job_counts_as_running_and_its_end_takes_it_out() -> None:
    core = Scheduler(ClusterState([gpu_node("n", gpus=2)]), parse_profile({"queue_sort": "fifo"}))
    placement = Placement("n", 1000, 1024, (DeviceShare("n/gpu0", 1000),))
    core.restore(job("r", gpus=1), 1, {0: placement}, now=5.0)
    assert core.view.counts() == (Counter(), 1)
    assert core.view.live_shapes("gpu") == Counter({(1000, 1, 1000, None): 1})
    core.handle([JobSubmitted(job("p", gpus=2, submit_time=5.0))], 5.0)
    assert core.view.counts() == (Counter({"default": 1}), 1)
    check_tally(core, 5.0)
    core.handle([JobCancelled("r"), JobCancelled("p")], 6.0)
    check_tally(core, 6.0)
    assert core.view.counts() == (Counter(), 0)
    assert core.view.live_shapes("gpu") == Counter()


def test_the_oldest_pending_job_is_found_after_many_others_came_and_went() -> None:
    """Entries of jobs that started stay in a queue's heap only until they come up or
    outnumber the waiting jobs; the oldest waiting one is found all along."""
    core = Scheduler(ClusterState([gpu_node("n", gpus=1)]), parse_profile({"queue_sort": "fifo"}))
    core.handle([], 0.0)
    # a job that never fits (two GPUs on a one-GPU node) waits from t=0
    core.handle([JobSubmitted(job("old", gpus=2, submit_time=0.0))], 0.0)
    for i in range(300):
        t = 1.0 + i
        core.handle([JobSubmitted(job(f"j{i}", submit_time=t))], t)
        core.handle([JobCancelled(f"j{i}")], t + 0.5)
    assert core.view.oldest_pending(400.0) == {"default": 400.0}
    assert len(core.tally._ages["default"].heap) <= 2 * 1 + 64 + 1

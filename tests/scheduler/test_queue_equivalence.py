"""The incremental queue takes the same decisions as the full-sort cycle.

The incremental cycle merges the waiting queue's lanes and visits only the jobs that can
matter; the reference cycle (``Scheduler.use_reference_cycle``) sorts every waiting job and
visits all of them. On generated workloads (arrivals, sizes, gangs, priorities, users and
queues, durations, cancellations, device failures and repairs), feature by feature, both
must emit the same action stream: every Bind, Preempt, Kill, Reject and Pending, in order,
with the same explanations and places in line.

Each feature runs ``HETSCHED_EQUIVALENCE_EXAMPLES`` generated workloads (30 by default, so
``make test`` stays fast). The full check, 500 workloads per feature:

    HETSCHED_EQUIVALENCE_EXAMPLES=500 .venv/bin/pytest tests/scheduler/test_queue_equivalence.py
"""

from __future__ import annotations

import os
from typing import Any

import pytest
from generated_workloads import disturb, disturbances, drawn_job
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from builders import gpu_node
from harness import Harness
from hetsched.cluster import ClusterState
from hetsched.framework.profile import parse_profile
from hetsched.model.device import Node
from hetsched.model.lifecycle import TERMINAL
from hetsched.scheduler import Pending, Scheduler

EXAMPLES = int(os.environ.get("HETSCHED_EQUIVALENCE_EXAMPLES", "30"))

QUEUES = [
    {"name": "org"},
    {"name": "a", "parent": "org", "nominal": {"gpu": 4}, "lending_limit": {"gpu": 3}},
    {"name": "b", "parent": "org", "nominal": {"gpu": 3}, "borrowing_limit": {"gpu": 2}},
    {"name": "c", "parent": "org", "nominal": {"gpu": 1}},
]
PREEMPTION = {"name": "preemption", "args": {"grace_s": 2, "min_runtime_s": 3}}

#: feature -> profile (every profile also gets the generated workload's users and queues)
FEATURES: dict[str, dict[str, Any]] = {
    "fifo": {"queue_sort": "fifo"},
    "fifo-strict": {"queue_sort": {"name": "fifo", "args": {"mode": "strict"}}},
    "priority-aging": {"queue_sort": {"name": "priority", "args": {"aging_rate": 0.2}}},
    "priority-strict": {
        "queue_sort": {"name": "priority", "args": {"aging_rate": 0.1, "mode": "strict"}}
    },
    "drf": {"queue_sort": "drf"},
    "drf-queues": {
        "queue_sort": {"name": "drf", "args": {"by": "queue", "weights": {"a": 2}}},
    },
    "fairshare": {"queue_sort": {"name": "fairshare", "args": {"half_life_s": 30}}},
    "quotas-reclaim": {
        "queue_sort": "drf",
        "flavors": ["gpu"],
        "queues": QUEUES,
        "post_filter": [PREEMPTION],
    },
    "gang-holds": {
        "queue_sort": "fifo",
        "gang": {"hold": True, "timeout_s": 12, "backoff_s": 2, "max_backoff_s": 8},
    },
    "backfill": {
        "queue_sort": {"name": "priority", "args": {"aging_rate": 0.05}},
        "backfill": {"enabled": True, "default_runtime_s": 20},
    },
    "backfill-strict": {
        "queue_sort": {"name": "fifo", "args": {"mode": "strict"}},
        "backfill": {"enabled": True, "default_runtime_s": 20},
    },
    "timeouts": {
        "queue_sort": "drf",
        "timeouts": {"max_runtime_s": 25, "max_pending_s": 40},
    },
    "preemption": {"queue_sort": "priority", "post_filter": [PREEMPTION]},
    "everything": {
        "queue_sort": {"name": "priority", "args": {"aging_rate": 0.1}},
        "flavors": ["gpu"],
        "queues": QUEUES,
        "post_filter": [PREEMPTION],
        "gang": {"hold": True, "timeout_s": 10, "backoff_s": 2, "max_backoff_s": 8},
        "backfill": {"enabled": True, "default_runtime_s": 15},
        "timeouts": {"max_runtime_s": 40, "max_pending_s": 150},
    },
}


def cluster() -> list[Node]:
    return [
        gpu_node("a0", gpus=4, cpu=16_000),
        gpu_node("a1", gpus=2, cpu=8_000),
        gpu_node("v0", gpus=2, model="V100", memory_gib=32, cpu=8_000),
    ]


jobs = st.lists(
    st.fixed_dictionaries(
        {
            "user": st.sampled_from(["ann", "bob", "cy"]),
            "queue": st.sampled_from(["a", "b", "c"]),
            "priority": st.integers(0, 3),
            # 5 GPUs fit no node: unresolvable; a share below 1000 is a fraction of one
            "gpus": st.sampled_from([0, 1, 1, 1, 2, 2, 4, 5]),
            "share": st.sampled_from([1000, 1000, 500, 250]),
            "model": st.sampled_from([None, None, "A100", "V100"]),
            "replicas": st.integers(1, 3),
            "gang": st.sampled_from([None, None, 1]),
            "duration": st.integers(1, 30),
            "submit": st.integers(0, 40),
            "preemptible": st.booleans(),
        }
    ),
    min_size=1,
    max_size=18,
)


def replay(
    profile: dict[str, Any],
    workload: list[dict[str, Any]],
    events: list[tuple[int, str, int]],
    reference: bool,
    keep_ended: bool = True,
) -> list[tuple[float, object, object]]:
    core = Scheduler(ClusterState(cluster()), parse_profile(profile))
    core.keep_ended = keep_ended
    if reference:
        core.use_reference_cycle()
    specs = [drawn_job(i, w) for i, w in enumerate(workload)]
    h = Harness(core, check_explanations=False)
    h.submit(specs)
    disturb(h, core, specs, events)
    h.run(until=2000.0)
    if not keep_ended:
        # the book holds only jobs that live or still hold something
        for record in core.jobs.values():
            held = record.stopping or record.id in core.ledger.by_job
            assert record.state not in TERMINAL or held, record.id
    return [(t, a, a.explanation.position if isinstance(a, Pending) else None) for t, a in h.log]


@pytest.mark.parametrize("feature", sorted(FEATURES))
def test_incremental_queue_takes_the_decisions_of_the_full_sort(feature: str) -> None:
    profile = FEATURES[feature]

    @settings(
        max_examples=EXAMPLES,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow],
        database=None,
    )
    @given(workload=jobs, events=disturbances)
    def check(workload: list[dict[str, Any]], events: list[tuple[int, str, int]]) -> None:
        incremental = replay(profile, workload, events, reference=False)
        full_sort = replay(profile, workload, events, reference=True)
        assert incremental == full_sort

    check()


@pytest.mark.parametrize("feature", sorted(FEATURES))
def test_dropping_ended_jobs_changes_no_decision(feature: str) -> None:
    """A core that forgets ended jobs (``keep_ended`` off, as the simulator runs it) takes
    the decisions of one that keeps them, and keeps no ended job that holds nothing."""
    profile = FEATURES[feature]

    @settings(
        max_examples=max(10, EXAMPLES // 3),
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow],
        database=None,
    )
    @given(workload=jobs, events=disturbances)
    def check(workload: list[dict[str, Any]], events: list[tuple[int, str, int]]) -> None:
        kept = replay(profile, workload, events, reference=False)
        dropped = replay(profile, workload, events, reference=False, keep_ended=False)
        assert kept == dropped

    check()

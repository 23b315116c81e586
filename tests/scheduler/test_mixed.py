"""Every feature at once on generated workloads: the books stay straight and all jobs end."""

from __future__ import annotations

from dataclasses import replace

from hypothesis import example, given, settings
from hypothesis import strategies as st

from builders import gpu_node, job
from harness import Harness
from hetsched.cluster import ClusterState
from hetsched.framework.profile import parse_profile
from hetsched.keys import TaskKey
from hetsched.model.job import ResizeMode, TaskGroup, TaskRequest
from hetsched.model.lifecycle import JobState
from hetsched.scheduler import Bind, Preempt, Scheduler

PROFILE = {
    "queue_sort": {"name": "priority", "args": {"aging_rate": 0.1}},
    "post_filter": [{"name": "preemption", "args": {"grace_s": 1, "min_runtime_s": 2}}],
    "flavors": ["gpu"],
    "queues": [
        {"name": "org"},
        {"name": "a", "parent": "org", "nominal": {"gpu": 6}, "lending_limit": {"gpu": 4}},
        {"name": "b", "parent": "org", "nominal": {"gpu": 6}, "borrowing_limit": {"gpu": 3}},
    ],
    "gang": {"hold": True, "timeout_s": 15, "backoff_s": 2, "max_backoff_s": 8},
    "backfill": {"enabled": True, "default_runtime_s": 50},
    "timeouts": {"max_runtime_s": 60, "max_pending_s": 400},
}

DRIVER = TaskRequest(2000, 1024)

specs = st.lists(
    st.tuples(
        st.sampled_from(["a", "b"]),
        st.integers(0, 3),  # priority
        st.integers(1, 4),  # gpus per task
        st.integers(1, 3),  # replicas (a gang of all of them)
        st.integers(1, 30),  # duration
        st.integers(0, 40),  # submit time
        st.booleans(),  # preemptible
        # a plain job, an elastic one (resized either way), or one with groups (a CPU
        # driver beside its GPU workers)
        st.sampled_from([None, None, ResizeMode.CHECKPOINT, ResizeMode.LIVE, "groups"]),
    ),
    min_size=1,
    max_size=12,
)


@settings(max_examples=60, deadline=None)
@given(workload=specs)
# a gang holding part of its tasks preempts one second before its hold times out: the
# timeout must not back it off, or its promised room sits idle past the grace
@example(
    workload=[
        ("a", 0, 1, 1, 1, 0, False, None),
        ("a", 0, 1, 1, 1, 0, False, None),
        ("a", 0, 1, 1, 16, 4, False, None),
        ("a", 0, 1, 2, 6, 36, False, None),
        ("a", 0, 1, 3, 22, 19, False, None),
        ("a", 0, 2, 3, 3, 4, False, None),
        ("a", 0, 2, 3, 3, 4, False, None),
        ("a", 0, 3, 2, 15, 4, True, None),
        ("a", 1, 2, 3, 1, 14, False, None),
        ("a", 1, 2, 3, 23, 0, True, None),
        ("a", 2, 2, 3, 1, 12, False, None),
    ]
)
def test_all_features_together_keep_the_books_and_finish(
    workload: list[tuple[str, int, int, int, int, int, bool, ResizeMode | None]],
) -> None:
    """Elastic jobs in the mix (replicas from 2 up, at least one task): they grow, shrink
    and end like the rest, within the quotas."""
    core = Scheduler(
        ClusterState([gpu_node(f"g{i}", gpus=4) for i in range(3)]), parse_profile(PROFILE)
    )

    def books(now: float) -> None:
        assert set(core.ledger.by_key) == set(core.state.allocations)
        used = {q: core.ledger.by_queue.get(q, {}).get("gpu", 0) // 1000 for q in ("a", "b")}
        # the quota rule for two siblings with nothing unassigned: each borrows at most what
        # the other lends (a lends at most 4), and b at most its borrowing limit of 3
        assert used["b"] - 6 <= min(3, 4, max(0, 6 - used["a"]))
        assert used["a"] - 6 <= max(0, 6 - used["b"])
        holders = [r for r in core.jobs.values() if r.held]
        assert len(holders) <= 1
        for record in holders:  # released by the call at its deadline, never later
            assert record.hold_since is not None and now - record.hold_since < 15
        assert (core.state.dev_free >= 0).all()
        for record in core.elastic.values():
            if record.state is JobState.RUNNING:
                assert 1 <= record.count <= record.job.replicas
        for record in core.jobs.values():  # groups: all or nothing, never a partial hold
            if record.job.groups and record.state is JobState.PENDING:
                assert not record.held
                ahead = [
                    k
                    for k in core.state.allocations
                    if isinstance(k, TaskKey) and k.job == record.id and k.run > record.run
                ]
                assert not ahead, "a waiting job with groups holds part of its next run"
            elif record.job.groups and record.state is JobState.RUNNING and not record.stopping:
                assert len(record.placements) + len(record.finished) == record.job.replicas

    jobs = []
    for i, (q, p, g, r, d, t, pre, kind) in enumerate(workload):
        built = job(
            f"j{i:02d}",
            gpus=g,
            replicas=r,
            queue=q,
            priority=p,
            estimated_runtime_s=float(d),
            submit_time=float(t),
            preemptible=pre,
            min_replicas=1 if isinstance(kind, ResizeMode) and r > 1 else None,
            resize=kind if isinstance(kind, ResizeMode) else ResizeMode.CHECKPOINT,
        )
        if kind == "groups":
            groups = (TaskGroup("workers", r, built.resources), TaskGroup("driver", 1, DRIVER))
            built = replace(built, replicas=r + 1, groups=groups)
        jobs.append(built)
    h = Harness(core, after=books)
    h.submit(jobs)
    h.run(until=5000.0)
    ended = (JobState.SUCCEEDED, JobState.FAILED, JobState.REJECTED)
    for record in core.jobs.values():
        assert record.state in ended, record.story()
        if record.state is JobState.REJECTED:
            # only what the quotas can never admit waits that long here
            assert record.explanation is not None and "quota" in str(record.explanation)
    assert core.state.allocations == {}
    assert core.ledger.by_queue == {}
    # every preemption lets its preemptor start once the victims stop (grace 1 s)
    starts: dict[str, list[float]] = {}
    for t, a in h.actions(Bind):
        starts.setdefault(a.job_id, []).append(t)
    for t, a in h.actions(Preempt):
        assert isinstance(a, Preempt)
        assert any(t <= s <= t + 1 for s in starts.get(a.preemptor, [])), a

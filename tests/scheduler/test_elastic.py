"""Elastic jobs in the core: partial admission, the grow pass behind better claims, shrink
instead of evict, never below the minimum; outcomes computed by hand."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from builders import gpu_node, job
from hetsched.cluster import ClusterState
from hetsched.framework.profile import parse_profile
from hetsched.model.job import ResizeMode
from hetsched.model.lifecycle import JobState
from hetsched.scheduler import (
    Bind,
    JobCancelled,
    JobSubmitted,
    Kill,
    Migrate,
    MigrationKind,
    Preempt,
    Scheduler,
    TaskFinished,
    TaskStopped,
)


def _core(sort: str = "fifo", preemption: bool = False, gpus: int = 8) -> Scheduler:
    spec: dict[str, Any] = {"queue_sort": sort}
    if preemption:
        spec["post_filter"] = [{"name": "preemption", "args": {"grace_s": 5}}]
    return Scheduler(ClusterState([gpu_node("g0", gpus=gpus)]), parse_profile(spec))


def _of(actions: list[Any], kind: type) -> list[Any]:
    return [a for a in actions if isinstance(a, kind)]


def _used(core: Scheduler, job_id: str) -> int:
    """Devices the job's allocations hold, every run together."""
    return sum(len(p.devices) for k, p in core.state.allocations.items() if k.job == job_id)


def test_partial_admission_starts_at_the_largest_count_that_fits() -> None:
    core = _core()
    core.handle([JobSubmitted(job("b", gpus=3))], 0)
    actions = core.handle([JobSubmitted(job("e", gpus=1, replicas=8, min_replicas=2))], 1)
    (bind,) = _of(actions, Bind)
    # 8 GPUs, 3 taken: the 5 left, ranks 0..4, and each task is told the count
    assert [t for t, _ in bind.placements] == [0, 1, 2, 3, 4]
    assert bind.replicas == 5
    assert core.record("e").count == 5
    assert core.record("e").counts == [(1, 5)]
    assert "e" not in {r.id for r in core.waiting()}  # it waits for nothing


def test_below_its_minimum_it_waits() -> None:
    core = _core()
    core.handle([JobSubmitted(job("b", gpus=7))], 0)
    actions = core.handle([JobSubmitted(job("e", gpus=1, replicas=8, min_replicas=2))], 1)
    assert not _of(actions, Bind)
    assert core.record("e").state is JobState.PENDING
    # once 2 are free it starts with them, then grows when the rest is freed
    actions = core.handle([TaskFinished("b", 0, 1)], 2)
    assert [b.replicas for b in _of(actions, Bind)] == [8]


def test_grow_waits_behind_a_waiting_job_with_a_better_claim() -> None:
    core = _core()
    core.handle([JobSubmitted(job("b", gpus=6))], 0)
    core.handle([JobSubmitted(job("e", gpus=1, replicas=8, min_replicas=2))], 1)
    assert core.record("e").count == 2
    # w (8 GPUs) waits; b ends and frees 6, which w cannot use yet: e must not take them
    core.handle([JobSubmitted(job("w", gpus=8))], 2)
    actions = core.handle([TaskFinished("b", 0, 1)], 3)
    assert not _of(actions, Migrate) and not _of(actions, Bind)
    assert core.record("e").count == 2 and _used(core, "e") == 2
    # w gives up: nothing with a better claim waits, so e grows through a restart at 8
    actions = core.handle([JobCancelled("w")], 4)
    (move,) = _of(actions, Migrate)
    assert move.kind is MigrationKind.RESIZE and move.tasks == (0, 1)
    assert [t for t, _ in move.placements] == list(range(8))
    assert core.record("e").count == 8 and _used(core, "e") == 8  # kept ranks held once
    core.handle([TaskStopped("e", 0, 1)], 5)
    actions = core.handle([TaskStopped("e", 1, 1)], 6)
    (bind,) = _of(actions, Bind)
    assert (bind.run, bind.replicas, len(bind.placements)) == (2, 8, 8)
    assert core.record("e").counts == [(1, 2), (6, 8)]
    assert set(core.state.allocations) == {k for k in core.state.allocations if k.run == 2}


def test_a_waiting_job_of_lower_priority_does_not_hold_a_grow_back() -> None:
    core = _core(sort="priority")
    core.handle([JobSubmitted(job("b", gpus=6, priority=5))], 0)
    core.handle([JobSubmitted(job("e", gpus=1, replicas=8, min_replicas=2, priority=3))], 1)
    core.handle([JobSubmitted(job("w", gpus=8, priority=1))], 2)
    actions = core.handle([TaskFinished("b", 0, 1)], 3)
    (move,) = _of(actions, Migrate)
    assert len(move.placements) == 8
    assert core.record("w").state is JobState.PENDING


def test_live_grow_binds_the_new_ranks_into_the_running_run() -> None:
    core = _core()
    core.handle([JobSubmitted(job("b", gpus=4))], 0)
    elastic = job("e", gpus=1, replicas=8, min_replicas=2, resize=ResizeMode.LIVE)
    core.handle([JobSubmitted(elastic)], 1)
    actions = core.handle([TaskFinished("b", 0, 1)], 2)
    (bind,) = _of(actions, Bind)
    assert (bind.run, bind.replicas) == (1, 8)
    assert [t for t, _ in bind.placements] == [4, 5, 6, 7]
    assert not _of(actions, Migrate) and not _of(actions, Kill)


def test_shrink_instead_of_evict_for_a_high_priority_job() -> None:
    core = _core(sort="priority", preemption=True)
    core.handle([JobSubmitted(job("e", gpus=1, replicas=8, min_replicas=2))], 0)
    actions = core.handle([JobSubmitted(job("hi", gpus=4, priority=5))], 10)
    assert not _of(actions, Preempt)
    (move,) = _of(actions, Migrate)
    # shrunk by exactly what hi needs: 8 -> 4, ranks 0..3 keep their devices
    assert (move.kind, move.for_job, move.tasks) == (MigrationKind.RESIZE, "hi", tuple(range(8)))
    assert [t for t, _ in move.placements] == [0, 1, 2, 3]
    assert "shrinking e" in str(core.record("hi").explanation)
    actions = core.handle([TaskStopped("e", t, 1) for t in range(8)], 12)
    binds = {b.job_id: b for b in _of(actions, Bind)}
    assert binds["e"].run == 2 and binds["e"].replicas == 4
    assert len(binds["hi"].placements) == 1 and _used(core, "hi") == 4
    assert core.record("e").state is JobState.RUNNING and _used(core, "e") == 4


def test_live_shrink_stops_only_the_top_ranks() -> None:
    core = _core(sort="priority", preemption=True)
    elastic = job("e", gpus=1, replicas=8, min_replicas=2, resize=ResizeMode.LIVE)
    core.handle([JobSubmitted(elastic)], 0)
    actions = core.handle([JobSubmitted(job("hi", gpus=3, priority=5))], 10)
    assert sorted(k.task for k in _of(actions, Kill)) == [5, 6, 7]
    assert not _of(actions, Preempt) and not _of(actions, Migrate)
    assert sorted(core.record("e").placements) == [0, 1, 2, 3, 4]
    actions = core.handle([TaskStopped("e", t, 1) for t in (5, 6, 7)], 11)
    assert [b.job_id for b in _of(actions, Bind)] == ["hi"]
    assert core.record("e").run == 1  # the kept ranks never stopped


def test_shrink_never_goes_below_the_minimum() -> None:
    core = _core(sort="priority", preemption=True)
    core.handle([JobSubmitted(job("e", gpus=1, replicas=8, min_replicas=6))], 0)
    actions = core.handle([JobSubmitted(job("hi", gpus=4, priority=5))], 10)
    # shrinking to 6 frees 2 of the 4 hi needs: e is preempted whole, never cut to 4
    assert [p.job_id for p in _of(actions, Preempt)] == ["e"]
    assert not _of(actions, Migrate)


def test_shrink_to_the_minimum_rather_than_evict_the_rigid_job_beside_it() -> None:
    core = _core(sort="priority", preemption=True)
    core.handle([JobSubmitted(job("r", gpus=4))], 0)
    core.handle([JobSubmitted(job("e", gpus=1, replicas=4, min_replicas=2))], 1)
    actions = core.handle([JobSubmitted(job("hi", gpus=2, priority=5))], 10)
    assert not _of(actions, Preempt)
    (move,) = _of(actions, Migrate)
    assert move.job_id == "e" and len(move.placements) == 2


def _quota_core() -> Scheduler:
    limit = {"name": "a", "nominal": {"gpu": 3}, "borrowing_limit": {"gpu": 0}}
    spec = {"flavors": ["gpu"], "queues": [limit]}
    return Scheduler(ClusterState([gpu_node("g0", gpus=8)]), parse_profile(spec))


def test_partial_admission_stops_at_what_the_quota_allows() -> None:
    core = _quota_core()
    actions = core.handle(
        [JobSubmitted(job("e", gpus=1, replicas=8, min_replicas=2, queue="a"))], 0
    )
    (bind,) = _of(actions, Bind)
    # 8 GPUs free, the queue may use 3: it starts with 3, and never grows past them
    assert bind.replicas == 3
    actions = core.handle([], 1)
    assert not _of(actions, Migrate) and core.record("e").count == 3


def test_a_grow_stays_within_the_queue_quota() -> None:
    core = _quota_core()
    core.handle([JobSubmitted(job("b", gpus=2, queue="a"))], 0)
    core.handle([JobSubmitted(job("e", gpus=1, replicas=8, min_replicas=1, queue="a"))], 1)
    assert core.record("e").count == 1
    # b ends: its 2 GPUs of the quota go to e, and no more (5 GPUs stay idle)
    actions = core.handle([TaskFinished("b", 0, 1)], 2)
    (move,) = _of(actions, Migrate)
    assert len(move.placements) == 3


def test_under_drf_a_waiting_job_of_a_user_with_a_larger_share_does_not_hold_a_grow_back() -> None:
    grown = {}
    for sort in ("drf", "fifo"):
        core = _core(sort=sort)
        core.handle([JobSubmitted(job("hog", gpus=4, user="c"))], 0)
        core.handle([JobSubmitted(job("x", gpus=2, user="b"))], 1)
        core.handle([JobSubmitted(job("e", gpus=1, replicas=8, min_replicas=1, user="a"))], 2)
        # shares: a 2/8, b 2/8, c 4/8
        assert core.record("e").count == 2
        core.handle([JobSubmitted(job("w", gpus=4, user="c"))], 3)  # waits for 4 GPUs
        actions = core.handle([TaskFinished("x", 0, 1)], 4)  # 2 GPUs free, too few for w
        grown[sort] = [len(m.placements) for m in _of(actions, Migrate)]
    # drf: c uses more than a, so w's claim is worse than e's grow; fifo: w came first
    assert grown == {"drf": [4], "fifo": []}


def _reclaim_core(nodes: int = 1) -> Scheduler:
    a = {"name": "a", "parent": "org", "nominal": {"gpu": 4}}
    b = {"name": "b", "parent": "org", "nominal": {"gpu": 4}}
    spec = {
        "flavors": ["gpu"],
        "queues": [{"name": "org"}, a, b],
        "post_filter": [{"name": "preemption", "args": {"grace_s": 5}}],
    }
    cluster = [gpu_node(f"g{i}", gpus=8 // nodes) for i in range(nodes)]
    return Scheduler(ClusterState(cluster), parse_profile(spec))


def test_quota_reclaim_shrinks_a_borrowing_elastic_job_instead_of_evicting_it() -> None:
    core = _reclaim_core()
    core.handle([JobSubmitted(job("e", gpus=1, replicas=8, min_replicas=2, queue="a"))], 0)
    assert core.record("e").count == 8  # a borrows b's 4 idle GPUs
    actions = core.handle([JobSubmitted(job("r", gpus=3, queue="b"))], 10)
    # b takes back 3 of its 4: e is shrunk from 8 to 5 (a keeps 5 >= its 4), not evicted
    assert not _of(actions, Preempt)
    (move,) = _of(actions, Migrate)
    assert (move.kind, move.for_job) == (MigrationKind.RESIZE, "r")
    assert [t for t, _ in move.placements] == [0, 1, 2, 3, 4]
    actions = core.handle([TaskStopped("e", t, 1) for t in range(8)], 12)
    binds = {b.job_id: b for b in _of(actions, Bind)}
    assert (binds["e"].run, binds["e"].replicas) == (2, 5)
    assert _used(core, "r") == 3 and _used(core, "e") == 5


def test_an_elastic_job_inside_its_minimum_runtime_is_neither_shrunk_nor_evicted() -> None:
    spec = {
        "queue_sort": "priority",
        "post_filter": [{"name": "preemption", "args": {"grace_s": 5, "min_runtime_s": 60}}],
    }
    core = Scheduler(ClusterState([gpu_node("g0", gpus=8)]), parse_profile(spec))
    core.handle([JobSubmitted(job("e", gpus=1, replicas=8, min_replicas=2))], 0)
    actions = core.handle([JobSubmitted(job("hi", gpus=4, priority=5))], 30)
    # e has run 30 s of its 60: hi waits, e keeps all 8
    assert not _of(actions, Migrate) and not _of(actions, Preempt) and not _of(actions, Kill)
    assert core.record("e").count == 8 and core.record("hi").state is JobState.PENDING
    # at 61 s e may be shrunk: to 4, by what hi needs
    actions = core.handle([], 61)
    (move,) = _of(actions, Migrate)
    assert (move.for_job, len(move.placements)) == ("hi", 4)


def _gpus_of(core: Scheduler, queue: str) -> int:
    return core.ledger.by_queue.get(queue, {}).get("gpu", 0) // 1000


@settings(max_examples=150, deadline=None)
@given(
    lenders=st.lists(
        st.tuples(
            st.integers(1, 4),
            st.sampled_from([None, ResizeMode.CHECKPOINT, ResizeMode.LIVE]),
            st.integers(1, 4),
        ),
        min_size=1,
        max_size=5,
    ),
    claim=st.integers(1, 4),
    nodes=st.sampled_from([1, 2]),
)
def test_reclaim_with_elastic_jobs_never_takes_the_lender_below_its_guarantee(
    lenders: list[tuple[int, ResizeMode | None, int]], claim: int, nodes: int
) -> None:
    """Queue a (guaranteed 4 of 8 GPUs, on one node or two) runs rigid and elastic jobs,
    borrowing; b claims up to its own 4 in one task: once every stop is done, a holds at
    least min(what it held, 4)."""
    core = _reclaim_core(nodes)
    for i, (gpus, resize, least) in enumerate(lenders):
        if resize is None:
            spec = job(f"a{i}", gpus=gpus, queue="a")
        else:
            bounds = {"replicas": gpus, "min_replicas": min(least, gpus), "resize": resize}
            spec = job(f"a{i}", gpus=1, queue="a", **bounds)
        core.handle([JobSubmitted(spec)], float(i))
    before = _gpus_of(core, "a")
    actions = core.handle([JobSubmitted(job("r", gpus=claim, queue="b"))], 100)
    stops = [TaskStopped(k.job_id, k.task, k.run) for k in _of(actions, Kill)]
    for a in _of(actions, Preempt) + _of(actions, Migrate):
        stops += [TaskStopped(a.job_id, t, a.run) for t in a.tasks]
    core.handle(stops, 101)
    assert _gpus_of(core, "a") >= min(before, 4)
    for record in core.elastic.values():
        if record.state is JobState.RUNNING:
            assert record.job.min_replicas is not None
            assert record.job.min_replicas <= record.count <= record.job.replicas

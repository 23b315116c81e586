"""Heterogeneous jobs in the core: one gang of groups with their own requests, placed all
or nothing, explained per group; outcomes computed by hand."""

from __future__ import annotations

from dataclasses import replace

from builders import cpu_node, gpu_node, job
from hetsched.cluster import ClusterState
from hetsched.framework.profile import parse_profile
from hetsched.model.checkpoint import Checkpointing
from hetsched.model.job import DeviceRequest, Job, TaskGroup, TaskRequest
from hetsched.model.lifecycle import JobState
from hetsched.model.topology import TopologyRequest
from hetsched.scheduler import (
    Bind,
    JobSubmitted,
    Preempt,
    Reject,
    Scheduler,
    TaskFinished,
    TaskStopped,
)
from hetsched.scheduler.placing import trial

DRIVER = TaskRequest(8000)
WORKER = TaskRequest(devices=(DeviceRequest.of("gpu", 1),))


def _hetero(job_id: str = "h", workers: int = 8) -> Job:
    groups = (TaskGroup("workers", workers, WORKER), TaskGroup("driver", 1, DRIVER))
    return Job(job_id, WORKER, replicas=1 + workers, groups=groups)


def test_a_gang_of_groups_waits_whole_while_its_driver_cannot_fit() -> None:
    # one node, 8 GPUs and 16 CPUs; a CPU job takes 9 of them: the 8 workers fit, the
    # driver's 8 CPUs do not fit beside them, so nothing starts and nothing is held
    core = Scheduler(ClusterState([gpu_node("g0", gpus=8, cpu=16_000)]), parse_profile({}))
    actions = core.handle([JobSubmitted(job("busy", cpu=9000))], 0)
    assert [a.job_id for a in actions if isinstance(a, Bind)] == ["busy"]
    actions = core.handle([JobSubmitted(_hetero())], 1)
    assert not [a for a in actions if isinstance(a, Bind)]
    assert not [k for k in core.state.allocations if k.job == "h"]
    explanation = core.record("h").explanation
    assert explanation is not None
    assert explanation.summary == (
        "workers: 8 x 1 gpu fit; driver: no node has 8 free CPUs beside them"
    )
    assert any("cpu" in str(r).lower() for r in explanation.rejections)
    # the CPU job ends: all nine tasks start at once, the driver as task 8
    actions = core.handle([TaskFinished("busy", 0, 1)], 2)
    (bind,) = [a for a in actions if isinstance(a, Bind)]
    assert bind.job_id == "h" and [t for t, _ in bind.placements] == list(range(9))
    assert all(len(p.devices) == 1 for _, p in bind.placements[:8])
    assert bind.placements[8][1].cpu_milli == 8000 and not bind.placements[8][1].devices
    assert core.record("h").state is JobState.RUNNING


def test_groups_land_where_each_fits_and_end_as_one_job() -> None:
    nodes = [cpu_node("c0", cpu=8_000, memory=4096), gpu_node("g0", gpus=4, cpu=4_000)]
    core = Scheduler(ClusterState(nodes), parse_profile({}))
    actions = core.handle([JobSubmitted(_hetero(workers=4))], 0)
    (bind,) = [a for a in actions if isinstance(a, Bind)]
    nodes_of = {t: p.node for t, p in bind.placements}
    assert nodes_of == {0: "g0", 1: "g0", 2: "g0", 3: "g0", 4: "c0"}
    core.handle([TaskFinished("h", t, 1) for t in range(5)], 5)
    assert core.record("h").state is JobState.SUCCEEDED
    assert core.state.allocations == {}


def test_a_group_no_node_could_ever_hold_makes_the_job_unresolvable() -> None:
    core = Scheduler(ClusterState([gpu_node("g0", gpus=8, cpu=4_000)]), parse_profile({}))
    core.handle([JobSubmitted(_hetero())], 0)
    record = core.record("h")
    assert record.state is JobState.PENDING
    assert record.explanation is not None and record.explanation.code.value == "unresolvable"


SMALL_DRIVER = TaskRequest(8000)
SMALL_WORKER = TaskRequest(2000, devices=(DeviceRequest.of("gpu", 1),))


def _pair(name: str, hetero: bool) -> list[Job]:
    """A driver (8 CPUs) and 2 workers (1 GPU and 2 CPUs each): one job with groups, or
    the workaround of a workers job and a driver job (workers submitted first)."""
    if hetero:
        groups = (TaskGroup("workers", 2, SMALL_WORKER), TaskGroup("driver", 1, SMALL_DRIVER))
        return [Job(name, SMALL_WORKER, replicas=3, groups=groups)]
    return [Job(f"{name}-workers", SMALL_WORKER, replicas=2), Job(f"{name}-driver", SMALL_DRIVER)]


def _binds(actions: list[object]) -> list[str]:
    return [a.job_id for a in actions if isinstance(a, Bind)]


def test_two_pairs_deadlock_as_two_jobs_each_but_run_one_after_the_other_as_groups() -> None:
    # one node, 4 GPUs and 12 CPUs; a pair needs 2 GPUs and 4 + 8 = 12 CPUs
    node = [gpu_node("g0", gpus=4, cpu=12_000)]
    two = Scheduler(ClusterState(node), parse_profile({"queue_sort": "priority"}))
    workers, drivers = zip(_pair("p", False), _pair("q", False), strict=True)
    assert _binds(two.handle([JobSubmitted(j) for j in workers], 0)) == ["p-workers", "q-workers"]
    # both workers jobs run (8 CPUs); 4 are left, each driver needs 8: the workers wait
    # for drivers that wait for the workers' CPUs, and nothing the core does changes it
    assert not _binds(two.handle([JobSubmitted(j) for j in drivers], 1))
    assert two.record("p-driver").state is JobState.PENDING
    assert two.record("q-driver").state is JobState.PENDING
    assert not _binds(two.handle([], 3600))
    # as one job each: p starts whole (all 12 CPUs), q waits holding nothing, then runs
    one = Scheduler(ClusterState(node), parse_profile({"queue_sort": "priority"}))
    actions = one.handle([JobSubmitted(j) for j in _pair("p", True) + _pair("q", True)], 0)
    assert _binds(actions) == ["p"]
    assert not [k for k in one.state.allocations if k.job == "q"]
    actions = one.handle([TaskFinished("p", t, 1) for t in range(3)], 10)
    assert _binds(actions) == ["q"]


def test_a_job_with_groups_is_preempted_whole_as_one_job() -> None:
    spec = {"queue_sort": "priority", "post_filter": [{"name": "preemption"}]}
    core = Scheduler(ClusterState([gpu_node("g0", gpus=4, cpu=12_000)]), parse_profile(spec))
    core.handle([JobSubmitted(j) for j in _pair("p", True)], 0)
    # a high-priority job needs 1 GPU and 2 CPUs: nothing is free, the pair goes whole
    urgent = Job("u", SMALL_WORKER, priority=5)
    actions = core.handle([JobSubmitted(urgent)], 10)
    (preempt,) = [a for a in actions if isinstance(a, Preempt)]
    assert (preempt.job_id, preempt.tasks, preempt.preemptor) == ("p", (0, 1, 2), "u")
    record = core.record("p")
    assert record.preemptions == 1 and record.state is JobState.PENDING
    actions = core.handle([TaskStopped("p", t, 1) for t in range(3)], 11)
    assert _binds(actions) == ["u"]
    # 3 GPUs and 10 CPUs are left, the pair needs 12 CPUs: it waits whole, holding no part
    # of its next run (its driver alone would fit)
    assert core.record("p").state is JobState.PENDING
    assert not [k for k in core.state.allocations if k.job == "p"]
    actions = core.handle([TaskFinished("u", 0, 1)], 20)
    assert _binds(actions) == ["p"] and core.record("p").run == 2


def test_a_job_with_groups_that_requires_one_rack_places_each_group_with_its_own_request() -> None:
    # rack r1: a0, a1 with 4 GPUs and 4 CPUs each; rack r2: a2, a3 with 4 GPUs and 64 CPUs.
    # 6 workers (1 GPU, 1 CPU) fit in either rack; the driver's 8 CPUs only in r2: the
    # whole job goes to r2, the driver with its 8 CPUs and no GPU
    rack = "net/rack"
    nodes = [
        gpu_node(f"a{i}", gpus=4, cpu=4_000 if i < 2 else 64_000, labels={rack: f"r{1 + i // 2}"})
        for i in range(4)
    ]
    worker = TaskRequest(1000, devices=(DeviceRequest.of("gpu", 1),))
    groups = (TaskGroup("workers", 6, worker), TaskGroup("driver", 1, DRIVER))
    hetero = Job("h", worker, replicas=7, groups=groups, topology=TopologyRequest(required=rack))
    state = ClusterState(nodes)
    state.set_topology((rack,))
    core = Scheduler(state, parse_profile({"score": ["bestfit"]}))
    # what-if (backfill, preemption): the same placement, given back afterwards
    tried = trial(core.framework, state, hetero, 7, 0)
    assert tried is not None and [p.node for p in tried] == ["a2"] * 4 + ["a3"] * 3
    assert state.allocations == {}
    (bind,) = [a for a in core.handle([JobSubmitted(hetero)], 0) if isinstance(a, Bind)]
    placed = {t: (p.node, p.cpu_milli, len(p.devices)) for t, p in bind.placements}
    assert {t: n for t, (n, _, _) in placed.items()} == {
        0: "a2", 1: "a2", 2: "a2", 3: "a2", 4: "a3", 5: "a3", 6: "a3"
    }  # fmt: skip
    assert placed[6] == ("a3", 8000, 0)
    assert all(placed[t][1:] == (1000, 1) for t in range(6))


def test_a_checkpointing_job_with_groups_gets_one_notice_for_all_its_tasks() -> None:
    spec = {"queue_sort": "priority", "post_filter": [{"name": "preemption"}]}
    core = Scheduler(ClusterState([gpu_node("g0", gpus=4, cpu=12_000)]), parse_profile(spec))
    (pair,) = _pair("p", True)
    saves = replace(pair, checkpoint=Checkpointing(None, 30.0, "SIGUSR1", 0.0))
    core.handle([JobSubmitted(saves)], 0)
    actions = core.handle([JobSubmitted(Job("u", SMALL_WORKER, priority=5))], 10)
    (preempt,) = [a for a in actions if isinstance(a, Preempt)]
    # every task of every group, each with the job's one notice
    assert (preempt.tasks, preempt.notice_s) == ((0, 1, 2), 30.0)


def test_fair_share_counts_every_group_of_a_job() -> None:
    # one node, 8 GPUs and 64 CPUs. User a runs workers (2 x 1 GPU) and a driver of 32 CPUs:
    # a's dominant share is its CPUs, 32/64 = 0.5 (its GPUs alone would be 2/8 = 0.25).
    # User b runs 3 GPUs: 3/8 = 0.375. With 3 GPUs left, a2 (a, first) and b2 (b) want 3
    # each: drf starts b2, whose user uses less; fifo starts a2
    started = {}
    for sort in ("drf", "fifo"):
        core = Scheduler(
            ClusterState([gpu_node("g0", cpu=64_000)]), parse_profile({"queue_sort": sort})
        )
        groups = (TaskGroup("workers", 2, WORKER), TaskGroup("driver", 1, TaskRequest(32_000)))
        core.handle([JobSubmitted(Job("h", WORKER, replicas=3, groups=groups, user="a"))], 0)
        core.handle([JobSubmitted(job("b1", gpus=3, user="b"))], 1)
        waiting = [job("a2", gpus=3, user="a"), job("b2", gpus=3, user="b")]
        started[sort] = _binds(core.handle([JobSubmitted(j) for j in waiting], 2))
    assert started == {"drf": ["b2"], "fifo": ["a2"]}


def test_a_queue_quota_counts_each_group_with_its_own_request() -> None:
    # queue q may use 4 GPUs. 4 workers (1 GPU each) and a CPU-only driver use 4: they
    # start (each of the 5 tasks counted as a worker would be 5); 5 workers never can
    limit = {"name": "q", "nominal": {"gpu": 4}, "borrowing_limit": {"gpu": 0}}
    spec = {"flavors": ["gpu"], "queues": [limit]}
    core = Scheduler(ClusterState([gpu_node("g0", gpus=8)]), parse_profile(spec))
    fits = replace(_hetero("fits", workers=4), queue="q")
    actions = core.handle([JobSubmitted(fits)], 0)
    assert _binds(actions) == ["fits"]
    too_many = replace(_hetero("big", workers=5), queue="q")
    actions = core.handle([JobSubmitted(too_many)], 1)
    (reject,) = [a for a in actions if isinstance(a, Reject)]
    assert reject.job_id == "big" and "at most 4 gpu" in reject.reason

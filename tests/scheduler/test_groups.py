"""Heterogeneous jobs in the core: one gang of groups with their own requests, placed all
or nothing, explained per group; outcomes computed by hand."""

from __future__ import annotations

from builders import cpu_node, gpu_node, job
from hetsched.cluster import ClusterState
from hetsched.framework.profile import parse_profile
from hetsched.model.job import DeviceRequest, Job, TaskGroup, TaskRequest
from hetsched.model.lifecycle import JobState
from hetsched.scheduler import Bind, JobSubmitted, Scheduler, TaskFinished

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

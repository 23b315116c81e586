"""Devices that appear, go away or fail under running jobs: the cluster state's add_device,
the core's DeviceAdded, and each job's ``on_device_failure`` policy."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pytest

from builders import cpu_node, gpu_node, job
from hetsched.cluster import ClusterState
from hetsched.cluster.placement import DeviceShare, Placement
from hetsched.model.device import Device, Health
from hetsched.model.job import DeviceFailurePolicy
from hetsched.model.lifecycle import JobState
from hetsched.scheduler import (
    Action,
    Bind,
    DeviceAdded,
    DeviceHealthChanged,
    JobSubmitted,
    Kill,
    Scheduler,
    TaskCheckpointed,
)


def binds(actions: Sequence[Action]) -> dict[str, Bind]:
    return {a.job_id: a for a in actions if isinstance(a, Bind)}


def gpu(node: str, index: int, health: Health = Health.HEALTHY) -> Device:
    return Device(f"{node}/gpu{index}", "gpu", "nvidia", "A100", {"memory_gib": 80}, health)


def test_add_device_widens_the_slot_matrix_and_keeps_its_layout() -> None:
    state = ClusterState([gpu_node("g", gpus=1), cpu_node("c")])
    version = state.version
    assert state.add_device("c", gpu("c", 0)) == 0
    assert state.add_device("c", gpu("c", 1)) == 1
    assert state.width == 2
    for array in (state.dev_free, state.dev_kind):
        assert array.dtype == np.int32 and array.flags.f_contiguous
    assert state.dev_healthy.flags.f_contiguous
    assert state.dev_free.tolist() == [[1000, 0], [1000, 1000]]
    assert state.dev_kind.tolist()[0][1] == -1
    assert state.dev_free_total.tolist() == [1000, 2000]
    assert state.device_index["c/gpu1"] == (1, 1)
    assert [d.id for d in state.nodes[1].devices] == ["c/gpu0", "c/gpu1"]
    assert state.version > version
    state.allocate("k", Placement("c", 1000, 1024, (DeviceShare("c/gpu1", 1000),)))
    assert state.free_share("c/gpu1") == 0


@pytest.mark.parametrize(
    ("node", "device_id", "error"),
    [
        ("g", "g/gpu0", "device id g/gpu0 already exists"),
        ("nowhere", "nowhere/gpu0", "unknown node 'nowhere'"),
        ("gone", "gone/gpu0", "node gone is not active"),
    ],
)
def test_add_device_refuses_and_changes_nothing(node: str, device_id: str, error: str) -> None:
    state = ClusterState([gpu_node("g", gpus=1), cpu_node("gone")])
    state.remove_node("gone")
    version, width = state.version, state.width
    device = Device(device_id, "gpu", "nvidia", "A100")
    with pytest.raises((ValueError, KeyError), match=error):
        state.add_device(node, device)
    assert (state.version, state.width, len(state.device_index)) == (version, width, 1)


def test_a_new_device_lets_a_waiting_job_start_on_it() -> None:
    core = Scheduler(ClusterState([cpu_node("c")]))
    assert not binds(core.handle([JobSubmitted(job("a", gpus=1))], 0))
    bound = binds(core.handle([DeviceAdded("c", gpu("c", 0))], 1))["a"]
    assert bound.placements[0][1].devices == (DeviceShare("c/gpu0", 1000),)


def test_a_device_that_comes_back_is_known_by_its_id() -> None:
    core = Scheduler(ClusterState([gpu_node("g", gpus=1)]))
    core.handle([DeviceHealthChanged("g/gpu0", Health.UNHEALTHY, "removed")], 0)
    assert not binds(core.handle([JobSubmitted(job("a", gpus=1))], 1))
    assert "a" in binds(core.handle([DeviceAdded("g", gpu("g", 0))], 2))
    assert len(core.state.device_index) == 1


# policy, checkpoint reported?, state after, the last cause, resume_from
POLICIES = [
    (DeviceFailurePolicy.REQUEUE, True, JobState.PENDING, "device g/gpu0 removed", None),
    (
        DeviceFailurePolicy.CHECKPOINT,
        True,
        JobState.PENDING,
        "device g/gpu0 removed; resumes from its checkpoint of t=5",
        5.0,
    ),
    (
        DeviceFailurePolicy.CHECKPOINT,
        False,
        JobState.PENDING,
        "device g/gpu0 removed; no checkpoint reported, starts from scratch",
        None,
    ),
    (
        DeviceFailurePolicy.FAIL,
        True,
        JobState.FAILED,
        "device g/gpu0 removed; fails by its policy",
        None,
    ),
]


@pytest.mark.parametrize(("policy", "checkpointed", "state", "cause", "resume_from"), POLICIES)
def test_each_job_policy_on_device_loss(
    policy: DeviceFailurePolicy,
    checkpointed: bool,
    state: JobState,
    cause: str,
    resume_from: float | None,
) -> None:
    core = Scheduler(ClusterState([gpu_node("g", gpus=1)]))
    bound = binds(core.handle([JobSubmitted(job("a", gpus=1, on_device_failure=policy))], 0))
    assert bound["a"].run == 1
    if checkpointed:
        core.handle([TaskCheckpointed("a", 0, 1)], 5)
    actions = core.handle([DeviceHealthChanged("g/gpu0", Health.UNHEALTHY, "removed")], 10)
    record = core.record("a")
    assert [a.task for a in actions if isinstance(a, Kill)] == [0]
    assert record.state is state
    assert record.history[-1].cause == cause
    assert record.resume_from == resume_from
    assert core.state.allocations == {}


def test_job_specs_carry_the_policy() -> None:
    from hetsched.model.specs import SpecError, parse_jobs

    (spec,) = parse_jobs(
        {"jobs": [{"name": "a", "on_device_failure": "checkpoint", "best_effort": True}]}
    )
    assert (spec.on_device_failure, spec.best_effort) == (DeviceFailurePolicy.CHECKPOINT, True)
    assert parse_jobs({"jobs": [{"name": "b"}]})[0].on_device_failure is DeviceFailurePolicy.REQUEUE
    with pytest.raises(SpecError, match=r"jobs\[0\]\.on_device_failure: Input should be"):
        parse_jobs({"jobs": [{"name": "c", "on_device_failure": "retry"}]})

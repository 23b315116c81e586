"""Literal cases for the filter plugins: fit, node-selector, taints."""

import numpy as np
import pytest

from builders import cpu_node, gpu_node
from hetsched.cluster import ClusterState, DeviceShare, Placement
from hetsched.framework import CycleContext, Status
from hetsched.framework.status import Code
from hetsched.model.device import Health, Node, Taint, TaintEffect
from hetsched.model.job import DeviceChoice, DeviceRequest, Job, TaskRequest, Toleration
from hetsched.plugins.fit import Fit
from hetsched.plugins.labels import NodeSelector
from hetsched.plugins.taints import Taints


def cluster() -> ClusterState:
    return ClusterState(
        [
            gpu_node("a100", gpus=8, model="A100", memory_gib=80, labels={"zone": "z1"}),
            gpu_node(
                "v100", gpus=4, model="V100", memory_gib=32, cpu=16_000, labels={"zone": "z2"}
            ),
            gpu_node("fpga", gpus=2, model="U250", device_class="fpga"),
            cpu_node("cpu"),
        ]
    )


def ctx_for(state: ClusterState, request: TaskRequest) -> CycleContext:
    return CycleContext(state, Job("j", request), request)


def gpu(count: int = 1, share: int = 1000, selector: str | None = None) -> DeviceRequest:
    return DeviceRequest.of("gpu", count, share, selector)


@pytest.mark.parametrize(
    ("request_", "expected"),
    [
        (TaskRequest(1000, 1024), ["a100", "v100", "fpga", "cpu"]),
        (TaskRequest(32_000, 1024), ["a100", "fpga", "cpu"]),
        (TaskRequest(1000, 1024, (gpu(),)), ["a100", "v100"]),
        (TaskRequest(1000, 1024, (gpu(5),)), ["a100"]),
        (TaskRequest(1000, 1024, (gpu(9),)), []),
        (TaskRequest(1000, 1024, (gpu(1, 300),)), ["a100", "v100"]),
        (TaskRequest(0, 0, (gpu(2, selector='device.attributes["memory_gib"] < 40'),)), ["v100"]),
        (TaskRequest(0, 0, (DeviceRequest.of("fpga"),)), ["fpga"]),
        (TaskRequest(0, 0, (gpu(), DeviceRequest.of("fpga"))), []),
        (
            TaskRequest(
                0,
                0,
                (
                    DeviceRequest(
                        (DeviceChoice("gpu", 6), DeviceChoice("fpga", 2))  # first that fits
                    ),
                ),
            ),
            ["a100", "fpga"],
        ),
    ],
)
def test_fit_filter(request_: TaskRequest, expected: list[str]) -> None:
    state = cluster()
    mask = Fit().filter(ctx_for(state, request_), state.active)
    assert [state.nodes[r].name for r in np.flatnonzero(mask)] == expected


def test_fit_counts_free_share_not_capacity() -> None:
    state = cluster()
    devices = [d.id for d in state.nodes[1].devices]
    state.allocate("x", Placement("v100", 0, 0, (DeviceShare(devices[0], 800),)))
    state.allocate("y", Placement("v100", 0, 0, tuple(DeviceShare(d, 1000) for d in devices[1:])))
    fit = Fit()
    small = TaskRequest(0, 0, (gpu(1, 200),))
    big = TaskRequest(0, 0, (gpu(1, 201),))
    assert fit.filter(ctx_for(state, small), state.active)[1]
    assert not fit.filter(ctx_for(state, big), state.active)[1]
    # a whole device needs one that is entirely free: the 800-used one does not count
    assert not fit.filter(ctx_for(state, TaskRequest(0, 0, (gpu(),))), state.active)[1]


def test_fit_prefilter_flags_requests_no_node_could_ever_hold() -> None:
    state = cluster()
    assert Fit().prefilter(ctx_for(state, TaskRequest(0, 0, (gpu(8),)))) == Status.success()
    status = Fit().prefilter(ctx_for(state, TaskRequest(0, 0, (gpu(9),))))
    assert status.code is Code.UNRESOLVABLE and "even when empty" in str(status)


def test_fit_diagnose_names_each_shortfall() -> None:
    state = cluster()
    request = TaskRequest(20_000, 1024, (gpu(2, selector='device.attributes["model"] == "V100"'),))
    reasons = dict(Fit().diagnose(ctx_for(state, request), state.active))
    by_reason = {
        reason: [state.nodes[r].name for r in np.flatnonzero(m)] for reason, m in reasons.items()
    }
    # nodes without a GPU read "no gpu", not as broken hardware
    assert by_reason["no gpu"] == ["fpga", "cpu"]
    assert by_reason["gpu unhealthy"] == []
    assert by_reason['selector matched no device (device.attributes["model"] == "V100")'] == [
        "a100",
        "fpga",
        "cpu",
    ]
    assert by_reason["insufficient cpu (want 20000m)"] == ["v100"]


def test_fit_diagnose_tells_no_gpu_from_gpu_unhealthy() -> None:
    state = cluster()
    for device in state.nodes[state.row("v100")].devices:
        state.set_device_health(device.id, Health.UNHEALTHY)
    reasons = dict(Fit().diagnose(ctx_for(state, TaskRequest(0, 0, (gpu(),))), state.active))
    by_reason = {
        reason: [state.nodes[r].name for r in np.flatnonzero(m)] for reason, m in reasons.items()
    }
    assert by_reason["no gpu"] == ["fpga", "cpu"]
    assert by_reason["gpu unhealthy"] == ["v100"]
    either = DeviceRequest(choices=(gpu().choices[0], DeviceRequest.of("fpga", 1).choices[0]))
    reasons = dict(Fit().diagnose(ctx_for(state, TaskRequest(0, 0, (either,))), state.active))
    assert [state.nodes[r].name for r in np.flatnonzero(reasons["no fpga or gpu"])] == ["cpu"]


def test_node_selector() -> None:
    state = cluster()
    plugin = NodeSelector()
    request = TaskRequest(0, 0, node_selector={"zone": "z2"})
    mask = plugin.filter(ctx_for(state, request), state.active)
    assert mask.tolist() == [False, True, False, False]
    assert plugin.diagnose(ctx_for(state, request), state.active)[0][0] == (
        "node label zone=z2 missing"
    )


@pytest.mark.parametrize(
    ("tolerations", "schedulable"),
    [
        ((), [False, False, True]),
        ((Toleration("dedicated"),), [True, False, True]),
        ((Toleration("dedicated", "fpga"),), [True, False, True]),
        ((Toleration("dedicated", "other"),), [False, False, True]),
        ((Toleration("dedicated", effect=TaintEffect.NO_EXECUTE),), [False, False, True]),
        ((Toleration(),), [True, True, True]),  # an empty key tolerates every taint
    ],
)
def test_taints(tolerations: tuple[Toleration, ...], schedulable: list[bool]) -> None:
    state = ClusterState(
        [
            Node("t1", 1000, 1024, taints=(Taint("dedicated", "fpga"),)),
            Node("t2", 1000, 1024, taints=(Taint("gpu-maint", "", TaintEffect.NO_EXECUTE),)),
            Node(
                "soft",
                1000,
                1024,
                taints=(Taint("spot", "", TaintEffect.PREFER_NO_SCHEDULE),),
            ),
        ]
    )
    request = TaskRequest(0, 0, tolerations=tolerations)
    assert Taints().filter(ctx_for(state, request), state.active).tolist() == schedulable

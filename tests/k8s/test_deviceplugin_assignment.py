"""The device plugin hands a container the devices the kubelet chose, and the scheduler's
assignment only to the pod it was written for, on the node it was written for.

Each test drives the plugin through the test kubelet (real gRPC on real unix sockets); the
ones named ``..._pod_resources`` also serve the kubelet's pod-resources API, which tells
the plugin which pod the kubelet is admitting.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from hetsched.agent.watcher import DeviceWatcher
from hetsched.k8s.deviceplugin.plugin import DevicePlugin, PluginSettings
from hetsched.k8s.names import ASSIGN_PHASE
from k8s.dprig import FOUR_GPUS, GPU, NODE, SHARED, Rig, assignment, make_rig

FPGA = "hetsched.io/fpga"


@pytest.fixture
def rig(short_dir: Path) -> Iterator[Rig]:
    rig = make_rig(short_dir)
    rig.kubelet.wait_list(GPU, bool, "the first list")
    yield rig
    rig.plugin.stop()
    rig.kubelet.stop()


@pytest.fixture
def known_rig(short_dir: Path) -> Iterator[Rig]:
    """A rig whose kubelet serves the pod-resources API."""
    rig = make_rig(short_dir, pod_resources=True)
    rig.kubelet.wait_list(SHARED, bool, "the first shared list")
    yield rig
    rig.plugin.stop()
    rig.kubelet.stop()


def _events(rig: Rig) -> list[dict[str, Any]]:
    return [event for _, event in rig.api.events]


def test_the_kubelet_choosing_other_devices_gets_them_and_an_event(rig: Rig) -> None:
    chosen = [("n1/gpu2", 1000, GPU), ("n1/gpu3", 1000, GPU)]
    rig.api.add_pod("train", NODE, {GPU: 2}, assignment("train", chosen))
    # the kubelet (its Topology Manager, say) did not take the preferred devices: the
    # container gets what the kubelet chose, which the kubelet counts as taken
    answer = rig.kubelet.allocate(GPU, ["gpu0", "gpu1"])
    assert answer.envs["CUDA_VISIBLE_DEVICES"] == "0,1"
    assert [d.host_path for d in answer.devices][:2] == ["/dev/nvidia0", "/dev/nvidia1"]
    (event,) = _events(rig)
    assert event["type"] == "Warning"
    assert event["reason"] == "AssignmentNotHonoured"
    assert event["involvedObject"]["name"] == "train"
    assert "the kubelet chose gpu0, gpu1" in event["message"]
    assert "the scheduler assigned n1/gpu2, n1/gpu3" in event["message"]
    assert rig.api.annotations_of("train")[ASSIGN_PHASE] == "allocating"


def test_a_device_of_another_node_is_never_handed_out(rig: Rig) -> None:
    # written for this node and pod, but naming another node's GPU with the same short name
    rig.api.add_pod("odd", NODE, {GPU: 1}, assignment("odd", [("n2/gpu3", 1000, GPU)]))
    # not steered to n2's gpu3 (nor to n1's, which merely shares its short name)
    assert rig.kubelet.preferred(GPU, ["gpu0", "gpu3"], 1) == ["gpu0"]
    answer = rig.kubelet.allocate(GPU, ["gpu0"])
    assert json.loads(answer.envs["HETSCHED_DEVICES"]) == [
        {"id": "n1/gpu0", "index": 0, "share": 1000}
    ]
    (event,) = _events(rig)
    assert "n2/gpu3 is not on node n1" in event["message"]


def test_an_assignment_written_for_another_pod_is_not_honoured(rig: Rig) -> None:
    # a copy of another pod's annotations (a manifest exported with them, a recreated pod)
    copied = assignment("original", [("n1/gpu1", 300, SHARED)])
    rig.api.add_pod("copy", NODE, {SHARED: 1}, copied)
    answer = rig.kubelet.allocate(SHARED, ["gpu1::0"])
    assert answer.envs["HETSCHED_DEVICE_SHARE"] == "250"  # a slot of 4 per GPU
    (event,) = _events(rig)
    assert event["involvedObject"]["name"] == "copy"
    assert "written for n1/uid-default-original, not n1/uid-default-copy" in event["message"]
    assert rig.api.annotations_of("copy")[ASSIGN_PHASE] == "allocating"


def test_an_assignment_without_its_pod_and_node_is_not_honoured(rig: Rig) -> None:
    legacy = assignment("old", [("n1/gpu1", 1000, GPU)])
    del legacy["hetsched.io/assigned-for"]
    rig.api.add_pod("old", NODE, {GPU: 1}, legacy)
    assert rig.kubelet.allocate(GPU, ["gpu1"]).envs["CUDA_VISIBLE_DEVICES"] == "1"
    (event,) = _events(rig)
    assert "has no hetsched.io/assigned-for annotation" in event["message"]


def test_both_resources_of_a_pod_get_the_schedulers_choice(rig: Rig) -> None:
    # one pod, a whole GPU and a share of another: two Allocates, each honoured
    chosen = [("n1/gpu3", 1000, GPU), ("n1/gpu1", 300, SHARED)]
    rig.api.add_pod("mixed", NODE, {GPU: 1, SHARED: 1}, assignment("mixed", chosen))
    assert rig.kubelet.preferred(GPU, ["gpu0", "gpu1", "gpu2", "gpu3"], 1) == ["gpu3"]
    whole = rig.kubelet.allocate(GPU, ["gpu3"])
    assert whole.envs["CUDA_VISIBLE_DEVICES"] == "3"
    slots = [f"gpu{g}::{k}" for g in range(4) for k in range(4)]
    assert rig.kubelet.preferred(SHARED, slots, 1) == ["gpu1::0"]
    part = rig.kubelet.allocate(SHARED, ["gpu1::0"])
    assert part.envs["HETSCHED_DEVICE_SHARE"] == "300"
    annotations = rig.api.annotations_of("mixed")
    assert annotations["allocated.hetsched.io/gpu"] == "n1/gpu3"
    assert annotations["allocated.hetsched.io/gpu-shared"] == "n1/gpu1::0"
    assert _events(rig) == []


def test_a_second_device_class_gets_the_schedulers_choice_too(rig: Rig, short_dir: Path) -> None:
    # another class's plugin on the same node (two FPGAs), as its own process would be
    rig.devices.write_text(FOUR_GPUS.replace("U250, count: 1", "U250, count: 2"))
    settings = PluginSettings(
        resource=FPGA, node_name=NODE, plugin_dir=short_dir, socket_check_interval_s=0.02
    )
    watcher = DeviceWatcher.create(NODE, ["fake"], fake_file=rig.devices, interval_s=0.02)
    fpga = DevicePlugin(settings, watcher, rig.api)
    fpga.start()
    try:
        rig.kubelet.wait_list(FPGA, lambda devs: len(devs) == 2, "two FPGAs")
        chosen = [("n1/gpu2", 1000, GPU), ("n1/fpga1", 1000, FPGA)]
        rig.api.add_pod("both", NODE, {GPU: 1, FPGA: 1}, assignment("both", chosen))
        assert rig.kubelet.allocate(GPU, ["gpu2"]).envs["CUDA_VISIBLE_DEVICES"] == "2"
        # the GPU's Allocate did not use up the pod's assignment: the FPGA is steered too
        assert rig.kubelet.preferred(FPGA, ["fpga0", "fpga1"], 1) == ["fpga1"]
        rig.kubelet.allocate(FPGA, ["fpga1"])
        annotations = rig.api.annotations_of("both")
        assert annotations["allocated.hetsched.io/fpga"] == "n1/fpga1"
        assert annotations["allocated.hetsched.io/gpu"] == "n1/gpu2"
        assert _events(rig) == []
    finally:
        fpga.stop()


def test_pod_resources_tell_which_pod_is_admitted(known_rig: Rig) -> None:
    rig = known_rig
    for name, share in (("a", 300), ("b", 500)):
        rig.api.add_pod(name, NODE, {SHARED: 1}, assignment(name, [("n1/gpu1", share, SHARED)]))
    slots = [f"gpu{g}::{k}" for g in range(4) for k in range(4)]
    # the kubelet admits b first, though a is older: b gets its own share, not a's
    rig.kubelet.admit("b")
    assert rig.kubelet.preferred(SHARED, slots, 1) == ["gpu1::0"]
    assert rig.kubelet.allocate(SHARED, ["gpu1::0"], pod="b").envs["HETSCHED_DEVICE_SHARE"] == (
        "500"
    )
    assert rig.api.annotations_of("b")[ASSIGN_PHASE] == "allocated"
    assert rig.api.annotations_of("a")[ASSIGN_PHASE] == "allocating"
    rig.kubelet.admit("a")
    assert rig.kubelet.allocate(SHARED, ["gpu1::1"], pod="a").envs["HETSCHED_DEVICE_SHARE"] == (
        "300"
    )
    assert _events(rig) == []


def test_pod_resources_name_the_pod_whose_assignment_was_passed_over(known_rig: Rig) -> None:
    rig = known_rig
    rig.api.add_pod("a", NODE, {GPU: 1}, assignment("a", [("n1/gpu0", 1000, GPU)]))
    rig.api.add_pod("b", NODE, {GPU: 1}, assignment("b", [("n1/gpu1", 1000, GPU)]))
    # the kubelet admits b and picks gpu0, which is a's: not honoured for b, nor given to a
    answer = rig.kubelet.allocate(GPU, ["gpu0"], pod="b")
    assert answer.envs["CUDA_VISIBLE_DEVICES"] == "0"
    (event,) = _events(rig)
    assert event["involvedObject"]["name"] == "b"
    assert rig.api.annotations_of("a")[ASSIGN_PHASE] == "allocating"


def test_a_kubelet_that_gave_a_pod_its_devices_is_not_asked_twice(known_rig: Rig) -> None:
    rig = known_rig
    rig.api.add_pod("a", NODE, {GPU: 1}, assignment("a", [("n1/gpu0", 1000, GPU)]))
    rig.kubelet.allocate(GPU, ["gpu0"], pod="a")
    # the plugin restarts (its memory of what it handed out is gone) and the mark on the
    # pod is lost: the kubelet's list still says a has its GPU, so a is not matched again
    annotations = dict(rig.api.annotations_of("a"))
    annotations.pop("allocated.hetsched.io/gpu")
    rig.api.add_pod("a", NODE, {GPU: 1}, annotations)
    rig.plugin.stop()
    rig.plugin.start()
    rig.kubelet.wait_for(lambda: len(rig.kubelet.registrations) >= 4, "registered again")
    rig.kubelet.wait_list(GPU, bool, "the list after the restart")
    rig.kubelet.allocate(GPU, ["gpu0"], pod="other")
    assert "allocated.hetsched.io/gpu" not in rig.api.annotations_of("a")
    assert _events(rig) == []  # a's assignment was not waiting, and other has none

"""The device plugin against a test kubelet: real gRPC over real unix sockets.

Devices come from the ``fake`` backend's file, which the tests edit to unplug a device or
make one unhealthy; the plugin's device watcher polls it every 20 ms.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import grpc
import pytest

from hetsched.k8s.names import ASSIGN_PHASE
from k8s.dprig import FOUR_GPUS, GPU, NODE, SHARED, Rig, assignment, make_rig, write_devices
from k8s.kubelet import WAIT_S, Listed
from k8s.official import api


@pytest.fixture
def rig(short_dir: Path) -> Iterator[Rig]:
    rig = make_rig(short_dir)
    yield rig
    rig.plugin.stop()
    rig.kubelet.stop()


def _healthy(listed: list[Listed]) -> list[str]:
    return [d.id for d in listed if d.health == "Healthy"]


def test_registers_both_resources_and_lists_the_devices(rig: Rig) -> None:
    rig.kubelet.wait_for(lambda: len(rig.kubelet.plugins) == 2, "two registrations")
    by_resource = {r.resource_name: r for r in rig.kubelet.registrations}
    assert by_resource[GPU].version == "v1beta1"
    assert by_resource[GPU].endpoint == "hetsched-gpu.sock"
    assert by_resource[SHARED].endpoint == "hetsched-gpu-shared.sock"
    assert by_resource[GPU].options.get_preferred_allocation_available
    assert rig.kubelet.plugins[GPU].options.get_preferred_allocation_available
    assert not rig.kubelet.plugins[GPU].options.pre_start_required

    whole = rig.kubelet.wait_list(GPU, bool, "the first list")
    # only the resource's class: the FPGA is not a gpu
    assert whole == [
        Listed("gpu0", "Healthy", (0,)),
        Listed("gpu1", "Healthy", (0,)),
        Listed("gpu2", "Healthy", (1,)),
        Listed("gpu3", "Healthy", (1,)),
    ]
    shared = rig.kubelet.wait_list(SHARED, bool, "the first shared list")
    assert [d.id for d in shared[:5]] == ["gpu0::0", "gpu0::1", "gpu0::2", "gpu0::3", "gpu1::0"]
    assert len(shared) == 16
    assert {d.numa for d in shared if d.id.startswith("gpu3")} == {(1,)}


def test_list_and_watch_resends_on_health_change_and_unplug(rig: Rig) -> None:
    rig.kubelet.wait_list(GPU, lambda devs: len(devs) == 4, "four GPUs")
    write_devices(
        rig.devices,
        FOUR_GPUS.replace("nvlink_domain: 2}}", "nvlink_domain: 2}, health: unhealthy}"),
    )
    listed = rig.kubelet.wait_list(
        GPU, lambda devs: "gpu2" not in _healthy(devs), "gpu2 and gpu3 unhealthy"
    )
    assert [(d.id, d.health) for d in listed] == [
        ("gpu0", "Healthy"),
        ("gpu1", "Healthy"),
        ("gpu2", "Unhealthy"),
        ("gpu3", "Unhealthy"),
    ]
    shared = rig.kubelet.wait_list(
        SHARED, lambda devs: "gpu3::0" not in _healthy(devs), "gpu3's slots unhealthy"
    )
    assert {d.health for d in shared if d.id.startswith("gpu3::")} == {"Unhealthy"}

    # hot-unplug: the last GPU of the second group disappears from the file
    write_devices(
        rig.devices,
        FOUR_GPUS.replace(
            "count: 2,\n     attributes: {memory_gib: 80, numa: 1",
            "count: 1,\n     attributes: {memory_gib: 80, numa: 1",
        ),
    )
    listed = rig.kubelet.wait_list(
        GPU, lambda devs: [d.id for d in devs] == ["gpu0", "gpu1", "gpu2"], "gpu3 gone"
    )
    assert _healthy(listed) == ["gpu0", "gpu1", "gpu2"]
    # every answer was a full list, and the first one came at once
    lists = rig.kubelet.plugins[GPU].lists
    assert len(lists[0]) == 4
    assert all(len(devs) in (3, 4) for devs in lists)


def test_allocate_whole_devices_without_a_scheduler_decision(rig: Rig) -> None:
    rig.kubelet.wait_list(GPU, bool, "the first list")
    answer = rig.kubelet.allocate(GPU, ["gpu1", "gpu2"])
    assert answer.envs["CUDA_VISIBLE_DEVICES"] == "1,2"
    assert answer.envs["NVIDIA_VISIBLE_DEVICES"] == "1,2"
    assert json.loads(answer.envs["HETSCHED_DEVICES"]) == [
        {"id": "n1/gpu1", "index": 1, "share": 1000},
        {"id": "n1/gpu2", "index": 2, "share": 1000},
    ]
    assert "HETSCHED_DEVICE_SHARE" not in answer.envs
    # the GPUs' nodes, then the control nodes that exist on this host (no nvidia-uvm-tools)
    assert [(d.host_path, d.container_path, d.permissions) for d in answer.devices] == [
        ("/dev/nvidia1", "/dev/nvidia1", "rwm"),
        ("/dev/nvidia2", "/dev/nvidia2", "rwm"),
        ("/dev/nvidiactl", "/dev/nvidiactl", "rwm"),
        ("/dev/nvidia-uvm", "/dev/nvidia-uvm", "rwm"),
    ]


def test_allocate_follows_the_scheduler_for_whole_devices(rig: Rig) -> None:
    rig.kubelet.wait_list(GPU, bool, "the first list")
    chosen = [("n1/gpu3", 1000, GPU), ("n1/gpu2", 1000, GPU)]
    rig.api.add_pod("train", NODE, {GPU: 2}, assignment("train", chosen))
    rig.api.add_pod("elsewhere", "n2", {GPU: 2}, assignment("elsewhere", chosen, node="n2"))
    # the kubelet is steered to the scheduler's devices, then allocates what it chose
    assert rig.kubelet.preferred(GPU, ["gpu0", "gpu1", "gpu2", "gpu3"], 2) == ["gpu2", "gpu3"]
    answer = rig.kubelet.allocate(GPU, ["gpu2", "gpu3"])
    assert answer.envs["CUDA_VISIBLE_DEVICES"] == "3,2"
    assert rig.api.annotations_of("train")[ASSIGN_PHASE] == "allocated"
    # the other node's pod is not ours; with no pod left waiting, the kubelet's ids stand
    answer = rig.kubelet.allocate(GPU, ["gpu0", "gpu1"])
    assert answer.envs["CUDA_VISIBLE_DEVICES"] == "0,1"


def test_allocate_shared_slots_from_the_pods_annotations(rig: Rig) -> None:
    rig.kubelet.wait_list(SHARED, bool, "the first shared list")
    for name, device, share in (("a", "n1/gpu1", 300), ("b", "n1/gpu1", 500)):
        rig.api.add_pod(name, NODE, {SHARED: 1}, assignment(name, [(device, share, SHARED)]))
    available = [f"gpu{g}::{k}" for g in range(4) for k in range(4)]
    # steered to a slot of the scheduler's GPU
    assert rig.kubelet.preferred(SHARED, available, 1) == ["gpu1::0"]

    first = rig.kubelet.allocate(SHARED, ["gpu1::0"])  # the oldest pod first: a
    assert first.envs["CUDA_VISIBLE_DEVICES"] == "1"
    assert first.envs["HETSCHED_DEVICE_SHARE"] == "300"
    assert first.envs["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] == "30"
    assert first.envs["HETSCHED_DEVICE_MEMORY_MIB"] == str(80 * 1024 * 300 // 1000)
    assert json.loads(first.envs["HETSCHED_DEVICES"]) == [
        {"id": "n1/gpu1", "index": 1, "share": 300}
    ]
    assert rig.api.annotations_of("a")[ASSIGN_PHASE] == "allocated"
    assert rig.api.annotations_of("b")[ASSIGN_PHASE] == "allocating"

    second = rig.kubelet.allocate(SHARED, ["gpu1::1"])
    assert second.envs["HETSCHED_DEVICE_SHARE"] == "500"
    assert second.envs["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] == "50"
    assert rig.api.annotations_of("b")[ASSIGN_PHASE] == "allocated"
    assert second.devices[0].host_path == "/dev/nvidia1"

    # a slot nobody scheduled: its part of the device (the rig has 4 slots per GPU)
    third = rig.kubelet.allocate(SHARED, ["gpu2::3"])
    assert third.envs["HETSCHED_DEVICE_SHARE"] == "250"
    assert third.envs["CUDA_VISIBLE_DEVICES"] == "2"
    assert rig.api.events == []  # no assignment was waiting: nothing to say


def test_allocate_refuses_unknown_and_unhealthy_devices(rig: Rig) -> None:
    rig.kubelet.wait_list(GPU, bool, "the first list")
    with pytest.raises(grpc.RpcError) as unknown:
        rig.kubelet.allocate(GPU, ["gpu9"])
    assert unknown.value.code() is grpc.StatusCode.FAILED_PRECONDITION
    assert "unknown device gpu9" in str(unknown.value.details())

    write_devices(
        rig.devices,
        FOUR_GPUS.replace("nvlink_domain: 0}}", "nvlink_domain: 0}, health: unhealthy}"),
    )
    rig.kubelet.wait_list(GPU, lambda devs: "gpu0" not in _healthy(devs), "gpu0 unhealthy")
    with pytest.raises(grpc.RpcError) as unhealthy:
        rig.kubelet.allocate(GPU, ["gpu0"])
    assert "gpu0 is unhealthy" in str(unhealthy.value.details())

    # the scheduler's choice went bad between binding and admission: the kubelet (which no
    # longer offers gpu1) chose gpu2, and the container gets gpu2 with an Event saying so
    rig.api.add_pod("late", NODE, {GPU: 1}, assignment("late", [("n1/gpu1", 1000, GPU)]))
    assert rig.kubelet.allocate(GPU, ["gpu2"]).envs["CUDA_VISIBLE_DEVICES"] == "2"
    (_, event), *_ = rig.api.events
    assert event["involvedObject"]["name"] == "late"  # type: ignore[index]
    assert "the scheduler assigned n1/gpu1" in str(event["message"])


def test_preferred_allocation_keeps_to_one_nvlink_domain(rig: Rig) -> None:
    rig.kubelet.wait_list(GPU, bool, "the first list")
    # gpu0 is taken: only the second NVLink domain still holds two GPUs
    assert rig.kubelet.preferred(GPU, ["gpu1", "gpu2", "gpu3"], 2) == ["gpu2", "gpu3"]
    # best fit: the lone free GPU of a domain, so the domain with two stays whole
    assert rig.kubelet.preferred(GPU, ["gpu0", "gpu1", "gpu3"], 1) == ["gpu3"]
    assert rig.kubelet.preferred(GPU, ["gpu0", "gpu1", "gpu2", "gpu3"], 2, must=["gpu2"]) == [
        "gpu2",
        "gpu3",
    ]


def test_kubelet_restart_wipes_the_sockets_and_the_plugin_registers_again(rig: Rig) -> None:
    rig.kubelet.wait_for(lambda: len(rig.kubelet.registrations) == 2, "two registrations")
    first = rig.kubelet.plugins[GPU]
    rig.kubelet.restart()
    rig.kubelet.wait_for(lambda: len(rig.kubelet.registrations) == 4, "two more registrations")
    assert sorted(r.resource_name for r in rig.kubelet.registrations[2:]) == [GPU, SHARED]
    assert (rig.dir / "hetsched-gpu.sock").is_socket()
    assert (rig.dir / "hetsched-gpu-shared.sock").is_socket()
    listed = rig.kubelet.wait_list(GPU, lambda devs: len(devs) == 4, "the list after restart")
    assert _healthy(listed) == ["gpu0", "gpu1", "gpu2", "gpu3"]
    assert rig.kubelet.plugins[GPU] is not first
    assert first.stream_ended
    assert rig.kubelet.allocate(GPU, ["gpu3"]).envs["CUDA_VISIBLE_DEVICES"] == "3"


def test_kubelet_down_for_a_while(short_dir: Path) -> None:
    # the kubelet's socket is gone when the plugin wipes ours: it keeps trying
    rig = make_rig(short_dir)
    try:
        rig.kubelet.wait_for(lambda: len(rig.kubelet.registrations) == 2, "two registrations")
        rig.kubelet.stop()
        for path in short_dir.iterdir():
            if path.is_socket():
                path.unlink()
        rig.kubelet.wait_for(
            lambda: (short_dir / "hetsched-gpu.sock").is_socket(), "the plugin serves again"
        )
        rig.kubelet.start()
        rig.kubelet.wait_for(lambda: len(rig.kubelet.registrations) == 4, "registered again")
        assert rig.kubelet.wait_list(SHARED, lambda devs: len(devs) == 16, "shared list")
    finally:
        rig.plugin.stop()
        rig.kubelet.stop()


def test_pre_start_container_when_asked(short_dir: Path) -> None:
    rig = make_rig(short_dir, pre_start=True, slots=0)
    try:
        rig.kubelet.wait_list(GPU, bool, "the first list")
        assert list(rig.kubelet.plugins) == [GPU]  # no shared resource with 0 slots
        assert rig.kubelet.registrations[0].options.pre_start_required
        rig.kubelet.pre_start(GPU, ["gpu1"])
        with pytest.raises(grpc.RpcError) as refused:
            rig.kubelet.pre_start(GPU, ["gpu7"])
        assert refused.value.code() is grpc.StatusCode.FAILED_PRECONDITION
    finally:
        rig.plugin.stop()
        rig.kubelet.stop()


def test_the_node_annotation_follows_the_devices(rig: Rig) -> None:
    rig.kubelet.wait_list(GPU, bool, "the first list")
    listed = rig.api.devices_on(NODE)
    assert [(d["id"], d["model"], d["health"]) for d in listed] == [
        ("n1/gpu0", "A100", "healthy"),
        ("n1/gpu1", "A100", "healthy"),
        ("n1/gpu2", "A100", "healthy"),
        ("n1/gpu3", "A100", "healthy"),
    ]
    assert listed[2]["attributes"] == {"memory_gib": 80, "numa": 1, "nvlink_domain": 2}
    assert listed[0]["class"] == "gpu"
    assert listed[0]["vendor"] == "nvidia"

    # another class's plugin (FPGAs) writes its entries; ours stay, and so do theirs
    fpga = {"id": "n1/fpga0", "class": "fpga", "health": "healthy", "attributes": {}}
    rig.api.patch_node_annotations(NODE, {"hetsched.io/devices": json.dumps([*listed, fpga])})
    rig.api.fail_node_patches = 1  # the next write fails; the plugin's loop writes it again
    write_devices(
        rig.devices,
        FOUR_GPUS.replace("nvlink_domain: 0}}", "nvlink_domain: 0}, health: unhealthy}"),
    )
    rig.kubelet.wait_for(
        lambda: (
            [d["health"] for d in rig.api.devices_on(NODE) if d["class"] == "gpu"][:2]
            == ["unhealthy", "unhealthy"]
        ),
        "the annotation shows gpu0 and gpu1 unhealthy",
        timeout_s=WAIT_S,
    )
    assert rig.api.fail_node_patches == 0
    assert rig.api.devices_on(NODE)[0] == fpga


def test_a_new_kubelet_socket_alone_is_a_restart_too(rig: Rig) -> None:
    # a kubelet that comes back without wiping the plugins' sockets: the new kubelet.sock
    # (another inode) is what tells the plugin to register again
    rig.kubelet.wait_for(lambda: len(rig.kubelet.registrations) == 2, "two registrations")
    rig.kubelet.stop()
    rig.kubelet.socket.unlink(missing_ok=True)
    rig.kubelet.start()
    rig.kubelet.wait_for(lambda: len(rig.kubelet.registrations) == 4, "registered again")
    listed = rig.kubelet.wait_list(GPU, lambda devs: len(devs) == 4, "the list after restart")
    assert _healthy(listed) == ["gpu0", "gpu1", "gpu2", "gpu3"]


def test_concurrent_allocates_never_take_one_pod_twice(rig: Rig) -> None:
    rig.kubelet.wait_list(SHARED, bool, "the first shared list")
    shares = [100, 200, 300, 400, 500, 600]
    for k, share in enumerate(shares):
        name = f"p{k}"
        rig.api.add_pod(
            name, NODE, {SHARED: 1}, assignment(name, [(f"n1/gpu{k % 4}", share, SHARED)])
        )
    with ThreadPoolExecutor(max_workers=len(shares)) as pool:
        answers = list(
            pool.map(
                lambda k: rig.kubelet.allocate(SHARED, [f"gpu{k % 4}::{k // 4}"]),
                range(len(shares)),
            )
        )
    assert sorted(int(a.envs["HETSCHED_DEVICE_SHARE"]) for a in answers) == shares
    assert {rig.api.annotations_of(f"p{k}")[ASSIGN_PHASE] for k in range(len(shares))} == {
        "allocated"
    }


def test_the_official_messages_talk_to_the_plugin(rig: Rig) -> None:
    # the kubelet's own messages, compiled from the official api.proto, over the plugin's socket
    official = api("deviceplugin/v1beta1/api.proto")
    rig.kubelet.wait_list(GPU, bool, "the first list")
    with grpc.insecure_channel(f"unix://{rig.dir / 'hetsched-gpu.sock'}") as channel:
        options = official.unary(channel, "DevicePlugin", "GetDevicePluginOptions")(
            official.message("Empty")(), timeout=WAIT_S
        )
        assert options.get_preferred_allocation_available
        stream = official.stream(channel, "DevicePlugin", "ListAndWatch")(
            official.message("Empty")(), timeout=WAIT_S
        )
        first = next(iter(stream))
        stream.cancel()
        assert [(d.ID, d.health, [n.ID for n in d.topology.nodes]) for d in first.devices][:2] == [
            ("gpu0", "Healthy", [0]),
            ("gpu1", "Healthy", [0]),
        ]
        request = official.message("AllocateRequest")(
            container_requests=[official.message("ContainerAllocateRequest")(devices_ids=["gpu3"])]
        )
        answer = official.unary(channel, "DevicePlugin", "Allocate")(request, timeout=WAIT_S)
    assert answer.container_responses[0].envs["CUDA_VISIBLE_DEVICES"] == "3"

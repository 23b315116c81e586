"""The device plugin's decisions as pure functions: preferred ids, Allocate answers, the pod
an Allocate is for."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hetsched.k8s.deviceplugin.allocation import (
    Assignment,
    MountSpec,
    Roots,
    build_response,
    control_nodes,
    device_nodes,
    physical_id,
    preferred_devices,
    preferred_slots,
    visible_env,
)
from hetsched.k8s.deviceplugin.matching import (
    AssignedDevice,
    decide,
    parse_assigned,
    pending,
    preferred,
)
from hetsched.k8s.deviceplugin.publisher import PodView, devices_annotation, merged_annotation
from hetsched.k8s.names import ASSIGN_PHASE, ASSIGNED_DEVICES, ASSIGNED_FOR, DEFAULT_SLOT_SHARE
from hetsched.model.device import Device, Health

# an 8-GPU box: two NVLink domains of four, one per NUMA node; gpu8 has no topology
BOX = {
    f"gpu{i}": Device(
        f"n/gpu{i}", "gpu", "nvidia", "H100", {"numa": i // 4, "nvlink_domain": 4 * (i // 4)}
    )
    for i in range(8)
}
BOX["gpu8"] = Device("n/gpu8", "gpu", "nvidia", "H100")
ALL = [f"gpu{i}" for i in range(9)]


@pytest.mark.parametrize(
    ("available", "must", "size", "chosen", "expected"),
    [
        # everything free: the first group that holds the request
        (ALL, [], 4, None, ["gpu0", "gpu1", "gpu2", "gpu3"]),
        # best fit: domain 4 has two free, domain 0 four; two GPUs go where two are left
        (["gpu0", "gpu1", "gpu2", "gpu3", "gpu5", "gpu7"], [], 2, None, ["gpu5", "gpu7"]),
        # a must-include device pins the group
        (ALL, ["gpu6"], 2, None, ["gpu4", "gpu6"]),
        # no group holds three: the must device's NUMA node first, then by id
        (["gpu0", "gpu1", "gpu4", "gpu5"], ["gpu4"], 3, None, ["gpu4", "gpu5", "gpu0"]),
        # the scheduler's choice wins when it fits
        (ALL, [], 2, ["gpu7", "gpu0"], ["gpu0", "gpu7"]),
        # ... and is ignored when a device in it is not available, or the size differs
        (["gpu1", "gpu2", "gpu3"], [], 2, ["gpu0", "gpu1"], ["gpu1", "gpu2"]),
        (ALL, [], 1, ["gpu0", "gpu1"], ["gpu0"]),
        # ... or when it leaves out a device the kubelet must include
        (ALL, ["gpu5"], 2, ["gpu0", "gpu1"], ["gpu4", "gpu5"]),
        # natural order: gpu10 after gpu9
        (["gpu10", "gpu9"], [], 2, None, ["gpu9", "gpu10"]),
        # asking for everything available, or nothing
        (["gpu3", "gpu8"], [], 2, None, ["gpu3", "gpu8"]),
        (ALL, [], 0, None, []),
    ],
)
def test_preferred_devices(
    available: list[str],
    must: list[str],
    size: int,
    chosen: list[str] | None,
    expected: list[str],
) -> None:
    assert preferred_devices(available, must, size, BOX, chosen) == expected


SLOTS = [f"gpu{g}::{k}" for g in range(3) for k in range(4) if not (g == 1 and k < 3)]


@pytest.mark.parametrize(
    ("available", "must", "size", "chosen", "expected"),
    [
        # the most used GPU that still fits: gpu1 has one slot left
        (SLOTS, [], 1, None, ["gpu1::3"]),
        # two slots do not fit on gpu1: the next fullest, then lowest id
        (SLOTS, [], 2, None, ["gpu0::0", "gpu0::1"]),
        # the scheduler's GPU
        (SLOTS, [], 1, "n/gpu2", ["gpu2::0"]),
        # a must-include slot keeps its GPU
        (SLOTS, ["gpu2::2"], 2, None, ["gpu2::2", "gpu2::0"]),
        # no GPU holds the request alone: whatever is free
        (["gpu0::0", "gpu1::0"], [], 2, None, ["gpu0::0", "gpu1::0"]),
    ],
)
def test_preferred_slots(
    available: list[str], must: list[str], size: int, chosen: str | None, expected: list[str]
) -> None:
    assert preferred_slots(available, must, size, chosen) == expected


def test_ids() -> None:
    assert physical_id("gpu3::2") == "gpu3"
    assert physical_id("n/gpu3") == "gpu3"
    assert physical_id("gpu3") == "gpu3"


def _gpu(number: int, vendor: str = "nvidia", **attributes: object) -> Device:
    return Device(f"n/gpu{number}", "gpu", vendor, "X", attributes)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("assignments", "expected"),
    [
        (
            [Assignment(_gpu(0, uuid="GPU-a", index=5))],
            {
                "CUDA_VISIBLE_DEVICES": "GPU-a",
                "NVIDIA_VISIBLE_DEVICES": "GPU-a",
                "HETSCHED_DEVICES": '[{"id":"n/gpu0","index":5,"share":1000,"uuid":"GPU-a"}]',
            },
        ),
        (
            [Assignment(_gpu(2, "amd")), Assignment(_gpu(3, "amd"))],
            {
                "ROCR_VISIBLE_DEVICES": "2,3",
                "HIP_VISIBLE_DEVICES": "2,3",
                "HETSCHED_DEVICES": '[{"id":"n/gpu2","index":2,"share":1000},'
                '{"id":"n/gpu3","index":3,"share":1000}]',
            },
        ),
        (
            [Assignment(_gpu(1, memory_gib=24), 333)],
            {
                "CUDA_VISIBLE_DEVICES": "1",
                "NVIDIA_VISIBLE_DEVICES": "1",
                "HETSCHED_DEVICES": '[{"id":"n/gpu1","index":1,"share":333}]',
                "HETSCHED_DEVICE_SHARE": "333",
                "HETSCHED_DEVICE_MEMORY_MIB": str(24 * 1024 * 333 // 1000),
                "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": "34",
            },
        ),
        (
            [Assignment(Device("n/fpga0", "fpga", "xilinx", "U250"), 500)],
            {
                "HETSCHED_DEVICES": '[{"id":"n/fpga0","index":0,"share":500}]',
                "HETSCHED_DEVICE_SHARE": "500",
            },
        ),
    ],
)
def test_visible_env(assignments: list[Assignment], expected: dict[str, str]) -> None:
    assert visible_env(assignments) == expected


def test_device_nodes_from_the_driver_and_sysfs(tmp_path: Path) -> None:
    roots = Roots(dev=tmp_path / "dev", sysfs=tmp_path / "sys", proc=tmp_path / "proc")
    info = roots.proc / "driver/nvidia/gpus/0000:3b:00.0/information"
    info.parent.mkdir(parents=True)
    info.write_text("Model: H100\nDevice Minor: 6\n")
    amd = roots.sysfs / "bus/pci/devices/0000:c1:00.0/drm"
    for name in ("card1", "renderD129", "controlD65"):
        (amd / name).mkdir(parents=True)
    roots.dev.mkdir()
    (roots.dev / "kfd").touch()
    (roots.dev / f"xclmgmt{(0x65 << 8) | 0}").touch()

    nvidia = _gpu(0, pci_address="0000:3b:00.0", index=2)
    assert device_nodes(nvidia, roots) == ["/dev/nvidia6"]  # the minor, not the index
    assert device_nodes(_gpu(4), roots) == ["/dev/nvidia4"]
    assert device_nodes(_gpu(1, "amd", pci_address="0000:c1:00.0"), roots) == [
        "/dev/dri/card1",
        "/dev/dri/renderD129",
    ]
    fpga = Device("n/fpga0", "fpga", "xilinx", "U250", {"pci_address": "0000:65:00.0"})
    assert device_nodes(fpga, roots) == [f"/dev/xclmgmt{0x6500}"]
    fake = Device("n/npu0", "npu", "acme", "N1", {"device_nodes": "/dev/acme0, /dev/acmectl"})
    assert device_nodes(fake, roots) == ["/dev/acme0", "/dev/acmectl"]
    assert control_nodes(["amd", "nvidia"], roots) == ["/dev/kfd"]


def test_build_response() -> None:
    response = build_response(
        [Assignment(_gpu(0))],
        ["/dev/nvidia0", "/dev/nvidiactl", "/dev/nvidia0"],
        [MountSpec("/usr/lib/nvidia", "/usr/local/nvidia", True)],
        {"EXTRA": "1"},
    )
    assert [d.host_path for d in response.devices] == ["/dev/nvidia0", "/dev/nvidiactl"]
    assert {d.permissions for d in response.devices} == {"rwm"}
    assert [(m.host_path, m.container_path, m.read_only) for m in response.mounts] == [
        ("/usr/lib/nvidia", "/usr/local/nvidia", True)
    ]
    assert response.envs["EXTRA"] == "1"
    assert response.envs["CUDA_VISIBLE_DEVICES"] == "0"


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ('[{"id": "n/gpu0", "share": 300}]', [AssignedDevice("n/gpu0", 300)]),
        (
            '[{"id": "n/gpu0"}, {"id": "n/gpu1"}]',
            [AssignedDevice("n/gpu0"), AssignedDevice("n/gpu1")],
        ),
        ("[]", []),
        ("not json", None),
        ('{"id": "n/gpu0"}', None),
        ('[{"share": 300}]', None),
        ('[{"id": "n/gpu0", "share": 0}]', None),
        ('[{"id": "n/gpu0", "share": 1001}]', None),
        ('[{"id": "n/gpu0", "share": "300"}]', None),
        (
            '[{"id": "n/gpu0", "share": 300, "resource": "hetsched.io/gpu-shared"}]',
            [AssignedDevice("n/gpu0", 300, "hetsched.io/gpu-shared")],
        ),
        ('[{"id": "n/gpu0", "resource": 7}]', None),
    ],
)
def test_parse_assigned(value: str, expected: list[AssignedDevice] | None) -> None:
    assert parse_assigned(value) == expected


def _pod(
    name: str,
    created: str,
    limits: dict[str, int],
    shares: list[int],
    node: str = "n",
    **annotations: str,
) -> PodView:
    assigned = json.dumps([{"id": f"n/gpu{i}", "share": s} for i, s in enumerate(shares)])
    return PodView(
        "ns",
        name,
        f"uid-{name}",
        created,
        {
            ASSIGNED_DEVICES: assigned,
            ASSIGN_PHASE: "allocating",
            ASSIGNED_FOR: f"{node}/uid-{name}",
            **annotations,
        },
        limits,
    )


GPU_R, SHARED_R = "hetsched.io/gpu", "hetsched.io/gpu-shared"
KNOWN = {f"n/gpu{i}" for i in range(4)}


def _decide(pods: list[PodView], resource: str, ids: list[str], **kwargs: Any) -> Any:
    shared = resource.endswith("-shared")
    candidates = pending(pods, "n", resource, "gpu", shared, KNOWN, kwargs.get("kubelet"))
    return decide(candidates, resource, ids, shared)


def test_decide_honours_the_assignment_the_kubelet_chose() -> None:
    pods = [
        _pod(
            "done",
            "2026-01-01T00:00:00Z",
            {GPU_R: 2},
            [1000, 1000],
            **{"allocated.hetsched.io/gpu": "n/gpu0,n/gpu1"},
        ),
        _pod("two", "2026-01-01T00:00:05Z", {GPU_R: 2}, [1000, 1000]),
        _pod("part", "2026-01-01T00:00:02Z", {SHARED_R: 1}, [400]),
    ]
    honoured = _decide(pods, GPU_R, ["gpu1", "gpu0"])
    assert honoured.pod.name == "two"  # "done" has its devices already
    assert list(honoured.shares) == ["gpu0", "gpu1"]  # in the scheduler's order
    assert honoured.warning == ""
    # the shared pod answers only the shared resource, with its share
    assert _decide(pods, SHARED_R, ["gpu0::3"]).pod.name == "part"
    assert _decide(pods, SHARED_R, ["gpu0::3"]).shares == {"gpu0::3": 400}
    # other devices than assigned: the kubelet's stand, and the warning names the pod
    passed = _decide([pods[1]], GPU_R, ["gpu2", "gpu3"])
    assert passed.pod is None
    assert passed.shares == {"gpu2": 1000, "gpu3": 1000}
    assert passed.passed_over is not None and passed.passed_over.name == "two"
    # several pods wait and none matches: the event cannot name one
    three = _pod("three", "2026-01-01T00:00:07Z", {GPU_R: 1}, [1000])
    several = _decide([*pods, three], GPU_R, ["gpu3"])
    assert several.passed_over is None
    assert "no assignment waiting on this node" in several.warning


@pytest.mark.parametrize(
    ("pod", "why"),
    [
        (_pod("p", "t", {GPU_R: 1}, [1000], node="other"), "written for other/uid-p"),
        (
            PodView(
                "ns",
                "p",
                "uid-p",
                "t",
                {ASSIGNED_DEVICES: '[{"id": "x/gpu0"}]', ASSIGNED_FOR: "n/uid-p"},
                {GPU_R: 1},
            ),
            "x/gpu0 is not on node n",
        ),
        (
            PodView("ns", "p", "uid-p", "t", {ASSIGNED_DEVICES: "[oops"}, {GPU_R: 1}),
            "not readable",
        ),
    ],
)
def test_decide_never_honours_a_foreign_assignment(pod: PodView, why: str) -> None:
    decision = _decide([pod], GPU_R, ["gpu0"])
    assert decision.pod is None
    assert decision.shares == {"gpu0": 1000}
    assert why in decision.warning


def test_pending_follows_the_kubelets_list() -> None:
    a = _pod("a", "2026-01-01T00:00:01Z", {SHARED_R: 1}, [300])
    b = _pod("b", "2026-01-01T00:00:02Z", {SHARED_R: 1}, [500])
    # without the kubelet's list the oldest matching pod is taken
    assert _decide([a, b], SHARED_R, ["gpu0::0"]).pod.name == "a"
    # the kubelet admits b (a holds its slot already, or is not admitted yet)
    for kubelet in ({("ns", "b"): []}, {("ns", "a"): ["gpu0::0"], ("ns", "b"): []}):
        decision = _decide([a, b], SHARED_R, ["gpu0::1"], kubelet=kubelet)
        assert decision.pod is not None and decision.pod.name == "b"
        assert decision.shares == {"gpu0::1": 500}
    candidates = pending([a, b], "n", SHARED_R, "gpu", True, KNOWN, {("ns", "b"): []})
    assert [d.id for d in preferred(candidates, 1) or []] == ["n/gpu0"]


def test_devices_annotation_is_sorted_json() -> None:
    value = devices_annotation(
        [_gpu(1, memory_gib=80), Device("n/gpu0", "gpu", "nvidia", "A100", health=Health.UNHEALTHY)]
    )
    assert json.loads(value) == [
        {
            "id": "n/gpu0",
            "class": "gpu",
            "vendor": "nvidia",
            "model": "A100",
            "attributes": {},
            "health": "unhealthy",
        },
        {
            "id": "n/gpu1",
            "class": "gpu",
            "vendor": "nvidia",
            "model": "X",
            "attributes": {"memory_gib": 80},
            "health": "healthy",
        },
    ]


def test_pending_counts_only_the_plugins_class_for_older_annotations() -> None:
    assigned = json.dumps([{"id": "n/gpu1", "share": 1000}, {"id": "n/fpga0", "share": 1000}])
    pod = PodView(
        "ns",
        "mixed",
        "uid-mixed",
        "2026-01-01T00:00:00Z",
        {ASSIGNED_DEVICES: assigned, ASSIGN_PHASE: "allocating", ASSIGNED_FOR: "n/uid-mixed"},
        {"hetsched.io/gpu": 1, "hetsched.io/fpga": 1},
    )
    (found,) = pending([pod], "n", GPU_R, "gpu", False, KNOWN | {"n/fpga0"}, None)
    assert found.entries == (AssignedDevice("n/gpu1"),)
    (fpga,) = pending([pod], "n", "hetsched.io/fpga", "fpga", False, KNOWN | {"n/fpga0"}, None)
    assert fpga.entries == (AssignedDevice("n/fpga0"),)


def test_merged_annotation_keeps_the_other_classes() -> None:
    fpga = {"id": "n/fpga0", "class": "fpga", "vendor": "xilinx", "model": "U250"}
    old_gpu = {"id": "n/gpu7", "class": "gpu"}
    current = json.dumps([old_gpu, fpga])
    merged = json.loads(merged_annotation(current, "gpu", [_gpu(0)]))
    assert [(e["id"], e["class"]) for e in merged] == [("n/fpga0", "fpga"), ("n/gpu0", "gpu")]
    assert merged[0] == fpga
    for garbage in (None, "", "not json", '{"id": 1}'):
        assert [e["id"] for e in json.loads(merged_annotation(garbage, "gpu", [_gpu(1)]))] == [
            "n/gpu1"
        ]


@given(
    available=st.lists(st.sampled_from(ALL), unique=True),
    must_count=st.integers(0, 3),
    size=st.integers(0, 10),
    chosen=st.none() | st.lists(st.sampled_from(ALL), unique=True, max_size=4),
)
def test_preferred_devices_properties(
    available: list[str], must_count: int, size: int, chosen: list[str] | None
) -> None:
    must = available[: min(must_count, size)]
    picked = preferred_devices(available, must, size, BOX, chosen)
    assert len(picked) == len(set(picked)) == min(size, len(available))
    assert set(picked) <= set(available)
    assert set(must) <= set(picked)


@given(
    slots=st.lists(st.tuples(st.integers(0, 3), st.integers(0, 3)), unique=True).map(
        lambda pairs: [f"gpu{g}::{k}" for g, k in pairs]
    ),
    must_count=st.integers(0, 2),
    size=st.integers(0, 5),
    chosen=st.none() | st.sampled_from(["n/gpu0", "n/gpu3"]),
)
def test_preferred_slots_properties(
    slots: list[str], must_count: int, size: int, chosen: str | None
) -> None:
    must = slots[: min(must_count, size)]
    picked = preferred_slots(slots, must, size, chosen)
    assert len(picked) == len(set(picked)) == min(size, len(slots))
    assert set(picked) <= set(slots)
    assert set(must) <= set(picked)


_entries = st.lists(
    st.tuples(st.sampled_from(["n", "x"]), st.integers(0, 5), st.integers(1, 1000)),
    min_size=1,
    max_size=3,
)


@settings(max_examples=300, deadline=None)
@given(
    pods=st.lists(st.tuples(_entries, st.sampled_from(["n", "other"]), st.booleans()), max_size=4),
    ids=st.lists(st.integers(0, 3), min_size=1, max_size=3, unique=True),
    shared=st.booleans(),
)
def test_an_allocate_hands_out_the_kubelets_ids_and_honours_only_true_assignments(
    pods: list[tuple[list[tuple[str, int, int]], str, bool]], ids: list[int], shared: bool
) -> None:
    resource = SHARED_R if shared else GPU_R
    views = []
    for k, (entries, node, named) in enumerate(pods):
        listed = [
            {"id": f"{n}/gpu{d}", "share": s if shared else 1000, "resource": resource}
            for n, d, s in entries
        ]
        annotations = {ASSIGNED_DEVICES: json.dumps(listed)}
        if named:
            annotations[ASSIGNED_FOR] = f"{node}/uid-{k}"
        views.append(PodView("ns", f"p{k}", f"uid-{k}", f"t{k}", annotations, {resource: 3}))
    kubelet_ids = [f"gpu{i}::0" if shared else f"gpu{i}" for i in ids]
    candidates = pending(views, "n", resource, "gpu", shared, KNOWN, None)
    decision = decide(candidates, resource, kubelet_ids, shared)
    # the container gets exactly the kubelet's devices, each with a share of 1..1000
    assert set(decision.shares) == set(kubelet_ids)
    assert all(1 <= s <= 1000 for s in decision.shares.values())
    if decision.pod is not None:
        k = int(decision.pod.uid.split("-")[1])
        entries, node, named = pods[k]
        assert named and node == "n"  # written for this node and this pod
        assert all(n == "n" for n, _, _ in entries)  # no device of another node
        assigned = {f"gpu{d}" for _, d, _ in entries}
        assert {i.split("::")[0] for i in kubelet_ids} <= assigned
    else:
        assert all(s == (DEFAULT_SLOT_SHARE if shared else 1000) for s in decision.shares.values())

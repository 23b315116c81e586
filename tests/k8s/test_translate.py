"""Kubernetes JSON to the model: literal tables of inputs and what they must become."""

from __future__ import annotations

import contextlib
import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hetsched.cluster.placement import DeviceShare, Placement
from hetsched.k8s.names import DEFAULT_SLOT_SHARE, POD_GROUP
from hetsched.k8s.podrequest import device_requests
from hetsched.k8s.translate import (
    TranslateError,
    assigned_devices,
    assignment_annotations,
    controller_uid,
    devices_annotation,
    group_job,
    node_from_k8s,
    pod_info,
    pod_job,
    pod_request,
    restored_placement,
)
from hetsched.model.device import Device, Health, Taint, TaintEffect
from hetsched.model.job import DeviceRequest, Toleration
from k8s.apiserver import pod_json

GPU = {
    "id": "g0",
    "class": "gpu",
    "vendor": "nvidia",
    "model": "A100",
    "attributes": {"memory_gib": 80, "numa": 0},
    "health": "healthy",
}


def node(**over: Any) -> dict[str, Any]:
    obj: dict[str, Any] = {
        "metadata": {"name": "n1", "labels": {"zone": "z1"}, "annotations": {}},
        "spec": {},
        "status": {"allocatable": {"cpu": "7500m", "memory": "32Gi"}},
    }
    for key, value in over.items():
        obj[key] = {**obj.get(key, {}), **value}
    return obj


def pod(
    containers: list[dict[str, Any]],
    annotations: dict[str, str] | None = None,
    labels: dict[str, str] | None = None,
    **spec: Any,
) -> dict[str, Any]:
    return {
        "metadata": {
            "name": "p",
            "namespace": "team-a",
            "uid": "u-1",
            "annotations": annotations or {},
            "labels": labels or {},
        },
        "spec": {"schedulerName": "hetsched", "containers": containers, **spec},
    }


def c(requests: dict[str, str] | None = None, limits: dict[str, str] | None = None) -> Any:
    return {"name": "c", "resources": {"requests": requests or {}, "limits": limits or {}}}


NODE_CASES = [
    ("plain", node(), 7500, 32768, (), ()),
    (
        "devices from the annotation",
        node(metadata={"name": "n1", "annotations": {"hetsched.io/devices": json.dumps([GPU])}}),
        7500,
        32768,
        (Device("g0", "gpu", "nvidia", "A100", {"memory_gib": 80, "numa": 0}),),
        (),
    ),
    (
        "taints, cordoned and not ready",
        node(
            spec={
                "taints": [{"key": "gpu", "value": "yes", "effect": "NoExecute"}],
                "unschedulable": True,
            },
            status={
                "allocatable": {"cpu": "2", "memory": "1Gi"},
                "conditions": [{"type": "Ready", "status": "False"}],
            },
        ),
        2000,
        1024,
        (),
        (
            Taint("gpu", "yes", TaintEffect.NO_EXECUTE),
            Taint("node.kubernetes.io/unschedulable"),
            Taint("node.kubernetes.io/not-ready"),
        ),
    ),
]


@pytest.mark.parametrize(("case", "obj", "cpu", "memory", "devices", "taints"), NODE_CASES)
def test_node(case: str, obj: Any, cpu: int, memory: int, devices: Any, taints: Any) -> None:
    got = node_from_k8s(obj)
    assert (got.cpu_milli, got.memory_mib, got.devices, got.taints) == (
        cpu,
        memory,
        devices,
        taints,
    ), case


def test_node_labels_and_unhealthy_device() -> None:
    sick = {**GPU, "health": "Unhealthy"}
    obj = node(
        metadata={
            "name": "n1",
            "labels": {"zone": "z1"},
            "annotations": {"hetsched.io/devices": json.dumps([sick])},
        }
    )
    got = node_from_k8s(obj)
    assert got.labels["zone"] == "z1"
    assert got.devices[0].health is Health.UNHEALTHY


def test_devices_annotation_round_trips() -> None:
    devices = (Device("g0", "gpu", "nvidia", "A100", {"memory_gib": 80}),)
    obj = node(
        metadata={"name": "n", "annotations": {"hetsched.io/devices": devices_annotation(devices)}}
    )
    assert node_from_k8s(obj).devices == devices


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        ("not json", "not JSON"),
        ('{"id": "x"}', "must be a JSON list"),
        ('[{"id": "x"}]', "needs 'id' and 'class'"),
    ],
)
def test_node_with_a_bad_device_annotation(bad: str, message: str) -> None:
    obj = node(metadata={"name": "n1", "annotations": {"hetsched.io/devices": bad}})
    with pytest.raises(TranslateError, match=message):
        node_from_k8s(obj)


POD_CASES = [
    (
        "cpu and memory summed",
        [c({"cpu": "500m", "memory": "1Gi"}), c({"cpu": "1", "memory": "512Mi"})],
        {},
        1500,
        1536,
        (),
    ),
    ("limits stand in for requests", [c(limits={"cpu": "2", "memory": "2Gi"})], {}, 2000, 2048, ()),
    (
        "whole gpus",
        [c({"cpu": "1"}, {"hetsched.io/gpu": "2"})],
        {},
        1000,
        0,
        (DeviceRequest.of("gpu", 2),),
    ),
    (
        "a share of one gpu",
        [c(limits={"hetsched.io/gpu": "1"})],
        {"hetsched.io/share": "300"},
        0,
        0,
        (DeviceRequest.of("gpu", 1, 300),),
    ),
    (
        "a slot of a shared gpu",
        [c(limits={"hetsched.io/gpu-shared": "1"})],
        {"hetsched.io/share": "250"},
        0,
        0,
        (DeviceRequest.of("gpu", 1, 250),),
    ),
    (
        "a selector",
        [c(limits={"hetsched.io/fpga": "1"})],
        {"hetsched.io/selector": 'device.attributes["model"] == "U250"'},
        0,
        0,
        (DeviceRequest.of("fpga", 1, selector='device.attributes["model"] == "U250"'),),
    ),
    ("other extended resources are not ours", [c(limits={"nvidia.com/gpu": "1"})], {}, 0, 0, ()),
]


@pytest.mark.parametrize(
    ("case", "containers", "annotations", "cpu", "memory", "devices"), POD_CASES
)
def test_pod_request(
    case: str, containers: Any, annotations: Any, cpu: int, memory: int, devices: Any
) -> None:
    got = pod_request(pod(containers, annotations))
    assert (got.cpu_milli, got.memory_mib, got.devices) == (cpu, memory, devices), case


def test_pod_selectors_and_tolerations() -> None:
    obj = pod(
        [c({"cpu": "1"})],
        nodeSelector={"zone": "z1"},
        tolerations=[
            {"key": "gpu", "operator": "Exists", "effect": "NoSchedule"},
            {"key": "team", "operator": "Equal", "value": "a"},
        ],
    )
    got = pod_request(obj)
    assert dict(got.node_selector) == {"zone": "z1"}
    assert got.tolerations == (
        Toleration("gpu", None, TaintEffect.NO_SCHEDULE),
        Toleration("team", "a", None),
    )


@pytest.mark.parametrize(
    ("containers", "annotations", "message"),
    [
        ([c(limits={"hetsched.io/gpu": "2"})], {"hetsched.io/share": "300"}, "needs a limit of 1"),
        ([c(limits={"hetsched.io/gpu": "1"})], {"hetsched.io/share": "x"}, "must be an integer"),
        ([c(limits={"hetsched.io/gpu": "1"})], {"hetsched.io/share": "2000"}, "must be 1..1000"),
        ([c({"cpu": "lots"})], {}, "resources"),
    ],
)
def test_bad_pods(containers: Any, annotations: Any, message: str) -> None:
    with pytest.raises(TranslateError, match=message):
        pod_request(pod(containers, annotations))


def test_pod_info_queue_priority_group() -> None:
    obj = pod(
        [c()],
        {"hetsched.io/min-available": "4"},
        {"hetsched.io/pod-group": "train", "hetsched.io/queue": "research"},
        priority=50,
    )
    info = pod_info(obj)
    assert (info.key, info.queue, info.priority, info.group, info.min_available) == (
        "team-a/p",
        "research",
        50,
        "train",
        4,
    )
    assert info.schedulable_by("hetsched")
    assert not info.schedulable_by("default-scheduler")
    assert pod_info(pod([c()])).queue == "team-a"  # the namespace by default


@pytest.mark.parametrize(
    ("spec", "meta", "phase", "schedulable"),
    [
        ({"nodeName": "n1"}, {}, "Pending", False),
        ({"schedulingGates": [{"name": "wait"}]}, {}, "Pending", False),
        ({}, {"deletionTimestamp": "2026-01-01T00:00:00Z"}, "Pending", False),
        ({}, {}, "Succeeded", False),
        ({}, {}, "Pending", True),
    ],
)
def test_which_pods_wait_for_us(spec: Any, meta: Any, phase: str, schedulable: bool) -> None:
    obj = pod([c()], **spec)
    obj["metadata"].update(meta)
    obj["status"] = {"phase": phase}
    assert pod_info(obj).schedulable_by("hetsched") is schedulable


def test_jobs_of_pods_and_groups() -> None:
    obj = pod([c({"cpu": "1"}, {"hetsched.io/gpu": "1"})], priority=7)
    job = pod_job(obj)
    assert (job.id, job.queue, job.priority, job.replicas) == ("team-a/p", "team-a", 7, 1)
    gang = group_job("g", [obj, obj, obj], min_available=4)
    assert (gang.replicas, gang.gang_min) == (3, 3)
    other = pod([c({"cpu": "2"})])
    with pytest.raises(TranslateError, match="same resources"):
        group_job("g", [obj, other], 2)


def test_assigned_devices_and_restore() -> None:
    placement = Placement("n1", 1000, 0, (DeviceShare("g0", 300),))
    annotation = assigned_devices(placement)
    assert json.loads(annotation) == [{"id": "g0", "share": 300}]
    obj = pod(
        [c({"cpu": "1"}, {"hetsched.io/gpu": "1"})],
        {"hetsched.io/assigned-devices": annotation},
        nodeName="n1",
    )
    assert restored_placement(obj) == placement
    assert restored_placement(pod([c()])) is None


# -- several device classes and shares per class ----------------------------------------------

G, GS, F, N = "hetsched.io/gpu", "hetsched.io/gpu-shared", "hetsched.io/fpga", "hetsched.io/npu"

CLASS_CASES = [
    (
        "the bare share belongs to the shared slot, not to the FPGA",
        {GS: "1", F: "1"},
        {"hetsched.io/share": "300"},
        [(F, DeviceRequest.of("fpga", 1)), (GS, DeviceRequest.of("gpu", 1, 300))],
    ),
    (
        "a slot without a share is a tenth of a device, never a whole one",
        {GS: "1"},
        {},
        [(GS, DeviceRequest.of("gpu", 1, DEFAULT_SLOT_SHARE))],
    ),
    (
        "a whole GPU and a slot stay two requests",
        {G: "1", GS: "1"},
        {"hetsched.io/share.gpu": "250"},
        [(G, DeviceRequest.of("gpu", 1)), (GS, DeviceRequest.of("gpu", 1, 250))],
    ),
    (
        "shares per class",
        {GS: "1", "hetsched.io/npu-shared": "1", F: "2"},
        {"hetsched.io/share.gpu": "300", "hetsched.io/share.npu": "500"},
        [
            (F, DeviceRequest.of("fpga", 2)),
            (GS, DeviceRequest.of("gpu", 1, 300)),
            ("hetsched.io/npu-shared", DeviceRequest.of("npu", 1, 500)),
        ],
    ),
    (
        "a per-class share wins over the bare one",
        {GS: "1"},
        {"hetsched.io/share": "300", "hetsched.io/share.gpu": "600"},
        [(GS, DeviceRequest.of("gpu", 1, 600))],
    ),
    (
        "a selector per class, the bare one for the rest",
        {G: "1", F: "1"},
        {
            "hetsched.io/selector": 'device.attributes["model"] == "A100"',
            "hetsched.io/selector.fpga": 'device.attributes["model"] == "U250"',
        },
        [
            (F, DeviceRequest.of("fpga", 1, selector='device.attributes["model"] == "U250"')),
            (G, DeviceRequest.of("gpu", 1, selector='device.attributes["model"] == "A100"')),
        ],
    ),
]


@pytest.mark.parametrize(("case", "limits", "annotations", "expected"), CLASS_CASES)
def test_device_requests_per_class(
    case: str, limits: dict[str, str], annotations: dict[str, str], expected: Any
) -> None:
    assert device_requests(pod([c(limits=limits)], annotations)) == expected, case


@pytest.mark.parametrize(
    ("limits", "annotations", "message"),
    [
        ({G: "1", F: "1"}, {"hetsched.io/share": "300"}, "ambiguous"),
        ({GS: "1", N + "-shared": "1"}, {"hetsched.io/share": "300"}, "ambiguous"),
        ({G: "1"}, {"hetsched.io/share.fpga": "300"}, "asks for no hetsched.io/fpga"),
        ({GS: "2"}, {}, "must be 1"),
        ({G: "-1"}, {}, "must not be negative"),
        ({G: "x"}, {}, "whole number"),
        ({G: "1"}, {"hetsched.io/share.gpu": "0"}, "1..1000"),
    ],
)
def test_bad_device_requests(limits: Any, annotations: Any, message: str) -> None:
    with pytest.raises(TranslateError, match=message):
        pod_request(pod([c(limits=limits)], annotations))


def test_the_assignment_names_each_devices_resource_the_node_and_the_pod() -> None:
    obj = pod([c(limits={G: "1", GS: "1", F: "1"})], {"hetsched.io/share.gpu": "300"})
    placement = Placement(
        "n1",
        0,
        0,
        (DeviceShare("n1/fpga0", 1000), DeviceShare("n1/gpu0", 1000), DeviceShare("n1/gpu1", 300)),
    )
    annotations = assignment_annotations(obj, placement)
    assert json.loads(annotations["hetsched.io/assigned-devices"]) == [
        {"id": "n1/fpga0", "share": 1000, "resource": F},
        {"id": "n1/gpu0", "share": 1000, "resource": G},
        {"id": "n1/gpu1", "share": 300, "resource": GS},
    ]
    assert annotations["hetsched.io/assign-phase"] == "allocating"
    assert annotations["hetsched.io/assigned-for"] == "n1/u-1"
    # what a restart reads back
    bound = pod([c(limits={G: "1", GS: "1", F: "1"})], annotations, nodeName="n1")
    restored = restored_placement(bound)
    assert restored is not None
    assert restored.devices == placement.devices


_CLASSES = ["gpu", "fpga", "npu"]


@settings(max_examples=200, deadline=None)
@given(
    whole=st.dictionaries(st.sampled_from(_CLASSES), st.integers(0, 3)),
    shared=st.sets(st.sampled_from(_CLASSES)),
    shares=st.dictionaries(st.sampled_from(_CLASSES), st.integers(1, 1000)),
)
def test_a_share_of_one_class_never_changes_another(
    whole: dict[str, int], shared: set[str], shares: dict[str, int]
) -> None:
    limits = {f"hetsched.io/{k}": str(n) for k, n in whole.items()}
    limits |= {f"hetsched.io/{k}-shared": "1" for k in shared}
    asked = {k for k, n in whole.items() if n} | shared
    annotations = {f"hetsched.io/share.{k}": str(v) for k, v in shares.items() if k in asked}
    try:
        requests = device_requests(pod([c(limits=limits)], annotations))
    except TranslateError as exc:
        # only a share below 1000 on several whole devices of a class is refused
        assert "needs a limit of 1" in str(exc)
        return
    for resource, request in requests:
        choice = request.primary
        if resource.endswith("-shared"):
            assert choice.share == shares.get(choice.device_class, DEFAULT_SLOT_SHARE)
        elif choice.device_class in shared or choice.device_class not in shares:
            assert choice.share == 1000  # whole devices stay whole
        else:
            assert choice.share == shares[choice.device_class]
    assert sorted(r for r, _ in requests) == sorted(
        [f"hetsched.io/{k}" for k, n in whole.items() if n]
        + [f"hetsched.io/{k}-shared" for k in shared]
    )


@settings(max_examples=300, deadline=None)
@given(
    obj=st.recursive(
        st.none() | st.booleans() | st.integers() | st.text(max_size=6),
        lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner),
        max_leaves=25,
    )
)
def test_any_json_is_read_or_refused_with_a_translate_error(obj: Any) -> None:
    for read in (pod_request, pod_info, node_from_k8s):
        with contextlib.suppress(TranslateError):
            read(obj if isinstance(obj, dict) else {"spec": obj, "metadata": obj})


def test_a_selector_that_does_not_compile_names_its_annotation() -> None:
    obj = pod([c(limits={G: "1"})], {"hetsched.io/selector.gpu": 'device.attributes["model"] =='})
    with pytest.raises(TranslateError, match=r"annotation hetsched.io/selector.gpu"):
        pod_request(obj)


@pytest.mark.parametrize(
    ("annotations", "rates", "job_type", "work"),
    [
        ({}, {}, None, None),
        ({"hetsched.io/speed": "A100:3.1;V100:1"}, {"A100": 3.1, "V100": 1.0}, None, None),
        (
            {"hetsched.io/job-type": "ResNet-50 (batch size 64)"},
            {},
            "ResNet-50 (batch size 64)",
            None,
        ),
        (
            {"hetsched.io/speed": "A100=2, V100=1", "hetsched.io/work": "1.2e6"},
            {"A100": 2.0, "V100": 1.0},
            None,
            1.2e6,
        ),
    ],
)
def test_pod_speed_annotations(
    annotations: dict[str, str], rates: dict[str, float], job_type: str | None, work: float | None
) -> None:
    job = pod_job(pod([c(limits={"hetsched.io/gpu": "1"})], annotations))
    assert dict(job.speed.rates) == rates
    assert (job.speed.job_type, job.speed.work) == (job_type, work)
    group = group_job("g", [pod([c()], annotations), pod([c()], annotations)], 2)
    assert group.speed == job.speed


@pytest.mark.parametrize(
    ("annotations", "message"),
    [
        ({"hetsched.io/speed": "A100"}, "annotation hetsched.io/speed: speed entry 'A100'"),
        ({"hetsched.io/speed": "A100:-1"}, "hetsched.io/speed: A100: rate must be finite"),
        ({"hetsched.io/work": "lots"}, "annotation hetsched.io/work: work 'lots'"),
        (
            {"hetsched.io/speed": "A100:2", "hetsched.io/work": "2h@T4"},
            "which the speed map does not list",
        ),
    ],
)
def test_bad_pod_speed_annotations(annotations: dict[str, str], message: str) -> None:
    with pytest.raises(TranslateError, match=message):
        pod_job(pod([c()], annotations))


_RS = {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "rs", "uid": "u1", "controller": True}


@pytest.mark.parametrize(
    ("metadata", "uid"),
    [
        (None, None),
        ({}, None),
        ({"ownerReferences": "not a list"}, None),
        ({"ownerReferences": [None, 3]}, None),
        ({"ownerReferences": [{**_RS, "controller": False}]}, None),
        ({"ownerReferences": [{**_RS, "uid": ""}]}, None),
        ({"ownerReferences": [_RS]}, "u1"),
    ],
)
def test_the_controller_of_a_pod_is_read_from_its_owner_references(
    metadata: Any, uid: str | None
) -> None:
    assert controller_uid({"metadata": metadata}) == uid


def test_only_a_pod_something_recreates_makes_a_movable_job() -> None:
    bare = pod_json("bare", devices={"gpu": 1})
    owned = pod_json("owned", devices={"gpu": 1})
    owned["metadata"]["ownerReferences"] = [_RS]
    grouped = pod_json("grouped", devices={"gpu": 1}, labels={POD_GROUP: "g"})
    assert [pod_job(p).movable for p in (bare, owned, grouped)] == [False, True, True]

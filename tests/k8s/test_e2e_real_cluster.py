"""The scheduler's scenarios against a real cluster; skipped unless ``KUBECONFIG`` is set.

Run it with kind (docs/kubernetes.md, "Try it with kind"):

    KUBECONFIG=~/.kube/config .venv/bin/pytest tests/k8s/test_e2e_real_cluster.py -p no:xdist

The cluster needs no GPUs: the test gives its nodes a fake device inventory by writing the
``hetsched.io/devices`` annotation (what the device plugin would write) and removes it at
the end. Pods are created in a fresh namespace with the image ``registry.k8s.io/pause``;
they are bound by a hetsched scheduler running in this process, under a scheduler name of
its own, so nothing else in the cluster is touched. (Pods asking for ``hetsched.io/*``
resources stay unstartable on kubelets without the device plugin; the test checks the
scheduler's decisions, the Binding and the events, not that containers run.)

Dynamic Resource Allocation (needs resource.k8s.io/v1: Kubernetes 1.34 or newer; skipped
otherwise): the DRA driver's ResourceSlice publisher, running in this process under a
driver name of its own (``e2e-<id>.hetsched.io``), publishes a fake inventory as the first
node's pool, which the real API server must accept; a DeviceClass of that driver and a
ResourceClaim with a CEL selector are created, and a pod using the claim makes
kube-scheduler allocate it from those slices; the driver's prepare step (the one the
kubelet calls over gRPC) then prepares the claim the real scheduler allocated, writing its
CDI spec in a temporary folder. The hetsched scheduler allocates a claim of its own pod from
the same slices (status.allocation, reservedFor, its finalizer, then the Binding, all
accepted by the real API server) and gives it back when the pod is deleted. Everything is
removed at the end.
"""

from __future__ import annotations

import json
import os
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from hetsched.k8s.api import ApiError, KubeClusterAPI, load_api
from hetsched.k8s.names import ASSIGNED_DEVICES, NODE_DEVICES, POD_GROUP, POD_GROUP_MIN
from hetsched.k8s.scheduler import PodScheduler

pytestmark = pytest.mark.skipif(
    not os.environ.get("KUBECONFIG"), reason="needs a real cluster: set KUBECONFIG"
)

NAME = f"hetsched-e2e-{uuid.uuid4().hex[:6]}"


@pytest.fixture(scope="module")
def api() -> KubeClusterAPI:
    return load_api(os.environ["KUBECONFIG"])


@pytest.fixture(scope="module")
def namespace(api: KubeClusterAPI) -> Iterator[str]:
    api.core.create_namespace({"metadata": {"name": NAME}})
    yield NAME
    api.core.delete_namespace(NAME)


@pytest.fixture(scope="module")
def node(api: KubeClusterAPI) -> Iterator[str]:
    """The first node, given 9 fake GPUs and an FPGA for the duration of the suite."""
    nodes, _ = api.list_nodes()
    name = nodes[0]["metadata"]["name"]
    devices = [
        {
            "id": f"{name}/gpu{i}",
            "class": "gpu",
            "vendor": "nvidia",
            "model": "A100",
            "attributes": {"memory_gib": 80},
            "health": "healthy",
        }
        for i in range(9)
    ] + [
        {
            "id": f"{name}/fpga0",
            "class": "fpga",
            "vendor": "xilinx",
            "model": "U250",
            "attributes": {},
            "health": "healthy",
        }
    ]
    previous = (nodes[0]["metadata"].get("annotations") or {}).get(NODE_DEVICES)
    api.core.patch_node(name, {"metadata": {"annotations": {NODE_DEVICES: json.dumps(devices)}}})
    yield name
    api.core.patch_node(name, {"metadata": {"annotations": {NODE_DEVICES: previous}}})


@pytest.fixture
def sched(api: KubeClusterAPI, node: str, namespace: str) -> Iterator[PodScheduler]:
    scheduler = PodScheduler(api, scheduler_name=NAME, watch_timeout_s=30)
    scheduler.sync()
    scheduler.start_watches()
    yield scheduler
    scheduler.stop()


def pod(name: str, namespace: str, devices: dict[str, int], **meta: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": namespace, **meta},
        "spec": {
            "schedulerName": NAME,
            "containers": [
                {
                    "name": "pause",
                    "image": "registry.k8s.io/pause:3.9",
                    "resources": {
                        "requests": {"cpu": "10m", "memory": "16Mi"},
                        "limits": {f"hetsched.io/{k}": str(v) for k, v in devices.items()},
                    },
                }
            ],
        },
    }


def wait_bound(api: KubeClusterAPI, sched: PodScheduler, namespace: str, names: list[str]) -> None:
    for _ in range(300):
        pods = [api.core.read_namespaced_pod(n, namespace) for n in names]
        if all(p.spec.node_name for p in pods):
            return
        sched.step(0.1)
    raise AssertionError(f"not all of {names} were bound")


def test_gang_of_four(api: KubeClusterAPI, sched: PodScheduler, namespace: str) -> None:
    meta = {"labels": {POD_GROUP: "g"}, "annotations": {POD_GROUP_MIN: "4"}}
    names = [f"w{i}" for i in range(4)]
    for name in names:
        api.core.create_namespaced_pod(namespace, pod(name, namespace, {"gpu": 2}, **meta))
    wait_bound(api, sched, namespace, names)
    ids = [
        d["id"]
        for n in names
        for d in json.loads(
            api.core.read_namespaced_pod(n, namespace).metadata.annotations[ASSIGNED_DEVICES]
        )
    ]
    assert len(set(ids)) == 8


def test_fractional_gpu_and_fpga(api: KubeClusterAPI, sched: PodScheduler, namespace: str) -> None:
    shared = pod("shared", namespace, {"gpu-shared": 1}, annotations={"hetsched.io/share": "300"})
    api.core.create_namespaced_pod(namespace, shared)
    api.core.create_namespaced_pod(namespace, pod("fpga", namespace, {"fpga": 1}))
    wait_bound(api, sched, namespace, ["shared", "fpga"])
    share = api.core.read_namespaced_pod("shared", namespace).metadata.annotations
    assert json.loads(share[ASSIGNED_DEVICES])[0]["share"] == 300
    annotation = api.core.read_namespaced_pod("fpga", namespace).metadata.annotations
    assert json.loads(annotation[ASSIGNED_DEVICES])[0]["id"].endswith("fpga0")


def test_failed_scheduling_event(api: KubeClusterAPI, sched: PodScheduler, namespace: str) -> None:
    api.core.create_namespaced_pod(namespace, pod("huge", namespace, {"gpu": 64}))
    for _ in range(300):
        events = api.core.list_namespaced_event(
            namespace, field_selector="involvedObject.name=huge,reason=FailedScheduling"
        ).items
        if events:
            break
        sched.step(0.1)
    assert events
    assert "gpu" in events[0].message


def test_preemption_notice_and_checkpoint_report(
    api: KubeClusterAPI, node: str, namespace: str
) -> None:
    """A checkpointable victim gets the notice condition and annotation from the real API
    server (pods/status strategic merge, pods merge patch), and is deleted as soon as it
    reports a checkpoint through the same patch `hetsched checkpoint` makes in a pod. (The
    pause containers never start without the device plugin; the downward API env vars of
    deploy/kubernetes/examples/checkpointing.yaml need a real image and device plugin.)"""
    from hetsched.framework.profile import parse_profile
    from hetsched.k8s.names import CHECKPOINT, NOTICE_CONDITION, PREEMPTION_NOTICE
    from hetsched.k8s.selfreport import report_checkpoint

    # the node's 9 fake GPUs to itself: the earlier tests' pods go first
    api.core.delete_collection_namespaced_pod(namespace, grace_period_seconds=0)
    for _ in range(300):
        if not api.core.list_namespaced_pod(namespace).items:
            break
        time.sleep(0.1)
    profile = parse_profile({"queue_sort": "priority", "post_filter": ["preemption"]})
    sched = PodScheduler(api, profile, scheduler_name=NAME, watch_timeout_s=30)
    sched.sync()
    sched.start_watches()
    try:
        low = pod("low", namespace, {"gpu": 9}, annotations={CHECKPOINT: '{"notice_s": "10m"}'})
        api.core.create_namespaced_pod(namespace, low)
        wait_bound(api, sched, namespace, ["low"])
        high = pod("high", namespace, {"gpu": 9})
        high["spec"]["priority"] = 9
        api.core.create_namespaced_pod(namespace, high)
        for _ in range(300):
            found = api.core.read_namespaced_pod("low", namespace)
            conditions = [c for c in found.status.conditions or [] if c.type == NOTICE_CONDITION]
            if conditions and PREEMPTION_NOTICE in (found.metadata.annotations or {}):
                break
            sched.step(0.1)
        assert conditions and conditions[0].status == "True"
        report_checkpoint(api, namespace, "low", 5, "/ckpt/5")
        for _ in range(300):
            names = [p.metadata.name for p in api.core.list_namespaced_pod(namespace).items]
            if "low" not in names:
                break
            sched.step(0.1)
        assert "low" not in names
        wait_bound(api, sched, namespace, ["high"])
        api.core.delete_namespaced_pod("high", namespace)
    finally:
        sched.stop()


# -- Dynamic Resource Allocation ---------------------------------------------------------------

DRIVER = f"e2e-{NAME[-6:]}.hetsched.io"
DEVICE_CLASS = f"gpu.{DRIVER}"


@pytest.fixture(scope="module")
def dra(api: KubeClusterAPI) -> None:
    try:
        api.list_resource_slices()
    except ApiError as exc:
        pytest.skip(f"the cluster serves no resource.k8s.io/v1 ({exc}): needs Kubernetes 1.34+")


@pytest.fixture(scope="module")
def slices(api: KubeClusterAPI, dra: None) -> Iterator[Any]:
    """The first node's fake GPUs and FPGA, published as a pool of this run's driver."""
    from hetsched.k8s.dra.slices import SlicePublisher
    from hetsched.model.device import Device

    nodes, _ = api.list_nodes()
    node = nodes[0]["metadata"]["name"]
    devices = [
        Device(f"{node}/gpu{i}", "gpu", "nvidia", "A100", {"memory_gib": 80, "numa": i // 2})
        for i in range(4)
    ] + [Device(f"{node}/fpga0", "fpga", "xilinx", "U250", {"numa": 0})]
    publisher = SlicePublisher(api, DRIVER, node, shareable=["gpu"])
    assert publisher.publish(devices)
    yield publisher, devices
    publisher.withdraw()


@pytest.fixture(scope="module")
def device_class(api: KubeClusterAPI, dra: None) -> Iterator[str]:
    body = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass",
        "metadata": {"name": DEVICE_CLASS},
        "spec": {
            "selectors": [
                {
                    "cel": {
                        "expression": f'device.driver == "{DRIVER}" && '
                        f'device.attributes["{DRIVER}"].type == "gpu" && '
                        f'device.attributes["{DRIVER}"].healthy'
                    }
                }
            ]
        },
    }
    api.resource.create_device_class(body)
    yield DEVICE_CLASS
    api.resource.delete_device_class(DEVICE_CLASS)


def test_dra_slices_are_accepted_and_get_new_generations(api: KubeClusterAPI, slices: Any) -> None:
    from dataclasses import replace

    from hetsched.model.device import Health

    publisher, devices = slices
    node = devices[0].id.split("/")[0]
    (body,) = api.list_resource_slices(f"spec.nodeName={node},spec.driver={DRIVER}")
    assert [d["name"] for d in body["spec"]["devices"]] == ["fpga0", "gpu0", "gpu1", "gpu2", "gpu3"]
    first = body["spec"]["pool"]["generation"]
    assert publisher.publish([replace(devices[0], health=Health.UNHEALTHY), *devices[1:]])
    (after,) = api.list_resource_slices(f"spec.nodeName={node},spec.driver={DRIVER}")
    assert after["spec"]["pool"]["generation"] == first + 1
    gpu0 = next(d for d in after["spec"]["devices"] if d["name"] == "gpu0")
    assert gpu0["attributes"]["healthy"] == {"bool": False}
    assert publisher.publish(devices)  # healthy again, for the allocation test


def test_kube_scheduler_allocates_a_claim_from_our_slices_and_the_driver_prepares_it(
    api: KubeClusterAPI, namespace: str, slices: Any, device_class: str
) -> None:
    from hetsched.k8s.deviceplugin.allocation import Roots
    from hetsched.k8s.dra.book import DeviceBook
    from hetsched.k8s.dra.checkpoint import Checkpoint
    from hetsched.k8s.dra.prepare import ClaimRef, Preparer

    _, devices = slices
    node = devices[0].id.split("/")[0]
    claim = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": "one-a100", "namespace": namespace},
        "spec": {
            "devices": {
                "requests": [
                    {
                        "name": "gpu",
                        "exactly": {
                            "deviceClassName": device_class,
                            "selectors": [
                                {
                                    "cel": {
                                        "expression": f'device.attributes["{DRIVER}"].model '
                                        '== "A100"'
                                    }
                                }
                            ],
                        },
                    }
                ]
            }
        },
    }
    api.resource.create_namespaced_resource_claim(namespace, claim)
    pod = {
        "metadata": {"name": "dra-pod", "namespace": namespace},
        "spec": {
            "nodeSelector": {"kubernetes.io/hostname": node},
            "resourceClaims": [{"name": "gpu", "resourceClaimName": "one-a100"}],
            "containers": [
                {
                    "name": "pause",
                    "image": "registry.k8s.io/pause:3.9",
                    "resources": {"claims": [{"name": "gpu"}]},
                }
            ],
        },
    }
    api.core.create_namespaced_pod(namespace, pod)
    allocated: dict[str, Any] | None = None
    for _ in range(300):
        allocated = api.get_resource_claim(namespace, "one-a100")
        if allocated and (allocated.get("status") or {}).get("allocation"):
            break
        time.sleep(0.1)
    assert allocated is not None and allocated["status"]["allocation"], (
        "kube-scheduler did not allocate"
    )
    (result,) = allocated["status"]["allocation"]["devices"]["results"]
    assert (result["driver"], result["pool"]) == (DRIVER, node)
    assert result["device"].startswith("gpu")
    # the driver's prepare step, on the claim the real scheduler allocated
    book = DeviceBook()
    book.update(devices, [])
    with tempfile.TemporaryDirectory() as folder:
        preparer = Preparer(
            DRIVER, node, api, book, Checkpoint(Path(folder) / "cp.json"), Path(folder), Roots()
        )
        uid = allocated["metadata"]["uid"]
        outcome = preparer.prepare([ClaimRef(namespace, uid, "one-a100")])[uid]
        assert outcome.error == ""
        assert [d.device for d in outcome.devices] == [result["device"]]
        assert (Path(folder) / f"k8s.hetsched.io-claim_{uid}.json").exists()


def test_the_hetsched_scheduler_allocates_a_claim_and_gives_it_back(
    api: KubeClusterAPI, sched: PodScheduler, namespace: str, slices: Any, device_class: str
) -> None:
    from hetsched.k8s.claims.writes import FINALIZER

    _, devices = slices
    node = devices[0].id.split("/")[0]
    selector = f'device.attributes["{DRIVER}"].model == "A100"'
    claim = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": "ours", "namespace": namespace},
        "spec": {
            "devices": {
                "requests": [
                    {
                        "name": "gpu",
                        "exactly": {
                            "deviceClassName": device_class,
                            "selectors": [{"cel": {"expression": selector}}],
                        },
                    }
                ]
            }
        },
    }
    api.resource.create_namespaced_resource_claim(namespace, claim)
    body = pod("dra-ours", namespace, {})
    body["spec"]["resourceClaims"] = [{"name": "gpu", "resourceClaimName": "ours"}]
    body["spec"]["containers"][0]["resources"]["claims"] = [{"name": "gpu"}]
    api.core.create_namespaced_pod(namespace, body)
    wait_bound(api, sched, namespace, ["dra-ours"])
    allocated = api.get_resource_claim(namespace, "ours")
    assert allocated is not None
    (result,) = allocated["status"]["allocation"]["devices"]["results"]
    assert (result["driver"], result["pool"], result["request"]) == (DRIVER, node, "gpu")
    assert [r["name"] for r in allocated["status"]["reservedFor"]] == ["dra-ours"]
    assert FINALIZER in allocated["metadata"]["finalizers"]
    assert api.core.read_namespaced_pod("dra-ours", namespace).spec.node_name == node
    # the pod goes: the claim is given back (reservation, allocation, finalizer)
    api.core.delete_namespaced_pod("dra-ours", namespace, grace_period_seconds=0)
    for _ in range(300):
        after = api.get_resource_claim(namespace, "ours")
        if after is not None and "allocation" not in (after.get("status") or {}):
            break
        sched.step(0.1)
    assert after is not None and "allocation" not in (after.get("status") or {})
    assert FINALIZER not in (after["metadata"].get("finalizers") or [])

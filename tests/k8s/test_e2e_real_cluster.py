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
"""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from hetsched.k8s.api import KubeClusterAPI, load_api
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

"""The hetsched scheduler allocates the ResourceClaims of the pods it schedules, against the
API server double (resource.k8s.io/v1 objects checked against the official 1.34 schemas),
with the DeviceClasses of deploy/ and ResourceSlices as hetsched's DRA driver publishes
them."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from hetsched.framework.profile import parse_profile
from hetsched.k8s.api import KubeClusterAPI, for_host
from hetsched.k8s.claims.writes import FINALIZER
from hetsched.k8s.dra.devices import node_slices
from hetsched.k8s.scheduler import PodScheduler
from hetsched.model.device import Device
from k8s.apiserver import ApiServer, node_json, pod_json
from k8s.stepping import wait

Obj = dict[str, Any]
ROOT = Path(__file__).resolve().parents[2]
DRIVER = "hetsched.io"


@pytest.fixture
def api(server: ApiServer) -> Iterator[KubeClusterAPI]:
    api = for_host(server.url)
    for body in yaml.safe_load_all((ROOT / "deploy/kubernetes/dra/deviceclasses.yaml").read_text()):
        api.resource.create_device_class(body, _preload_content=False).data  # noqa: B018
    yield api
    api.close()


def gpu(node: str, index: int, model: str = "A100", memory: int = 80, **attrs: Any) -> Device:
    return Device(
        f"{node}/gpu{index}", "gpu", "nvidia", model, {"memory_gib": memory, "numa": 0, **attrs}
    )


def publish(api: KubeClusterAPI, node: str, devices: list[Device], cpu: str = "16") -> None:
    """A node and its ResourceSlice, as hetsched's DRA driver publishes it."""
    api.core.create_node(node_json(node, cpu=cpu))
    for body in node_slices(node, DRIVER, devices, 1, shareable=("gpu",)):
        api.create_resource_slice(body)


def claim_body(name: str, requests: list[Obj], **spec: Any) -> Obj:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"devices": {"requests": requests, **spec}},
    }


def exactly(name: str, device_class: str = "gpu.hetsched.io", **more: Any) -> Obj:
    return {"name": name, "exactly": {"deviceClassName": device_class, **more}}


def cel(expression: str) -> list[Obj]:
    return [{"cel": {"expression": expression}}]


def create_claim(api: KubeClusterAPI, body: Obj) -> None:
    api.resource.create_namespaced_resource_claim("default", body, _preload_content=False)


def dra_pod(name: str, claims: dict[str, str], template: bool = False, **kwargs: Any) -> Obj:
    body = pod_json(name, **kwargs)
    key = "resourceClaimTemplateName" if template else "resourceClaimName"
    body["spec"]["resourceClaims"] = [{"name": n, key: c} for n, c in claims.items()]
    body["spec"]["containers"][0]["resources"]["claims"] = [{"name": n} for n in claims]
    return body


def make(api: KubeClusterAPI, **kwargs: Any) -> PodScheduler:
    sched = PodScheduler(api, watch_timeout_s=2, **kwargs)
    sched.sync()
    sched.start_watches()
    return sched


def claim(server: ApiServer, name: str) -> Obj:
    obj = server.store.get("resourceclaims", "default", name)
    assert obj is not None
    return obj


def node_of(server: ApiServer, name: str) -> str:
    obj = server.store.get("pods", "default", name) or {}
    return str(obj.get("spec", {}).get("nodeName") or "")


def results(server: ApiServer, name: str) -> list[Obj]:
    allocation = claim(server, name).get("status", {}).get("allocation") or {}
    found: list[Obj] = allocation.get("devices", {}).get("results", [])
    return found


def reserved(server: ApiServer, name: str) -> list[str]:
    return [r["name"] for r in claim(server, name).get("status", {}).get("reservedFor") or []]


def events(server: ApiServer, name: str, reason: str) -> list[str]:
    return [
        e["message"]
        for e in server.store.items("events", None, "")
        if e["involvedObject"]["name"] == name and e["reason"] == reason
    ]


def test_a_claim_is_allocated_by_its_cel_selector_then_the_pod_bound(
    server: ApiServer, api: KubeClusterAPI
) -> None:
    publish(api, "small", [gpu("small", 0, "T4", 16), gpu("small", 1, "T4", 16)])
    publish(api, "big", [gpu("big", 0, "A100", 80), gpu("big", 1, "H100", 80)])
    selector = 'device.attributes["hetsched.io"].memory_gib >= 40'
    create_claim(api, claim_body("c", [exactly("gpu", selectors=cel(selector))]))
    sched = make(api)
    try:
        api.core.create_namespaced_pod("default", dra_pod("p", {"gpu": "c"}))
        wait(sched, lambda: node_of(server, "p") == "big")
    finally:
        sched.stop()
    (result,) = results(server, "c")
    assert result["driver"] == DRIVER and result["pool"] == "big" and result["request"] == "gpu"
    assert result["device"] in ("gpu0", "gpu1")
    allocation = claim(server, "c")["status"]["allocation"]
    term = allocation["nodeSelector"]["nodeSelectorTerms"][0]["matchFields"][0]
    assert term == {"key": "metadata.name", "operator": "In", "values": ["big"]}
    assert reserved(server, "c") == ["p"]
    pod_uid = server.store.get("pods", "default", "p")["metadata"]["uid"]  # type: ignore[index]
    assert claim(server, "c")["status"]["reservedFor"][0] == {
        "resource": "pods",
        "name": "p",
        "uid": pod_uid,
    }
    assert FINALIZER in claim(server, "c")["metadata"]["finalizers"]
    # the claim was written before the Binding, and no device annotation was (DRA only)
    pod = server.store.get("pods", "default", "p")
    assert "hetsched.io/assigned-devices" not in pod["metadata"]["annotations"]  # type: ignore[index]


def test_a_template_claim_is_allocated_once_the_controller_made_it(
    server: ApiServer, api: KubeClusterAPI
) -> None:
    publish(api, "n", [gpu("n", 0)])
    template = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": "t", "namespace": "default"},
        "spec": {"spec": {"devices": {"requests": [exactly("gpu")]}}},
    }
    api.resource.create_namespaced_resource_claim_template(
        "default", template, _preload_content=False
    )
    sched = make(api)
    try:
        api.core.create_namespaced_pod("default", dra_pod("p", {"gpu": "t"}, template=True))
        wait(sched, lambda: bool(events(server, "p", "FailedScheduling")))
        assert (
            "waiting for the ResourceClaim of 'gpu' to be created"
            in events(server, "p", "FailedScheduling")[0]
        )
        (made,) = server.store.create_pod_claims("default", "p")
        wait(sched, lambda: node_of(server, "p") == "n")
    finally:
        sched.stop()
    name = made["metadata"]["name"]
    assert [r["device"] for r in results(server, name)] == ["gpu0"]
    assert reserved(server, name) == ["p"]


def test_first_available_takes_the_second_alternative_when_the_first_fits_nowhere(
    server: ApiServer, api: KubeClusterAPI
) -> None:
    publish(api, "n", [gpu("n", i) for i in range(3)])
    body = claim_body(
        "c",
        [
            {
                "name": "gpus",
                "firstAvailable": [
                    {
                        "name": "h100",
                        "deviceClassName": "gpu.hetsched.io",
                        "selectors": cel('device.attributes["hetsched.io"].model == "H100"'),
                    },
                    {"name": "two-a100", "deviceClassName": "gpu.hetsched.io", "count": 2},
                ],
            }
        ],
    )
    create_claim(api, body)
    sched = make(api)
    try:
        api.core.create_namespaced_pod("default", dra_pod("p", {"gpus": "c"}))
        wait(sched, lambda: node_of(server, "p") == "n")
    finally:
        sched.stop()
    found = results(server, "c")
    assert [r["request"] for r in found] == ["gpus/two-a100"] * 2
    assert len({r["device"] for r in found}) == 2


def test_a_shared_claim_is_allocated_once_and_reserved_for_every_pod(
    server: ApiServer, api: KubeClusterAPI
) -> None:
    publish(api, "a", [gpu("a", 0)])
    publish(api, "b", [gpu("b", 0)])
    create_claim(api, claim_body("shared", [exactly("gpu")]))
    sched = make(api)
    try:
        for name in ("p1", "p2"):
            api.core.create_namespaced_pod("default", dra_pod(name, {"gpu": "shared"}))
        wait(sched, lambda: bool(node_of(server, "p1") and node_of(server, "p2")))
        wait(sched, lambda: sorted(reserved(server, "shared")) == ["p1", "p2"])
        # one device held in the core, once, on the claim's node
        (result,) = results(server, "shared")
        assert node_of(server, "p1") == node_of(server, "p2") == result["pool"]
        free = {
            d: sched.core.state.free_share(f"dra:{DRIVER}/{n}/gpu0")
            for d, n in (("a", "a"), ("b", "b"))
        }
        assert sorted(free.values()) == [0, 1000]
        # a third pod asking for its own GPU gets the other node's
        create_claim(api, claim_body("own", [exactly("gpu")]))
        api.core.create_namespaced_pod("default", dra_pod("p3", {"gpu": "own"}))
        wait(sched, lambda: bool(node_of(server, "p3")))
        assert node_of(server, "p3") != result["pool"]
    finally:
        sched.stop()


def test_a_deleted_pod_gives_its_claim_back(server: ApiServer, api: KubeClusterAPI) -> None:
    publish(api, "n", [gpu("n", 0)])
    create_claim(api, claim_body("c", [exactly("gpu")]))
    create_claim(api, claim_body("d", [exactly("gpu")]))
    sched = make(api)
    try:
        api.core.create_namespaced_pod("default", dra_pod("p", {"gpu": "c"}))
        wait(sched, lambda: node_of(server, "p") == "n")
        api.core.create_namespaced_pod("default", dra_pod("q", {"gpu": "d"}))
        wait(sched, lambda: bool(events(server, "q", "FailedScheduling")))
        api.core.delete_namespaced_pod("p", "default")
        wait(sched, lambda: "allocation" not in claim(server, "c").get("status", {}))
        assert "reservedFor" not in claim(server, "c")["status"]
        assert FINALIZER not in (claim(server, "c")["metadata"].get("finalizers") or [])
        # the device is free again: the waiting pod's claim gets it
        wait(sched, lambda: node_of(server, "q") == "n")
    finally:
        sched.stop()
    assert [r["device"] for r in results(server, "d")] == ["gpu0"]


def test_claims_of_the_shared_gpu_class_share_one_device_by_their_shares(
    server: ApiServer, api: KubeClusterAPI
) -> None:
    publish(api, "n", [gpu("n", 0), gpu("n", 1)])
    config = [
        {
            "requests": ["gpu"],
            "opaque": {
                "driver": DRIVER,
                "parameters": {"apiVersion": "hetsched.io/v1", "kind": "GpuShare", "share": 300},
            },
        }
    ]
    sched = make(api)
    try:
        for i in range(3):
            body = claim_body(f"c{i}", [exactly("gpu", "shared-gpu.hetsched.io")], config=config)
            create_claim(api, body)
            api.core.create_namespaced_pod("default", dra_pod(f"p{i}", {"gpu": f"c{i}"}))
        wait(sched, lambda: all(node_of(server, f"p{i}") == "n" for i in range(3)))
    finally:
        sched.stop()
    devices = {results(server, f"c{i}")[0]["device"] for i in range(3)}
    assert len(devices) == 1  # 3 x 300 on one GPU; the other stays whole
    configs = claim(server, "c0")["status"]["allocation"]["devices"]["config"]
    assert [c["source"] for c in configs] == ["FromClass", "FromClaim"]
    assert configs[1]["opaque"]["parameters"]["share"] == 300
    assert sched.core.state.free_share(f"dra:{DRIVER}/n/{devices.pop()}") == 100


def test_constraints_are_refused_with_the_reason(server: ApiServer, api: KubeClusterAPI) -> None:
    publish(api, "n", [gpu("n", 0), gpu("n", 1)])
    body = claim_body(
        "c",
        [exactly("gpu", count=2)],
        constraints=[{"requests": ["gpu"], "matchAttribute": "hetsched.io/numa"}],
    )
    create_claim(api, body)
    sched = make(api)
    try:
        api.core.create_namespaced_pod("default", dra_pod("p", {"gpu": "c"}))
        wait(sched, lambda: bool(events(server, "p", "FailedScheduling")))
    finally:
        sched.stop()
    (message,) = events(server, "p", "FailedScheduling")
    assert "spec.devices.constraints" in message and "kube-scheduler" in message
    assert "allocation" not in (claim(server, "c").get("status") or {})


def test_preemption_takes_a_claim_device_from_a_lower_priority_pod(
    server: ApiServer, api: KubeClusterAPI
) -> None:
    publish(api, "n", [gpu("n", 0)])
    create_claim(api, claim_body("low", [exactly("gpu")]))
    create_claim(api, claim_body("high", [exactly("gpu")]))
    profile = parse_profile({"queue_sort": "priority", "post_filter": ["preemption"]})
    sched = make(api, profile=profile)
    try:
        api.core.create_namespaced_pod("default", dra_pod("low", {"gpu": "low"}, priority=0))
        wait(sched, lambda: node_of(server, "low") == "n")
        api.core.create_namespaced_pod("default", dra_pod("high", {"gpu": "high"}, priority=9))
        wait(sched, lambda: node_of(server, "high") == "n")
    finally:
        sched.stop()
    assert server.store.get("pods", "default", "low") is None
    assert "allocation" not in (claim(server, "low").get("status") or {})
    assert [r["device"] for r in results(server, "high")] == ["gpu0"]


def test_after_a_restart_allocated_claims_hold_their_devices(
    server: ApiServer, api: KubeClusterAPI
) -> None:
    publish(api, "n", [gpu("n", 0)])
    create_claim(api, claim_body("c", [exactly("gpu")]))
    first = make(api)
    try:
        api.core.create_namespaced_pod("default", dra_pod("p", {"gpu": "c"}))
        wait(first, lambda: node_of(server, "p") == "n")
    finally:
        first.stop()
    create_claim(api, claim_body("d", [exactly("gpu")]))
    second = make(api)
    try:
        device = f"dra:{DRIVER}/n/gpu0"
        wait(second, lambda: second.core.state.free_share(device) == 0)
        api.core.create_namespaced_pod("default", dra_pod("q", {"gpu": "d"}))
        wait(second, lambda: bool(events(server, "q", "FailedScheduling")))
        assert node_of(server, "q") == ""
        # p ends: its claim is given back, the claim job ends, q gets the GPU
        server.store.set_phase("default", "p", "Succeeded")
        wait(second, lambda: node_of(server, "q") == "n")
    finally:
        second.stop()
    assert "allocation" not in (claim(server, "c").get("status") or {})


def test_a_gang_of_claim_pods_binds_whole(server: ApiServer, api: KubeClusterAPI) -> None:
    publish(api, "a", [gpu("a", 0), gpu("a", 1)])
    publish(api, "b", [gpu("b", 0), gpu("b", 1)])
    group = {
        "labels": {"hetsched.io/pod-group": "g"},
        "annotations": {"hetsched.io/min-available": "3"},
    }
    sched = make(api)
    try:
        for i in range(3):
            create_claim(api, claim_body(f"c{i}", [exactly("gpu")]))
            api.core.create_namespaced_pod("default", dra_pod(f"w{i}", {"gpu": f"c{i}"}, **group))
        wait(sched, lambda: all(node_of(server, f"w{i}") for i in range(3)))
    finally:
        sched.stop()
    devices = {
        (results(server, f"c{i}")[0]["pool"], results(server, f"c{i}")[0]["device"])
        for i in range(3)
    }
    assert len(devices) == 3
    for i in range(3):
        assert results(server, f"c{i}")[0]["pool"] == node_of(server, f"w{i}")
    assert json.dumps(reserved(server, "c0")) == '["w0"]'


def test_after_a_restart_claims_of_pods_deleted_meanwhile_are_given_back(
    server: ApiServer, api: KubeClusterAPI
) -> None:
    """No watch saw these pods go: the restart's list does. A claim of a deleted pod, and
    one this scheduler allocated whose binding the restart cut short (the finalizer and
    the allocation written, no pod reserves it), are deallocated, finalizer removed; a
    claim of a pod still there, and one kube-scheduler allocated, are left as they are."""
    publish(api, "n", [gpu("n", 0), gpu("n", 1), gpu("n", 2)])
    create_claim(api, claim_body("gone", [exactly("gpu")]))
    create_claim(api, claim_body("kept", [exactly("gpu")]))
    first = make(api)
    try:
        api.core.create_namespaced_pod("default", dra_pod("p", {"gpu": "gone"}))
        api.core.create_namespaced_pod("default", dra_pod("q", {"gpu": "kept"}))
        wait(first, lambda: node_of(server, "p") == node_of(server, "q") == "n")
    finally:
        first.stop()
    api.core.delete_namespaced_pod("p", "default")
    # a claim allocated by this scheduler, its binding cut short before reservedFor
    cut = claim_body("cut", [exactly("gpu")])
    cut["metadata"]["finalizers"] = [FINALIZER]
    create_claim(api, cut)
    body = claim(server, "cut")
    body["status"] = {"allocation": claim(server, "kept")["status"]["allocation"]}
    body["status"]["allocation"]["devices"]["results"][0]["device"] = "gpu2"
    assert api.replace_resource_claim_status("default", "cut", body) is not None
    # one kube-scheduler allocated for a pod this scheduler does not know: not ours
    other = claim_body("other", [exactly("gpu")])
    create_claim(api, other)
    body = claim(server, "other")
    body["status"] = {
        "allocation": claim(server, "kept")["status"]["allocation"],
        "reservedFor": [{"resource": "pods", "name": "elsewhere", "uid": "not-a-pod-here"}],
    }
    assert api.replace_resource_claim_status("default", "other", body) is not None
    second = make(api)
    try:
        for name in ("gone", "cut"):
            wait(second, lambda n=name: "allocation" not in claim(server, n).get("status", {}))
            assert "reservedFor" not in claim(server, name)["status"]
            assert FINALIZER not in (claim(server, name)["metadata"].get("finalizers") or [])
        assert reserved(server, "kept") == ["q"]
        assert FINALIZER in claim(server, "kept")["metadata"]["finalizers"]
        assert reserved(server, "other") == ["elsewhere"]
    finally:
        second.stop()

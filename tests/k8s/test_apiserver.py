"""The API server double itself, and hetsched's client against it: what the tests of the
scheduler, the extender and the DRA driver rely on (the wire behaviour, the binding
semantics, the watch index and the resource.k8s.io/v1 objects)."""

from __future__ import annotations

import copy
import json
import socket
import threading
from typing import Any

import httpx
import pytest
from kubernetes.client.rest import ApiException

from hetsched.k8s.api import KubeClusterAPI
from k8s.apiserver import ApiServer, gpus, node_json, pod_json

Obj = dict[str, Any]
RESOURCE = "/apis/resource.k8s.io/v1"


def _pods(api: KubeClusterAPI, count: int) -> None:
    api.core.create_node(node_json("n1", devices=gpus("n1", 1)))
    for i in range(count):
        api.core.create_namespaced_pod("default", pod_json(f"p{i}"))


# -- the wire ---------------------------------------------------------------------------------


def test_bind_reads_its_answer_so_the_connection_is_reused(
    server: ApiServer, api: KubeClusterAPI
) -> None:
    _pods(api, 20)
    before = server.connections
    for i in range(20):
        assert api.bind("default", f"p{i}", "", "n1")
    # one connection for all the bindings (an unread answer keeps its connection busy and
    # every binding opens a new one)
    assert server.connections - before <= 1
    assert [b[3] for b in server.store.bindings] == [201] * 20


def test_every_answer_is_one_write_on_a_nodelay_socket(
    server: ApiServer, api: KubeClusterAPI
) -> None:
    _pods(api, 3)
    api.bind("default", "p0", "", "n1")
    api.list_pods()
    assert api.get_pod("default", "missing") is None
    assert set(server.writes) == {1}
    assert sum(server.writes.values()) >= 6
    with socket.create_connection(("127.0.0.1", server.server_address[1])) as conn:
        conn.sendall(b"GET /api/v1/nodes HTTP/1.1\r\nHost: x\r\n\r\n")
        first = conn.recv(65536)
    # the headers and the body arrive together
    assert first.startswith(b"HTTP/1.1 200")
    _, _, body = first.partition(b"\r\n\r\n")
    assert json.loads(body)["kind"] == "NodeList"


def test_watches_read_only_what_is_new(server: ApiServer, api: KubeClusterAPI) -> None:
    api.core.create_node(node_json("n1"))
    _, rv = api.list_pods()
    seen: list[str] = []

    def watch() -> None:
        for event in api.watch("pods", rv, 2):
            seen.append(event.object["metadata"]["name"])
            if len(seen) == 30:
                return

    threads = [threading.Thread(target=watch) for _ in range(3)]
    for thread in threads:
        thread.start()
    for i in range(10):  # nodes change too: the pod watches never read those
        api.core.patch_node("n1", {"metadata": {"labels": {"round": str(i)}}})
        api.core.create_namespaced_pod("default", pod_json(f"p{i}"))
    for thread in threads:
        thread.join(10)
    assert sorted(seen) == sorted([f"p{i}" for i in range(10)] * 3)
    # each watch read each of the 10 pod changes once: no rescan of the history per change
    assert server.store.scanned <= 3 * 10


def test_a_watch_from_before_a_compaction_gets_410(server: ApiServer, api: KubeClusterAPI) -> None:
    api.core.create_node(node_json("n1"))
    api.core.create_node(node_json("n2"))
    server.store.compact()
    with httpx.stream("GET", f"{server.url}/api/v1/nodes?watch=true&resourceVersion=1") as r:
        line = json.loads(next(r.iter_lines()))
    assert line["type"] == "ERROR"
    assert line["object"]["code"] == 410


# -- binding ----------------------------------------------------------------------------------


def test_binding_annotations_land_with_the_binding_or_not_at_all(
    server: ApiServer, api: KubeClusterAPI
) -> None:
    _pods(api, 1)
    uid = server.store.get("pods", "default", "p0")["metadata"]["uid"]  # type: ignore[index]
    assert not api.bind("default", "p0", "not-the-uid", "n1", {"hetsched.io/x": "1"})
    untouched = server.store.get("pods", "default", "p0")
    assert untouched is not None
    assert untouched["metadata"]["annotations"] == {}
    assert not untouched["spec"].get("nodeName")
    assert api.bind("default", "p0", uid, "n1", {"hetsched.io/x": "1"})
    bound = server.store.get("pods", "default", "p0")
    assert bound is not None
    assert bound["spec"]["nodeName"] == "n1"
    assert bound["metadata"]["annotations"] == {"hetsched.io/x": "1"}
    assert {"type": "PodScheduled", "status": "True"} in bound["status"]["conditions"]
    # a second binding: 409, and its annotations are not written
    assert not api.bind("default", "p0", uid, "n2", {"hetsched.io/x": "2"})
    again = server.store.get("pods", "default", "p0")
    assert again == bound
    assert [b[3] for b in server.store.bindings] == [409, 201, 409]


# -- resource.k8s.io/v1 -------------------------------------------------------------------------


def _slice(name: str = "n1-hetsched.io-0", generation: int = 1, **spec: Any) -> Obj:
    body: Obj = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": name},
        "spec": {
            "driver": "hetsched.io",
            "nodeName": "n1",
            "pool": {"name": "n1", "generation": generation, "resourceSliceCount": 1},
            "devices": [
                {
                    "name": "gpu0",
                    "attributes": {
                        "model": {"string": "A100"},
                        "numa": {"int": 0},
                        "healthy": {"bool": True},
                    },
                    "capacity": {"share": {"value": "1k"}},
                }
            ],
        },
    }
    body["spec"].update(spec)
    return body


def _claim(name: str = "c1") -> Obj:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "devices": {
                "requests": [
                    {"name": "gpu", "exactly": {"deviceClassName": "gpu.hetsched.io"}},
                    {
                        "name": "any",
                        "firstAvailable": [
                            {"name": "big", "deviceClassName": "gpu.hetsched.io", "count": 2},
                            {"name": "small", "deviceClassName": "gpu.hetsched.io"},
                        ],
                    },
                ]
            }
        },
    }


def _allocation(request: str = "gpu", device: str = "gpu0") -> Obj:
    return {
        "devices": {
            "results": [
                {"request": request, "driver": "hetsched.io", "pool": "n1", "device": device}
            ]
        },
        "nodeSelector": {
            "nodeSelectorTerms": [
                {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n1"]}]}
            ]
        },
    }


def _post(server: ApiServer, path: str, body: Obj) -> httpx.Response:
    return httpx.post(server.url + path, json=body, timeout=5)


def test_slices_are_served_listed_by_field_and_checked(server: ApiServer) -> None:
    assert _post(server, f"{RESOURCE}/resourceslices", _slice()).status_code == 201
    other = _slice("n2-hetsched.io-0", nodeName="n2")
    other["spec"]["pool"]["name"] = "n2"
    assert _post(server, f"{RESOURCE}/resourceslices", other).status_code == 201
    listed = httpx.get(
        f"{server.url}{RESOURCE}/resourceslices?fieldSelector=spec.nodeName=n2"
    ).json()
    assert listed["kind"] == "ResourceSliceList"
    assert listed["apiVersion"] == "resource.k8s.io/v1"
    assert [s["metadata"]["name"] for s in listed["items"]] == ["n2-hetsched.io-0"]
    assert listed["items"][0]["metadata"]["generation"] == 1


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda s: s["spec"].update(unknownField=1), "unknownField"),  # the schema, strict
        (lambda s: s["spec"]["devices"][0].update(name="GPU_0"), "DNS label"),
        (lambda s: s["spec"].update(allNodes=True), "exactly one of"),
        (lambda s: s["spec"]["pool"].update(resourceSliceCount=0), "greater than zero"),
        (lambda s: s["spec"]["devices"][0]["attributes"].update(x={}), "exactly one value"),
        (
            lambda s: s["spec"]["devices"][0]["attributes"].update({"memory-gib": {"int": 80}}),
            "C identifier",
        ),
        (
            lambda s: s["spec"]["devices"][0]["attributes"].update(m={"string": "x" * 65}),
            "64 characters",
        ),
        (
            lambda s: s["spec"].update(devices=[{"name": f"d{i}"} for i in range(129)]),
            "128",
        ),
    ],
)
def test_invalid_slices_are_refused_with_422(server: ApiServer, change: Any, message: str) -> None:
    body = _slice()
    change(body)
    answer = _post(server, f"{RESOURCE}/resourceslices", body)
    assert answer.status_code == 422
    assert answer.json()["reason"] == "Invalid"
    assert message in answer.json()["message"]
    assert server.store.items("resourceslices", None) == []


def test_a_slice_keeps_its_driver_pool_and_node(server: ApiServer) -> None:
    created = _post(server, f"{RESOURCE}/resourceslices", _slice()).json()
    moved = copy.deepcopy(created)
    moved["spec"]["nodeName"] = "n2"
    answer = httpx.put(
        f"{server.url}{RESOURCE}/resourceslices/{created['metadata']['name']}", json=moved
    )
    assert answer.status_code == 422
    assert "immutable" in answer.json()["message"]
    newer = copy.deepcopy(created)
    newer["spec"]["pool"]["generation"] = 2
    answer = httpx.put(
        f"{server.url}{RESOURCE}/resourceslices/{created['metadata']['name']}", json=newer
    )
    assert answer.status_code == 200
    assert answer.json()["metadata"]["generation"] == 2


def test_claims_get_defaults_and_an_immutable_spec(server: ApiServer) -> None:
    created = _post(server, f"{RESOURCE}/namespaces/default/resourceclaims", _claim()).json()
    gpu, any_ = created["spec"]["devices"]["requests"]
    assert gpu["exactly"]["allocationMode"] == "ExactCount"
    assert gpu["exactly"]["count"] == 1
    assert [s["count"] for s in any_["firstAvailable"]] == [2, 1]
    assert "status" not in created
    changed = copy.deepcopy(created)
    changed["spec"]["devices"]["requests"][0]["exactly"]["count"] = 3
    answer = httpx.put(f"{server.url}{RESOURCE}/namespaces/default/resourceclaims/c1", json=changed)
    assert answer.status_code == 422
    assert "spec: field is immutable" in answer.json()["message"]


def test_claim_status_goes_through_the_status_subresource(server: ApiServer) -> None:
    path = f"{RESOURCE}/namespaces/default/resourceclaims/c1"
    created = _post(server, f"{RESOURCE}/namespaces/default/resourceclaims", _claim()).json()
    # the main resource ignores status
    main = copy.deepcopy(created)
    main["status"] = {"allocation": _allocation()}
    main["metadata"]["finalizers"] = ["hetsched.io/allocation"]
    updated = httpx.put(server.url + path, json=main).json()
    assert "status" not in updated
    assert updated["metadata"]["finalizers"] == ["hetsched.io/allocation"]
    # the status subresource sets the status and ignores metadata changes
    status_update = copy.deepcopy(updated)
    status_update["status"] = {
        "allocation": _allocation(),
        "reservedFor": [{"resource": "pods", "name": "p", "uid": "u1"}],
    }
    status_update["metadata"]["finalizers"] = []
    answer = httpx.put(server.url + path + "/status", json=status_update)
    assert answer.status_code == 200, answer.text
    stored = answer.json()
    assert stored["status"]["allocation"] == _allocation()
    assert stored["metadata"]["finalizers"] == ["hetsched.io/allocation"]
    # an allocation cannot be changed once set
    other = copy.deepcopy(stored)
    other["status"]["allocation"] = _allocation(device="gpu1")
    answer = httpx.put(server.url + path + "/status", json=other)
    assert answer.status_code == 422
    assert "status.allocation: field is immutable" in answer.json()["message"]
    # a merge patch of the status subresource clears the reservation
    patched = httpx.patch(
        server.url + path + "/status",
        json={"status": {"reservedFor": None}},
        headers={"Content-Type": "application/merge-patch+json"},
    )
    assert patched.status_code == 200
    assert "reservedFor" not in patched.json()["status"]


@pytest.mark.parametrize(
    ("status", "message"),
    [
        ({"reservedFor": [{"resource": "pods", "name": "p", "uid": "u"}]}, "may not be specified"),
        ({"allocation": _allocation(request="nope")}, "name of a request"),
        (
            {"allocation": _allocation("any/small")}
            | {
                "reservedFor": [
                    {"resource": "pods", "name": "p", "uid": "u"},
                    {"resource": "pods", "name": "q", "uid": "u"},
                ]
            },
            "duplicate uid",
        ),
    ],
)
def test_invalid_claim_status_is_refused(server: ApiServer, status: Obj, message: str) -> None:
    created = _post(server, f"{RESOURCE}/namespaces/default/resourceclaims", _claim()).json()
    created["status"] = status
    answer = httpx.put(
        f"{server.url}{RESOURCE}/namespaces/default/resourceclaims/c1/status", json=created
    )
    assert answer.status_code == 422
    assert message in answer.json()["message"]


def test_finalizers_hold_a_deleted_claim_until_they_are_gone(
    server: ApiServer, api: KubeClusterAPI
) -> None:
    claim = _claim()
    claim["metadata"]["finalizers"] = ["hetsched.io/allocation"]
    _post(server, f"{RESOURCE}/namespaces/default/resourceclaims", claim)
    path = f"{server.url}{RESOURCE}/namespaces/default/resourceclaims/c1"
    deleted = httpx.delete(path).json()
    assert deleted["metadata"]["deletionTimestamp"]
    held = httpx.get(path).json()
    # no new consumer of a claim that is being deleted
    held["status"] = {
        "allocation": _allocation(),
        "reservedFor": [{"resource": "pods", "name": "p", "uid": "u1"}],
    }
    answer = httpx.put(path + "/status", json=held)
    assert answer.status_code == 422
    assert "new entries may not be added" in answer.json()["message"]
    # removing the last finalizer (a JSON patch) lets it go
    gone = httpx.patch(
        path,
        json=[{"op": "remove", "path": "/metadata/finalizers"}],
        headers={"Content-Type": "application/json-patch+json"},
    )
    assert gone.status_code == 200
    assert httpx.get(path).status_code == 404


def test_the_official_client_reads_and_writes_claims(
    server: ApiServer, api: KubeClusterAPI
) -> None:
    from kubernetes import client

    resource = client.ResourceV1Api(api.api_client)
    resource.create_namespaced_resource_claim("default", _claim())
    read = resource.read_namespaced_resource_claim("c1", "default")
    assert read.spec.devices.requests[1].first_available[0].count == 2
    body = api.api_client.sanitize_for_serialization(read)
    body["status"] = {"allocation": _allocation()}
    resource.replace_namespaced_resource_claim_status("c1", "default", body)
    allocated = resource.read_namespaced_resource_claim("c1", "default")
    assert allocated.status.allocation.devices.results[0].device == "gpu0"
    with pytest.raises(ApiException) as refused:
        bad = _claim("c2")
        bad["spec"]["devices"]["requests"][0]["name"] = "Not_A_Label"
        resource.create_namespaced_resource_claim("default", bad)
    assert refused.value.status == 422


def test_claims_from_a_template_as_the_controller_makes_them(server: ApiServer) -> None:
    template = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": "one-gpu", "namespace": "default"},
        "spec": {"metadata": {"labels": {"app": "x"}}, "spec": _claim()["spec"]},
    }
    assert _post(server, f"{RESOURCE}/namespaces/default/resourceclaimtemplates", template)
    pod = pod_json("p")
    pod["spec"]["resourceClaims"] = [{"name": "gpu", "resourceClaimTemplateName": "one-gpu"}]
    assert _post(server, "/api/v1/namespaces/default/pods", pod).status_code == 201
    (claim,) = server.store.create_pod_claims("default", "p")
    assert claim["metadata"]["name"].startswith("p-gpu-")
    assert claim["metadata"]["labels"] == {"app": "x"}
    assert claim["metadata"]["annotations"]["resource.kubernetes.io/pod-claim-name"] == "gpu"
    assert claim["metadata"]["ownerReferences"][0]["kind"] == "Pod"
    stored = server.store.get("pods", "default", "p")
    assert stored is not None
    assert stored["status"]["resourceClaimStatuses"] == [
        {"name": "gpu", "resourceClaimName": claim["metadata"]["name"]}
    ]

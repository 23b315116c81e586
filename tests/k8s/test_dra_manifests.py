"""The DRA manifests under deploy/ mean what they say: beyond the schemas (test_manifests.py),
the API's own rules hold, every CEL selector selects, among the devices the driver would
publish for a mixed inventory, what its name promises, and the references between objects
resolve."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import celpy
import pytest
import yaml

from hetsched.k8s.dra.devices import allocated_devices, node_slices
from hetsched.model.device import Device, Health
from k8s.apikinds import check

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy" / "kubernetes"
DRA_FILES = sorted(
    [*(DEPLOY / "dra").glob("*.yaml"), *(DEPLOY / "examples" / "dra").glob("*.yaml")]
)
DRIVER = "hetsched.io"

_PLURALS = {
    "ResourceSlice": "resourceslices",
    "DeviceClass": "deviceclasses",
    "ResourceClaim": "resourceclaims",
    "ResourceClaimTemplate": "resourceclaimtemplates",
}


def documents(path: Path) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


ALL = [d for p in DRA_FILES for d in documents(p)]
CLASSES = {d["metadata"]["name"]: d for d in ALL if d["kind"] == "DeviceClass"}

#: the devices a driver would publish for a mixed node
INVENTORY = [
    Device("n1/gpu0", "gpu", "nvidia", "A100", {"memory_gib": 80, "numa": 0, "nvlink_domain": 0}),
    Device("n1/gpu1", "gpu", "nvidia", "A100", {"memory_gib": 80, "numa": 0, "nvlink_domain": 0}),
    Device("n1/gpu2", "gpu", "nvidia", "H100", {"memory_gib": 80, "numa": 1, "nvlink_domain": 1}),
    Device("n1/gpu3", "gpu", "nvidia", "T4", {"memory_gib": 16, "numa": 1}),
    Device("n1/gpu4", "gpu", "nvidia", "A100", {"memory_gib": 80, "numa": 1}, Health.UNHEALTHY),
    Device("n1/fpga0", "fpga", "xilinx", "U250", {"numa": 0}),
    Device("n1/npu0", "npu", "huawei", "910B", {"numa": 1}),
]
(SLICE,) = node_slices("n1", DRIVER, INVENTORY, 1, shareable=["gpu"])


def _cel_device(device: dict[str, Any]) -> Any:
    """A published device as CEL's ``device`` variable sees it."""
    attributes = {k: next(iter(v.values())) for k, v in device["attributes"].items()}
    capacity = {k: v["value"] for k, v in device["capacity"].items()}
    return {"driver": DRIVER, "attributes": {DRIVER: attributes}, "capacity": {DRIVER: capacity}}


def selected(expressions: list[str]) -> list[str]:
    """The names of the published devices that every expression selects."""
    env = celpy.Environment()
    programs = [env.program(env.compile(e)) for e in expressions]
    out = []
    for device in SLICE["spec"]["devices"]:
        activation = celpy.json_to_cel({"device": _cel_device(device)})  # type: ignore[attr-defined]
        if all(bool(p.evaluate(activation)) for p in programs):
            out.append(device["name"])
    return out


def _class_expressions(name: str) -> list[str]:
    return [s["cel"]["expression"] for s in CLASSES[name]["spec"].get("selectors", [])]


def _claim_specs() -> list[tuple[str, dict[str, Any]]]:
    specs = []
    for doc in ALL:
        if doc["kind"] == "ResourceClaim":
            specs.append((doc["metadata"]["name"], doc["spec"]))
        elif doc["kind"] == "ResourceClaimTemplate":
            specs.append((doc["metadata"]["name"], doc["spec"]["spec"]))
    return specs


@pytest.mark.parametrize(
    "doc",
    [d for d in ALL if d["kind"] in _PLURALS],
    ids=lambda d: f"{d['kind']}/{d['metadata']['name']}",
)
def test_the_apis_own_rules_hold(doc: dict[str, Any]) -> None:
    body = {**doc, "metadata": {**doc["metadata"], "namespace": "default"}}
    assert check(_PLURALS[doc["kind"]], body, None, None) == []


@pytest.mark.parametrize(
    ("device_class", "expected"),
    [
        ("gpu.hetsched.io", ["gpu0", "gpu1", "gpu2", "gpu3"]),  # never the unhealthy gpu4
        ("shared-gpu.hetsched.io", ["gpu0", "gpu1", "gpu2", "gpu3"]),
        ("fpga.hetsched.io", ["fpga0"]),
        ("npu.hetsched.io", ["npu0"]),
    ],
)
def test_device_classes_select_their_type(device_class: str, expected: list[str]) -> None:
    assert selected(_class_expressions(device_class)) == expected


def _requests(spec: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """(request or request/sub-request name, its exact request) of a claim spec."""
    out = []
    for request in spec["devices"]["requests"]:
        if "exactly" in request:
            out.append((request["name"], request["exactly"]))
        for sub in request.get("firstAvailable", []):
            out.append((f"{request['name']}/{sub['name']}", sub))
    return out


EXPECTED = {
    ("big-gpu", "gpu"): ["gpu0", "gpu1", "gpu2"],
    ("h100-or-two-a100", "gpus/h100"): ["gpu2"],
    ("h100-or-two-a100", "gpus/two-a100"): ["gpu0", "gpu1"],
    ("shared-gpu", "gpu"): ["gpu0", "gpu1", "gpu2", "gpu3"],
    ("gpu-share-300", "gpu"): ["gpu0", "gpu1", "gpu2", "gpu3"],
    ("gpu-fpga-same-numa", "gpu"): ["gpu0", "gpu1", "gpu2", "gpu3"],
    ("gpu-fpga-same-numa", "fpga"): ["fpga0"],
}


def test_every_claim_request_selects_what_it_promises() -> None:
    found = {}
    for name, spec in _claim_specs():
        for request, exact in _requests(spec):
            assert exact["deviceClassName"] in CLASSES, exact["deviceClassName"]
            expressions = _class_expressions(exact["deviceClassName"]) + [
                s["cel"]["expression"] for s in exact.get("selectors", [])
            ]
            found[(name, request)] = selected(expressions)
    assert found == EXPECTED


def test_constraints_name_published_attributes_and_requests() -> None:
    published = {f"{DRIVER}/{a}" for d in SLICE["spec"]["devices"] for a in d["attributes"]}
    for _, spec in _claim_specs():
        names = {r["name"] for r in spec["devices"]["requests"]}
        for constraint in spec["devices"].get("constraints", []):
            assert constraint["matchAttribute"] in published
            assert set(constraint["requests"]) <= names


def test_pods_use_the_claims_they_declare() -> None:
    templates = {n for n, _ in _claim_specs()}
    for doc in ALL:
        spec = doc.get("spec", {})
        pod = spec.get("template", {}).get("spec") if doc["kind"] == "Deployment" else spec
        if doc["kind"] not in ("Pod", "Deployment"):
            continue
        declared = {c["name"]: c for c in pod["resourceClaims"]}
        for ref in declared.values():
            assert (
                ref.get("resourceClaimTemplateName") or ref.get("resourceClaimName")
            ) in templates
        for container in pod["containers"]:
            for claim in container["resources"]["claims"]:
                assert claim["name"] in declared


def _allocation(spec: dict[str, Any], device_class: str) -> dict[str, Any]:
    """An allocation of the spec's first request, with the configs as an allocator copies
    them: the class's first, then the claim's."""
    config = [
        {"source": "FromClass", "requests": ["gpu"], **c}
        for c in CLASSES[device_class]["spec"].get("config", [])
    ] + [{"source": "FromClaim", **c} for c in spec["devices"].get("config", [])]
    result = {"request": "gpu", "driver": DRIVER, "pool": "n1", "device": "gpu0"}
    return {"status": {"allocation": {"devices": {"results": [result], "config": config}}}}


def test_the_driver_reads_the_shares_of_the_shared_gpu_class_and_its_claims() -> None:
    specs = dict(_claim_specs())
    default = {"devices": {"requests": [{"name": "gpu"}]}}
    (plain,) = allocated_devices(_allocation(default, "shared-gpu.hetsched.io"), DRIVER)
    assert plain.share == 100
    (three,) = allocated_devices(
        _allocation(specs["gpu-share-300"], "shared-gpu.hetsched.io"), DRIVER
    )
    assert three.share == 300
    (whole,) = allocated_devices(_allocation(specs["big-gpu"], "gpu.hetsched.io"), DRIVER)
    assert whole.share == 1000


def test_rbac_lets_each_part_do_its_job_and_no_more() -> None:
    rbac = documents(DEPLOY / "rbac.yaml")

    def granted(role: str) -> set[tuple[str, str, str]]:
        doc = next(d for d in rbac if d["kind"] == "ClusterRole" and d["metadata"]["name"] == role)
        return {
            (g, r, v)
            for rule in doc["rules"]
            for g in rule["apiGroups"]
            for r in rule["resources"]
            for v in rule["verbs"]
        }

    scheduler = granted("hetsched-scheduler")
    for needed in [
        ("resource.k8s.io", "resourceclaims/status", "update"),
        ("resource.k8s.io", "resourceclaims/binding", "update"),
        ("resource.k8s.io", "resourceclaims", "update"),
        ("resource.k8s.io", "resourceslices", "watch"),
        ("resource.k8s.io", "deviceclasses", "list"),
    ]:
        assert needed in scheduler
    assert not any(r == "resourceslices" and v == "create" for _, r, v in scheduler)
    driver = granted("hetsched-dra-driver")
    for needed in [
        ("resource.k8s.io", "resourceslices", "create"),
        ("resource.k8s.io", "resourceslices", "delete"),
        ("resource.k8s.io", "resourceclaims", "get"),
        ("", "nodes", "get"),
    ]:
        assert needed in driver
    assert not any(
        "status" in r or (v in {"update", "patch"} and r == "resourceclaims") for _, r, v in driver
    )  # the driver never allocates
    binding = next(
        d
        for d in rbac
        if d["kind"] == "ClusterRoleBinding" and d["metadata"]["name"] == "hetsched-dra-driver"
    )
    daemonset = documents(DEPLOY / "dra" / "dra-driver-daemonset.yaml")[0]
    assert (
        daemonset["spec"]["template"]["spec"]["serviceAccountName"]
        == (binding["subjects"][0]["name"])
    )

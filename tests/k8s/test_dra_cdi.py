"""What a container runtime makes of the DRA driver's answers: the kubelet (built from the
OFFICIAL protos) prepares claims, picks the CDI ids of a container's request from the
answer, and a runtime stand-in that parses CDI as the specification says (cdiruntime.py)
injects them. Every spec the driver wrote is checked against the CDI schema."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from hetsched.k8s.deviceplugin.allocation import Assignment, MountSpec, Roots
from hetsched.k8s.dra.cdi import claim_spec
from hetsched.model.device import Device
from k8s.cdiruntime import CdiRuntime, problems
from k8s.drakubelet import Prepared
from k8s.test_dra_driver import DRIVER, NODE, Rig, result, running_rig

DEVICES = """devices:
  - {class: gpu, vendor: nvidia, model: A100, count: 3, attributes: {memory_gib: 80}}
  - {class: fpga, vendor: xilinx, model: U250, count: 1}
  - {class: npu, vendor: acme, model: N1, count: 1}
"""


@pytest.fixture
def rig(short_dir: Path) -> Iterator[Rig]:
    with running_rig(short_dir, DEVICES) as made:
        yield made
        # every spec the driver wrote (and did not remove) is one a runtime accepts
        runtime = CdiRuntime(made.settings.cdi_dir)
        runtime.specs()
        assert runtime.refused == {}


def for_request(devices: list[Prepared], request: str | None) -> list[str]:
    """The CDI ids the kubelet gives a container naming ``request`` of the claim (all of
    them when it names none): the devices whose request names include it, or name none."""
    return [
        i
        for d in devices
        if request is None or not d.requests or request in d.requests
        for i in d.cdi_ids
    ]


def _prepare(rig: Rig, uid: str, name: str) -> list[Prepared]:
    devices, error = rig.kubelet.prepare(DRIVER, [("default", uid, name)])[uid]
    assert error == ""
    return devices


def _listed(env: dict[str, str]) -> list[str]:
    return [d["id"] for d in json.loads(env["HETSCHED_DEVICES"])]


# -- 1. every device carries an edit ---------------------------------------------------------


@pytest.mark.parametrize(
    ("results", "expected"),
    [
        ([result("fpga0", request="fpga")], ["n1/fpga0"]),
        ([result("npu0", request="fpga")], ["n1/npu0"]),
        ([result("gpu2")], ["n1/gpu2"]),
        ([result("gpu0"), result("fpga0", request="fpga")], ["n1/gpu0", "n1/fpga0"]),
    ],
)
def test_a_device_without_device_nodes_still_reaches_the_container(
    rig: Rig, results: list[dict[str, str]], expected: list[str]
) -> None:
    uid = rig.claim("c", results)
    devices = _prepare(rig, uid, "c")
    runtime = CdiRuntime(rig.settings.cdi_dir)
    container = runtime.inject(for_request(devices, None))
    assert runtime.refused == {}
    assert _listed(container.env) == expected


def _device(id_: str, cls: str, vendor: str) -> Device:
    return Device(id_, cls, vendor, "m")


@pytest.mark.parametrize(
    ("devices", "mounts"),
    [
        ([("fpga0", _device("n1/fpga0", "fpga", "xilinx"))], ()),
        ([("npu0", _device("n1/npu0", "npu", "acme"))], (MountSpec("/opt/lib", "/lib/x"),)),
        (
            [
                ("gpu0", _device("n1/gpu0", "gpu", "nvidia")),
                ("gpu1", _device("n1/gpu1", "gpu", "nvidia")),
            ],
            (),
        ),
    ],
)
def test_every_spec_is_valid_cdi(
    tmp_path: Path, devices: list[tuple[str, Device]], mounts: tuple[MountSpec, ...]
) -> None:
    chosen = [(name, Assignment(d)) for name, d in devices]
    roots = Roots(dev=tmp_path / "dev", sysfs=tmp_path / "sys", proc=tmp_path / "proc")
    spec = claim_spec("0b7c-uid", chosen, roots, mounts)
    assert problems(spec) == []
    assert all(d["containerEdits"] for d in spec["devices"])


@pytest.mark.parametrize(
    ("spec", "where"),
    [
        ({"cdiVersion": "0.6.0", "kind": "a.io/d", "devices": [{"name": "x"}]}, "devices/0"),
        (
            {
                "cdiVersion": "0.6.0",
                "kind": "a.io/d",
                "devices": [{"name": "x", "containerEdits": {"deviceNodes": []}}],
            },
            "devices/0/containerEdits",
        ),
        (
            {
                "cdiVersion": "0.6.0",
                "kind": "a.io/d",
                "devices": [{"name": "gpus/two", "containerEdits": {"env": ["A=1"]}}],
            },
            "devices/0/name",
        ),
        ({"cdiVersion": "0.6.0", "kind": "nodomain", "devices": []}, "devices"),
        ({"kind": "a.io/d", "devices": [{"name": "x", "containerEdits": {}}]}, "<spec>"),
        (
            {
                "cdiVersion": "0.6.0",
                "kind": "a.io/d",
                "devices": [{"name": "x", "containerEdits": {"env": ["NOVALUE"]}}],
            },
            "devices/0/containerEdits/env/0",
        ),
    ],
)
def test_the_schema_refuses_what_a_runtime_refuses(spec: dict[str, Any], where: str) -> None:
    found = problems(spec)
    assert any(p.startswith(f"{where}:") for p in found), found


# -- 2. firstAvailable sub-requests --------------------------------------------------------


def _first_available(alternatives: list[tuple[str, int]]) -> dict[str, Any]:
    return {
        "requests": [
            {
                "name": "gpus",
                "firstAvailable": [
                    {
                        "name": name,
                        "deviceClassName": "gpu.hetsched.io",
                        "allocationMode": "ExactCount",
                        "count": count,
                    }
                    for name, count in alternatives
                ],
            },
            {"name": "fpga", "exactly": {"deviceClassName": "fpga.hetsched.io"}},
        ]
    }


@pytest.mark.parametrize(
    ("alternatives", "chosen", "devices"),
    [
        ([("two-a100", 2), ("one-a100", 1)], "two-a100", ["gpu0", "gpu1"]),
        ([("two-a100", 2), ("one-a100", 1)], "one-a100", ["gpu2"]),
        ([("three", 3), ("two", 2), ("one", 1)], "three", ["gpu0", "gpu1", "gpu2"]),
        ([("three", 3), ("two", 2), ("one", 1)], "two", ["gpu1", "gpu2"]),
        ([("three", 3), ("two", 2), ("one", 1)], "one", ["gpu0"]),
    ],
)
def test_sub_request_results_reach_the_container_of_their_request(
    rig: Rig, alternatives: list[tuple[str, int]], chosen: str, devices: list[str]
) -> None:
    results = [result(d, request=f"gpus/{chosen}") for d in devices]
    uid = rig.claim(
        "c",
        [*results, result("fpga0", request="fpga")],
        spec=_first_available(alternatives),
    )
    prepared = _prepare(rig, uid, "c")
    assert [d.requests for d in prepared] == [("gpus",)] * len(devices) + [("fpga",)]
    runtime = CdiRuntime(rig.settings.cdi_dir)
    gpus = for_request(prepared, "gpus")
    assert len(gpus) == len(devices)
    assert all("/" not in i.split("=", 1)[1] for i in gpus)  # CDI names hold no request
    container = runtime.inject(gpus)
    assert [d for d in devices if f"/dev/nvidia{d[-1]}" in container.device_nodes] == devices
    assert runtime.inject(for_request(prepared, "fpga")).env["HETSCHED_DEVICES"]
    # asked again (the kubelet's retry): the same answer, from the checkpoint
    assert _prepare(rig, uid, "c") == prepared
    assert prepared[0].pool == NODE

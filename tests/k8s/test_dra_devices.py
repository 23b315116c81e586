"""Devices as ResourceSlices and allocation results as devices and shares: literal cases,
and properties checked against the official resource.k8s.io/v1 schemas and rules (the
API server double's checks, apikinds.py)."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hetsched.k8s.dra.devices import (
    AllocatedDevice,
    allocated_devices,
    dra_device,
    dra_name,
    node_slices,
    slice_name,
)
from hetsched.model.device import Device, Health
from k8s.apikinds import check


def test_a_gpu_as_a_dra_device() -> None:
    gpu = Device(
        "node-7/gpu3",
        "gpu",
        "nvidia",
        "H100",
        {"memory_gib": 79.6, "numa": 1, "nvlink_domain": 0, "uuid": "GPU-1", "mig": False},
        Health.UNHEALTHY,
    )
    assert dra_device(gpu, shareable=True) == {
        "name": "gpu3",
        "attributes": {
            "type": {"string": "gpu"},
            "vendor": {"string": "nvidia"},
            "model": {"string": "H100"},
            "healthy": {"bool": False},
            "memory_gib": {"string": "79.6"},
            "numa": {"int": 1},
            "nvlink_domain": {"int": 0},
            "mig": {"bool": False},
            "uuid": {"string": "GPU-1"},
        },
        "capacity": {
            "share": {
                "value": "1000",
                "requestPolicy": {"default": "1000", "validRange": {"min": "1", "max": "1000"}},
            },
            "memory": {"value": str(int(79.6 * 1024**3))},
        },
        "allowMultipleAllocations": True,
    }


@pytest.mark.parametrize(
    ("device_id", "name"),
    [("n/gpu0", "gpu0"), ("n/FPGA_1", "fpga-1"), ("n.with.dots/npu2", "npu2"), ("n/__", "device")],
)
def test_device_names_are_dns_labels(device_id: str, name: str) -> None:
    assert dra_name(Device(device_id, "x")) == name


def test_too_many_attributes_and_too_long_strings_are_left_out() -> None:
    attributes: dict[str, Any] = {f"a{i:02}": i for i in range(40)}
    attributes["long"] = "x" * 65
    device = dra_device(Device("n/gpu0", "gpu", "v", "m", attributes))
    assert len(device["attributes"]) + len(device["capacity"]) == 32
    assert "long" not in device["attributes"]
    assert list(device["attributes"])[:4] == ["type", "vendor", "model", "healthy"]
    # a name that is not a C identifier is made one
    small = dra_device(Device("n/gpu0", "gpu", attributes={"bad-name": 1, "9lives": 2}))
    assert small["attributes"]["bad_name"] == {"int": 1}
    assert small["attributes"]["_9lives"] == {"int": 2}


def test_slices_of_many_devices_split_at_128_and_validate() -> None:
    devices = [Device(f"n1/gpu{i}", "gpu", "nvidia", "A100", {"numa": i % 2}) for i in range(300)]
    slices = node_slices("n1", "hetsched.io", devices, generation=4, shareable=["gpu"])
    assert [len(s["spec"]["devices"]) for s in slices] == [128, 128, 44]
    assert [s["metadata"]["name"] for s in slices] == [
        "n1-hetsched-io-0",
        "n1-hetsched-io-1",
        "n1-hetsched-io-2",
    ]
    assert {s["spec"]["pool"]["resourceSliceCount"] for s in slices} == {3}
    assert slices[0]["spec"]["devices"][:3] == [
        dra_device(devices[0], True),
        dra_device(devices[1], True),
        dra_device(devices[2], True),
    ]  # natural order: gpu2 before gpu10
    for body in slices:
        assert check("resourceslices", body, None, None) == []


def test_a_node_without_devices_publishes_an_empty_slice() -> None:
    (body,) = node_slices("n1", "hetsched.io", [], generation=1)
    assert body["spec"]["devices"] == []
    assert check("resourceslices", body, None, None) == []


def test_slice_names_stay_within_253_characters() -> None:
    name = slice_name("n" * 300, "hetsched.io", 12)
    assert len(name) == 253
    assert name.endswith("-hetsched-io-12")


_values = st.one_of(
    st.booleans(),
    st.integers(-(2**40), 2**40),
    st.floats(allow_nan=False, allow_infinity=False, width=32),
    st.text(max_size=80),
)


@settings(max_examples=30, deadline=None)
@given(
    groups=st.lists(
        st.tuples(
            st.sampled_from(["gpu", "fpga", "npu", "x_y"]),
            st.integers(1, 70),
            st.dictionaries(st.text(min_size=1, max_size=40), _values, max_size=40),
            st.booleans(),
        ),
        max_size=4,
    )
)
def test_any_inventory_publishes_valid_slices(
    groups: list[tuple[str, int, dict[str, Any], bool]],
) -> None:
    devices = []
    for kind, count, attributes, healthy in groups:
        for _ in range(count):
            health = Health.HEALTHY if healthy else Health.UNHEALTHY
            devices.append(Device(f"n1/{kind}{len(devices)}", kind, "v", "m", attributes, health))
    slices = node_slices("n1", "hetsched.io", devices, 7, shareable=["gpu"])
    names = [d["name"] for s in slices for d in s["spec"]["devices"]]
    assert len(names) == len(set(names)) == len(devices)
    for body in slices:
        assert body["spec"]["pool"] == {
            "name": "n1",
            "generation": 7,
            "resourceSliceCount": len(slices),
        }
        assert check("resourceslices", body, None, None) == []


def _claim(results: list[dict[str, Any]], config: list[dict[str, Any]] | None = None) -> Any:
    devices: dict[str, Any] = {"results": results}
    if config is not None:
        devices["config"] = config
    return {"status": {"allocation": {"devices": devices}}}


def _result(device: str, request: str = "gpu", driver: str = "hetsched.io", **more: Any) -> Any:
    return {"request": request, "driver": driver, "pool": "n1", "device": device, **more}


def _opaque(share: Any, requests: list[str] | None = None, source: str = "FromClaim") -> Any:
    entry: dict[str, Any] = {
        "source": source,
        "opaque": {"driver": "hetsched.io", "parameters": {"share": share}},
    }
    if requests is not None:
        entry["requests"] = requests
    return entry


@pytest.mark.parametrize(
    ("claim", "expected"),
    [
        (_claim([]), []),
        ({"status": {}}, []),
        (
            _claim([_result("gpu0"), _result("x", driver="other.io")]),
            [AllocatedDevice(("gpu",), "n1", "gpu0", 1000)],
        ),
        (
            _claim(
                [_result("gpu0"), _result("gpu1", request="big/small")],
                [_opaque(300, ["gpu"]), _opaque(500, ["big"]), _opaque(100, source="FromClass")],
            ),
            [
                AllocatedDevice(("gpu",), "n1", "gpu0", 300),
                AllocatedDevice(("big/small",), "n1", "gpu1", 500),
            ],
        ),
        (
            _claim([_result("gpu0")], [_opaque(250, source="FromClass")]),
            [AllocatedDevice(("gpu",), "n1", "gpu0", 250)],
        ),
        (
            _claim(
                [_result("gpu0", consumedCapacity={"share": "400"}, shareID="s-1")],
                [_opaque(300, ["gpu"])],
            ),
            [AllocatedDevice(("gpu",), "n1", "gpu0", 400, "s-1")],
        ),
        (
            _claim([_result("gpu0")], [_opaque("300"), _opaque(0), _opaque(2000)]),
            [AllocatedDevice(("gpu",), "n1", "gpu0", 1000)],
        ),
    ],
)
def test_allocated_devices_and_their_shares(claim: Any, expected: list[AllocatedDevice]) -> None:
    assert allocated_devices(claim, "hetsched.io") == expected

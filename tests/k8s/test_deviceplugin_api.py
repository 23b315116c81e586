"""The committed device plugin stubs: the kubelet's wire format (compared with the official
``api.proto``), and in step with our api.proto."""

from __future__ import annotations

from pathlib import Path

import pytest
from google.protobuf import descriptor_pb2

from hetsched.k8s.deviceplugin import api_pb2
from k8s.official import api, normalized

PROTO = Path(api_pb2.__file__).with_name("api.proto")
SRC = PROTO.parents[3]


def test_method_paths_are_the_kubelets() -> None:
    services = {
        s.full_name: [m.name for m in s.methods]
        for s in api_pb2.DESCRIPTOR.services_by_name.values()
    }
    assert services == {
        "v1beta1.Registration": ["Register"],
        "v1beta1.DevicePlugin": [
            "GetDevicePluginOptions",
            "ListAndWatch",
            "GetPreferredAllocation",
            "Allocate",
            "PreStartContainer",
        ],
    }
    list_and_watch = api_pb2.DESCRIPTOR.services_by_name["DevicePlugin"].methods_by_name[
        "ListAndWatch"
    ]
    assert list_and_watch.server_streaming  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("message", "fields"),
    [
        ("RegisterRequest", {"version": 1, "endpoint": 2, "resource_name": 3, "options": 4}),
        (
            "DevicePluginOptions",
            {"pre_start_required": 1, "get_preferred_allocation_available": 2},
        ),
        ("Device", {"ID": 1, "health": 2, "topology": 3}),
        ("NUMANode", {"ID": 1}),
        (
            "ContainerPreferredAllocationRequest",
            {"available_deviceIDs": 1, "must_include_deviceIDs": 2, "allocation_size": 3},
        ),
        ("ContainerPreferredAllocationResponse", {"deviceIDs": 1}),
        ("ContainerAllocateRequest", {"devices_ids": 1}),
        (
            "ContainerAllocateResponse",
            {"envs": 1, "mounts": 2, "devices": 3, "annotations": 4, "cdi_devices": 5},
        ),
        ("Mount", {"container_path": 1, "host_path": 2, "read_only": 3}),
        ("DeviceSpec", {"container_path": 1, "host_path": 2, "permissions": 3}),
        ("CDIDevice", {"name": 1}),
        ("PreStartContainerRequest", {"devices_ids": 1}),
    ],
)
def test_field_numbers(message: str, fields: dict[str, int]) -> None:
    descriptor = api_pb2.DESCRIPTOR.message_types_by_name[message]
    assert {f.name: f.number for f in descriptor.fields} == fields


def test_committed_stubs_match_the_proto(tmp_path: Path) -> None:
    protoc = pytest.importorskip("grpc_tools.protoc", reason="grpcio-tools (test extra)")
    out = tmp_path / "api.pb"
    status = protoc.main(
        ["protoc", f"-I{SRC}", f"--descriptor_set_out={out}", str(PROTO.relative_to(SRC))]
    )
    assert status == 0
    fresh = descriptor_pb2.FileDescriptorSet.FromString(out.read_bytes()).file[0]
    # protoc fills in json_name for a descriptor set; the embedded descriptor leaves it out
    todo = list(fresh.message_type)
    while todo:
        message = todo.pop()
        todo += message.nested_type
        for field in message.field:
            field.ClearField("json_name")
    committed = descriptor_pb2.FileDescriptorProto()
    api_pb2.DESCRIPTOR.CopyToProto(committed)
    # regenerate with src/hetsched/k8s/deviceplugin/regenerate.sh when this fails
    assert fresh == committed


def test_our_proto_is_the_official_one_on_the_wire() -> None:
    official = api("deviceplugin/v1beta1/api.proto")
    ours = descriptor_pb2.FileDescriptorProto()
    api_pb2.DESCRIPTOR.CopyToProto(ours)
    assert normalized(ours) == normalized(official.file)
    assert normalized(official.file)["package"] == "v1beta1"

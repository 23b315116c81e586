"""The DRA driver's own protos are the kubelet's on the wire: compared, descriptor by
descriptor, with the OFFICIAL ones compiled at test time; and the committed stubs are in
step with our protos."""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

import pytest
from google.protobuf import descriptor_pb2

from hetsched.k8s.dra.api import (
    dra_v1_pb2,
    dra_v1beta1_pb2,
    health_v1_pb2,
    registration_v1_pb2,
)
from k8s.official import api, normalized

SRC = Path(dra_v1_pb2.__file__).parents[4]


def _ours(module: ModuleType) -> descriptor_pb2.FileDescriptorProto:
    file = descriptor_pb2.FileDescriptorProto()
    module.DESCRIPTOR.CopyToProto(file)
    return file


@pytest.mark.parametrize(
    ("official", "ours", "package"),
    [
        ("dra/v1/api.proto", dra_v1_pb2, "k8s.io.kubelet.pkg.apis.dra.v1"),
        ("dra-health/v1/api.proto", health_v1_pb2, "v1"),
        ("pluginregistration/v1/api.proto", registration_v1_pb2, "pluginregistration"),
    ],
)
def test_our_proto_is_the_official_one_on_the_wire(
    official: str, ours: ModuleType, package: str
) -> None:
    theirs = normalized(api(official).file)
    assert theirs["package"] == package
    assert normalized(_ours(ours)) == theirs


def test_v1beta1_is_v1_without_the_share_id() -> None:
    # the official v1beta1 file is not among the reference protos; the kubelet's v1beta1 has
    # v1's messages and fields except Device.share_id (added to v1 only)
    v1 = normalized(api("dra/v1/api.proto").file)
    beta = normalized(_ours(dra_v1beta1_pb2))
    assert beta["package"] == "k8s.io.kubelet.pkg.apis.dra.v1beta1"
    del v1["messages"]["Device"]["share_id"]

    def rename(value: object) -> object:
        if isinstance(value, str):
            return value.replace(".dra.v1beta1.", ".dra.v1.")
        if isinstance(value, tuple):
            return tuple(rename(v) for v in value)
        if isinstance(value, dict):
            return {k: rename(v) for k, v in value.items()}
        return value

    assert rename(beta["messages"]) == v1["messages"]
    assert rename(beta["services"]) == v1["services"]


def test_the_method_paths_are_the_kubelets() -> None:
    health = api("dra-health/v1/api.proto")
    assert health.path("DRAResourceHealth", "NodeWatchResources") == (
        "/v1.DRAResourceHealth/NodeWatchResources"
    )
    service = dra_v1_pb2.DESCRIPTOR.services_by_name["DRAPlugin"]
    assert service.full_name == "k8s.io.kubelet.pkg.apis.dra.v1.DRAPlugin"
    registration = registration_v1_pb2.DESCRIPTOR.services_by_name["Registration"]
    assert registration.full_name == "pluginregistration.Registration"


@pytest.mark.parametrize(
    "module", [dra_v1_pb2, dra_v1beta1_pb2, health_v1_pb2, registration_v1_pb2]
)
def test_committed_stubs_match_the_protos(tmp_path: Path, module: ModuleType) -> None:
    protoc = pytest.importorskip("grpc_tools.protoc", reason="grpcio-tools (test extra)")
    proto = Path(module.__file__ or "").with_name(
        Path(module.__file__ or "").name.replace("_pb2.py", ".proto")
    )
    out = tmp_path / "set.pb"
    assert (
        protoc.main(
            ["protoc", f"-I{SRC}", f"--descriptor_set_out={out}", str(proto.relative_to(SRC))]
        )
        == 0
    )
    fresh = descriptor_pb2.FileDescriptorSet.FromString(out.read_bytes()).file[0]
    todo = list(fresh.message_type)
    while todo:
        message = todo.pop()
        todo += message.nested_type
        for field in message.field:
            field.ClearField("json_name")
    # regenerate with src/hetsched/k8s/dra/api/regenerate.sh when this fails
    assert fresh == _ours(module)

"""The OFFICIAL kubelet plugin APIs, compiled at test time.

The kubelet's own ``api.proto`` files (deviceplugin, dra, dra-health, pluginregistration;
unmodified copies from the kubernetes/kubelet repository) live beside the project, in
``ROOT.parent/"shared"/"reference"/"k8s-api"`` (or the folder ``$HETSCHED_K8S_API`` names).
They are compiled here with grpcio-tools into a descriptor pool of their own, not the
default one, so that their messages never mix with hetsched's (some full names are the same,
as they must be on the wire); messages are built from that pool and RPCs are called or
served by their method paths. A test that needs them skips, with the reason, when the folder
or grpcio-tools is absent.
"""

from __future__ import annotations

import functools
import os
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import pytest
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

ROOT = Path(__file__).resolve().parents[2]
#: where the protos are; $HETSCHED_K8S_API names another folder (a checkout elsewhere)
OFFICIAL = Path(
    os.environ.get("HETSCHED_K8S_API") or ROOT.parent / "shared" / "reference" / "k8s-api"
)

Message = Any


@dataclass(frozen=True)
class Api:
    """One official proto file: its descriptor and its messages, from a private pool."""

    file: descriptor_pb2.FileDescriptorProto
    pool: descriptor_pool.DescriptorPool

    @property
    def package(self) -> str:
        return self.file.package

    def message(self, name: str) -> type[Message]:
        """The message class ``name`` (without the package)."""
        full = f"{self.package}.{name}" if self.package else name
        cls: type[Message] = message_factory.GetMessageClass(self.pool.FindMessageTypeByName(full))
        return cls

    def path(self, service: str, method: str) -> str:
        """The gRPC method path, ``/<package>.<service>/<method>``."""
        return f"/{self.package}.{service}/{method}"

    def _method(self, service: str, method: str) -> Any:
        return self.pool.FindServiceByName(f"{self.package}.{service}").FindMethodByName(method)

    def _types(self, service: str, method: str) -> tuple[type[Message], type[Message]]:
        found = self._method(service, method)
        return (
            message_factory.GetMessageClass(found.input_type),
            message_factory.GetMessageClass(found.output_type),
        )

    def unary(self, channel: grpc.Channel, service: str, method: str) -> Callable[..., Message]:
        """A client callable of a unary RPC over ``channel``."""
        request, response = self._types(service, method)
        return channel.unary_unary(
            self.path(service, method),
            request_serializer=request.SerializeToString,
            response_deserializer=response.FromString,
        )

    def stream(
        self, channel: grpc.Channel, service: str, method: str
    ) -> Callable[..., Iterator[Message]]:
        """A client callable of a server-streaming RPC over ``channel``."""
        request, response = self._types(service, method)
        return channel.unary_stream(
            self.path(service, method),
            request_serializer=request.SerializeToString,
            response_deserializer=response.FromString,
        )

    def handler(
        self, service: str, methods: dict[str, Callable[[Message, grpc.ServicerContext], Message]]
    ) -> grpc.GenericRpcHandler:
        """A server handler of unary ``methods`` of ``service``."""
        handlers = {}
        for name, behaviour in methods.items():
            request, response = self._types(service, name)
            handlers[name] = grpc.unary_unary_rpc_method_handler(
                behaviour,
                request_deserializer=request.FromString,
                response_serializer=response.SerializeToString,
            )
        return grpc.method_handlers_generic_handler(f"{self.package}.{service}", handlers)


def require() -> Path:
    """The folder of the official protos; skips the test when it or grpcio-tools is absent."""
    if not OFFICIAL.is_dir():
        pytest.skip(f"the official kubelet API protos are not here: {OFFICIAL} is absent")
    pytest.importorskip("grpc_tools.protoc", reason="compiling protos needs grpcio-tools")
    return OFFICIAL


@functools.cache
def _compile(relative: str) -> Api:
    from grpc_tools import protoc

    with tempfile.TemporaryDirectory() as folder:
        out = Path(folder) / "set.pb"
        status = protoc.main(["protoc", f"-I{OFFICIAL}", f"--descriptor_set_out={out}", relative])
        if status != 0:
            raise AssertionError(f"protoc could not compile the official {relative}")
        files = descriptor_pb2.FileDescriptorSet.FromString(out.read_bytes()).file
    (file,) = files
    pool = descriptor_pool.DescriptorPool()
    pool.Add(file)
    return Api(file, pool)


def api(relative: str) -> Api:
    """The official ``relative`` proto (``dra/v1/api.proto``), compiled once per run."""
    require()
    return _compile(relative)


def normalized(file: descriptor_pb2.FileDescriptorProto) -> dict[str, Any]:
    """What the wire depends on in a proto file: the package, every message's fields
    (name, number, label, type, message type, proto3 ``optional``) and nested map entries,
    every enum's values, every service's methods (input, output, streaming). Comments, file
    names and language options do not travel."""

    def fields(message: descriptor_pb2.DescriptorProto) -> dict[str, Any]:
        return {
            f.name: (f.number, f.label, f.type, f.type_name, f.proto3_optional)
            for f in message.field
        }

    def messages(items: Any, prefix: str) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for message in items:
            name = f"{prefix}{message.name}"
            out[name] = fields(message)
            out.update(messages(message.nested_type, name + "."))
        return out

    return {
        "package": file.package,
        "messages": messages(file.message_type, ""),
        "enums": {e.name: [(v.name, v.number) for v in e.value] for e in file.enum_type},
        "services": {
            s.name: {
                m.name: (m.input_type, m.output_type, m.client_streaming, m.server_streaming)
                for m in s.method
            }
            for s in file.service
        },
    }

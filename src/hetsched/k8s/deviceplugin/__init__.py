"""The hetsched kubelet device plugin (device plugin API ``v1beta1`` over gRPC).

- ``api.proto``: the API, written from the published definition (``package v1beta1``);
  ``api_pb2*.py`` / ``.pyi`` are generated from it and committed. Regenerate them with
  ``PYTHON=.venv/bin/python src/hetsched/k8s/deviceplugin/regenerate.sh``, which runs
  ``python -m grpc_tools.protoc -I src --python_out=src --grpc_python_out=src --mypy_out=src
  --mypy_grpc_out=src src/hetsched/k8s/deviceplugin/api.proto``;
- :mod:`.allocation`: preferred allocation and Allocate answers, as pure functions;
- :mod:`.server`: the ``DevicePlugin`` servicer;
- :mod:`.plugin`: serve, register, watch the kubelet socket and the devices, re-register;
- :mod:`.publisher`: the Node annotation and the pods, behind the ``NodeAPI`` Protocol.

``hetsched k8s device-plugin`` runs it; docs/kubernetes.md explains the design.
"""

from hetsched.k8s.deviceplugin.plugin import DevicePlugin, PluginSettings
from hetsched.k8s.deviceplugin.publisher import KubernetesNodeAPI, NodeAPI, PodView
from hetsched.k8s.deviceplugin.server import DevicePluginServicer, DeviceTable

__all__ = [
    "DevicePlugin",
    "DevicePluginServicer",
    "DeviceTable",
    "KubernetesNodeAPI",
    "NodeAPI",
    "PluginSettings",
    "PodView",
]

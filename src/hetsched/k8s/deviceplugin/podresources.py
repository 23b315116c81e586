"""The kubelet's pod-resources API, read by the device plugin: which pods the kubelet knows
and which devices of a resource it already gave each of them.

The kubelet serves ``v1.PodResourcesLister`` on a unix socket
(``/var/lib/kubelet/pod-resources/kubelet.sock``). It lists a pod as soon as it starts
admitting it, and a container's devices once their Allocate returned; so during an
Allocate, the pod being admitted is the one listed with fewer devices of the resource than
it asks for. The plugin works without it (the socket is not mounted, an older kubelet):
:meth:`PodResources.devices` then answers None and the plugin falls back to the rules that
need no kubelet (see :mod:`.matching`).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Protocol

import grpc

from hetsched.k8s.deviceplugin import podresources_pb2, podresources_pb2_grpc

__all__ = ["DEFAULT_POD_RESOURCES_SOCKET", "KubeletPods", "PodResources"]

log = logging.getLogger("hetsched.k8s.deviceplugin")

DEFAULT_POD_RESOURCES_SOCKET = Path("/var/lib/kubelet/pod-resources/kubelet.sock")
#: how long a List may take: it runs inside the kubelet's admission of a pod
LIST_TIMEOUT_S = 2.0


class KubeletPods(Protocol):
    def devices(self, resource: str) -> Mapping[tuple[str, str], list[str]] | None:
        """Every pod the kubelet knows, (namespace, name) -> the ids of ``resource`` it
        gave the pod's containers; None when the kubelet cannot be asked."""
        ...


class PodResources:
    """:class:`KubeletPods` over the kubelet's socket; one channel, opened when first used
    and again after a failure (a restarted kubelet serves a new socket)."""

    def __init__(self, socket: Path = DEFAULT_POD_RESOURCES_SOCKET) -> None:
        self.socket = socket
        self._channel: grpc.Channel | None = None
        self._lock = threading.Lock()
        self._said = ""

    def devices(self, resource: str) -> dict[tuple[str, str], list[str]] | None:
        if not self.socket.exists():
            self._say(f"no kubelet pod-resources socket at {self.socket}: matching without it")
            return None
        with self._lock:
            if self._channel is None:
                self._channel = grpc.insecure_channel(f"unix://{self.socket}")
            stub = podresources_pb2_grpc.PodResourcesListerStub(self._channel)
            try:
                answer = stub.List(
                    podresources_pb2.ListPodResourcesRequest(), timeout=LIST_TIMEOUT_S
                )
            except grpc.RpcError as exc:
                self._channel.close()
                self._channel = None
                self._say(f"the kubelet's pod-resources List failed ({exc.code()}): without it")
                return None
        self._said = ""
        out: dict[tuple[str, str], list[str]] = {}
        for pod in answer.pod_resources:
            ids = out.setdefault((pod.namespace, pod.name), [])
            for container in pod.containers:
                for devices in container.devices:
                    if devices.resource_name == resource:
                        ids += list(devices.device_ids)
        return out

    def close(self) -> None:
        with self._lock:
            if self._channel is not None:
                self._channel.close()
                self._channel = None

    def _say(self, line: str) -> None:
        if line != self._said:
            self._said = line
            log.warning(line)

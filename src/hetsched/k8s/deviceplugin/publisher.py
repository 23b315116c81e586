"""The device plugin's side of the API server: the Node annotation that describes the
node's devices, and the pods whose devices the scheduler assigned.

The kubelet only counts devices; the scheduler needs their model, memory, NUMA node and
health, so the plugin writes them on its Node as the annotation
:data:`~hetsched.k8s.names.NODE_DEVICES` (a JSON list, one entry per device:
``{"id", "class", "vendor", "model", "attributes", "health"}``), and rewrites it whenever
a device changes.

Everything goes through :class:`NodeAPI`, a small Protocol: :class:`KubernetesNodeAPI` is
the real one (the official ``kubernetes`` client); tests hand in an in-memory one.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Protocol

from hetsched.k8s.names import NODE_DEVICES
from hetsched.model.device import Device

__all__ = [
    "KubernetesNodeAPI",
    "NodeAPI",
    "NodePublisher",
    "PodView",
    "devices_annotation",
    "merged_annotation",
]

log = logging.getLogger("hetsched.k8s.deviceplugin")


@dataclass(frozen=True, slots=True)
class PodView:
    """What the plugin reads of a pod on its node."""

    namespace: str
    name: str
    uid: str
    #: creation time, RFC 3339 (sorts in time order)
    created: str
    annotations: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    #: extended resource -> the sum of the containers' limits for it
    limits: Mapping[str, int] = field(default_factory=lambda: MappingProxyType({}))


class NodeAPI(Protocol):
    """The API server calls the plugin makes. Each may raise; callers log and retry."""

    def node_annotations(self, node: str) -> Mapping[str, str]: ...

    def patch_node_annotations(self, node: str, annotations: Mapping[str, str]) -> None: ...

    def pods_on_node(self, node: str) -> list[PodView]:
        """The pods bound to ``node`` that have not finished."""
        ...

    def patch_pod_annotations(
        self, namespace: str, name: str, annotations: Mapping[str, str]
    ) -> None: ...

    def create_event(self, namespace: str, event: Mapping[str, Any]) -> None:
        """Record a core/v1 Event."""
        ...


def _entry(device: Device) -> dict[str, Any]:
    return {
        "id": device.id,
        "class": device.device_class,
        "vendor": device.vendor,
        "model": device.model,
        "attributes": dict(device.attributes),
        "health": device.health.value,
    }


def _dump(entries: Iterable[Mapping[str, Any]]) -> str:
    listed = sorted(entries, key=lambda e: str(e.get("id", "")))
    return json.dumps(listed, separators=(",", ":"), sort_keys=True)


def devices_annotation(devices: Iterable[Device]) -> str:
    """The :data:`NODE_DEVICES` annotation's value: devices by id, as JSON."""
    return _dump(_entry(d) for d in devices)


def merged_annotation(current: str | None, device_class: str, devices: Iterable[Device]) -> str:
    """``current`` with the entries of ``device_class`` replaced by ``devices``: each class
    has its own plugin on a node, and each keeps the others' entries. A value that is not a
    JSON list is replaced."""
    others: list[Mapping[str, Any]] = []
    try:
        parsed = json.loads(current) if current else []
    except ValueError:
        parsed = []
    if isinstance(parsed, list):
        others = [e for e in parsed if isinstance(e, dict) and e.get("class") != device_class]
    return _dump([*others, *(_entry(d) for d in devices)])


@dataclass
class NodePublisher:
    """Keeps this plugin's devices (those of ``device_class``) in the node's annotation.

    ``publish`` is called from the device watcher's thread and from the plugin's loop. It
    reads the annotation and writes it back merged when this class's devices changed since
    the last successful write, or when ``force`` is set (the loop forces a resync now and
    then, which repairs an entry another class's plugin overwrote in a race). A failed read
    or write is logged and tried again at the next call.
    """

    api: NodeAPI
    node: str
    device_class: str
    _last: str | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def publish(self, devices: Iterable[Device], force: bool = False) -> bool:
        """True when the annotation was written now."""
        devices = list(devices)
        mine = devices_annotation(devices)
        with self._lock:
            if mine == self._last and not force:
                return False
            try:
                current = self.api.node_annotations(self.node).get(NODE_DEVICES)
                value = merged_annotation(current, self.device_class, devices)
                if value != current:
                    self.api.patch_node_annotations(self.node, {NODE_DEVICES: value})
            except Exception as exc:
                log.warning("cannot annotate node %s with its devices: %s", self.node, exc)
                return False
            self._last = mine
            return value != current


def _quantity(value: Any) -> int:
    try:
        return int(str(value))
    except ValueError:
        return 0


class KubernetesNodeAPI:
    """:class:`NodeAPI` with the official client: in-cluster credentials (the DaemonSet's
    service account) or, outside a cluster, a kubeconfig file."""

    def __init__(self, kubeconfig: str | None = None) -> None:
        import kubernetes

        # the client's models are partly typed; this class is the boundary, so it reads them
        # as Any and hands out PodView
        client: Any = kubernetes.client
        config: Any = kubernetes.config
        if kubeconfig:
            config.load_kube_config(config_file=kubeconfig)
        else:
            try:
                config.load_incluster_config()
            except config.ConfigException:
                config.load_kube_config()
        self._core: Any = client.CoreV1Api()

    def node_annotations(self, node: str) -> Mapping[str, str]:
        return dict(self._core.read_node(node).metadata.annotations or {})

    def patch_node_annotations(self, node: str, annotations: Mapping[str, str]) -> None:
        self._core.patch_node(node, {"metadata": {"annotations": dict(annotations)}})

    def pods_on_node(self, node: str) -> list[PodView]:
        pods = self._core.list_pod_for_all_namespaces(field_selector=f"spec.nodeName={node}")
        out: list[PodView] = []
        pod: Any
        for pod in pods.items:
            if pod.status is not None and pod.status.phase in ("Succeeded", "Failed"):
                continue
            limits: dict[str, int] = {}
            for container in pod.spec.containers or []:
                resources = container.resources
                for name, value in ((resources and resources.limits) or {}).items():
                    limits[name] = limits.get(name, 0) + _quantity(value)
            created = pod.metadata.creation_timestamp
            out.append(
                PodView(
                    pod.metadata.namespace,
                    pod.metadata.name,
                    pod.metadata.uid or "",
                    created.isoformat() if created is not None else "",
                    MappingProxyType(dict(pod.metadata.annotations or {})),
                    MappingProxyType(limits),
                )
            )
        return out

    def patch_pod_annotations(
        self, namespace: str, name: str, annotations: Mapping[str, str]
    ) -> None:
        self._core.patch_namespaced_pod(
            name, namespace, {"metadata": {"annotations": dict(annotations)}}
        )

    def create_event(self, namespace: str, event: Mapping[str, Any]) -> None:
        self._core.create_namespaced_event(namespace, dict(event))

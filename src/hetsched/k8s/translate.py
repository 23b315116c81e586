"""Kubernetes JSON to hetsched's model and back: pure functions, no client, no I/O.

Inputs are plain core/v1 JSON (``metadata``, ``spec``, ``status``, camelCase) as the API
server sends it, so the same functions serve the scheduler (which reads raw watch objects)
and the extender (which gets pods and nodes inside kube-scheduler's requests).

What is read:

- Node: ``status.allocatable`` cpu and memory; devices from the ``hetsched.io/devices``
  annotation the device plugin writes; labels; taints (``spec.unschedulable`` and a node
  that is not Ready count as NoSchedule taints, as in Kubernetes).
- Pod: cpu and memory requests summed over containers (init containers: the largest of
  them, if larger); ``hetsched.io/<class>`` extended resources as device counts (limits,
  else requests), ``hetsched.io/<class>-shared`` (the device plugin's slots of shared
  devices) as the same class; the ``hetsched.io/share`` and ``hetsched.io/selector``
  annotations (the selector applies to every device request of the pod); ``spec.priority``;
  the queue from the ``hetsched.io/queue`` label, else the namespace; the gang from the
  ``hetsched.io/pod-group`` label and ``hetsched.io/min-available`` annotation;
  ``spec.nodeSelector``; ``spec.tolerations``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from hetsched.cluster.placement import DeviceShare, Placement
from hetsched.k8s.deviceplugin.publisher import devices_annotation
from hetsched.k8s.names import (
    ASSIGNED_DEVICES,
    DEVICE_SELECTOR,
    DEVICE_SHARE,
    DOMAIN,
    NODE_DEVICES,
    POD_GROUP,
    POD_GROUP_MIN,
    QUEUE,
    SHARED_SUFFIX,
)
from hetsched.model.device import SHARE_UNITS, Device, Health, Node, Taint, TaintEffect
from hetsched.model.job import DeviceRequest, Job, TaskRequest, Toleration
from hetsched.model.quantity import QuantityError, parse_cpu, parse_memory
from hetsched.model.selector import SelectorError, compile_selector

__all__ = [
    "PodInfo",
    "TranslateError",
    "assigned_devices",
    "devices_annotation",
    "group_job",
    "node_from_k8s",
    "pod_info",
    "pod_job",
    "pod_key",
    "pod_request",
    "restored_placement",
]

JSON = Mapping[str, Any]

#: ``hetsched.io/gpu-shared``: the device plugin's resource of slots of shared devices; a
#: pod asks for one slot and says its share with ``hetsched.io/share``

_TERMINAL_PHASES = frozenset({"Succeeded", "Failed"})


class TranslateError(ValueError):
    """An object hetsched cannot read; the message names the field."""


def _meta(obj: JSON) -> JSON:
    meta = obj.get("metadata") or {}
    return meta if isinstance(meta, Mapping) else {}


def _str_map(value: Any) -> dict[str, str]:
    return {str(k): str(v) for k, v in (value or {}).items()}


def pod_key(obj: JSON) -> str:
    """``namespace/name``: how the scheduler names a pod (and a single pod's job)."""
    meta = _meta(obj)
    return f"{meta.get('namespace') or 'default'}/{meta.get('name', '')}"


# -- nodes --------------------------------------------------------------------------------


def _device(entry: Any, where: str) -> Device:
    if not isinstance(entry, Mapping) or "id" not in entry or "class" not in entry:
        raise TranslateError(f"{where}: each device needs 'id' and 'class'")
    attributes = entry.get("attributes") or {}
    if not isinstance(attributes, Mapping):
        raise TranslateError(f"{where}: 'attributes' must be an object")
    health = str(entry.get("health") or Health.HEALTHY.value).lower()
    return Device(
        id=str(entry["id"]),
        device_class=str(entry["class"]),
        vendor=str(entry.get("vendor") or ""),
        model=str(entry.get("model") or ""),
        attributes={str(k): v for k, v in attributes.items() if isinstance(v, str | int | float)},
        health=Health.HEALTHY if health == Health.HEALTHY.value else Health.UNHEALTHY,
    )


def _taint(entry: Mapping[str, Any]) -> Taint:
    effect = str(entry.get("effect") or TaintEffect.NO_SCHEDULE.value)
    try:
        parsed = TaintEffect(effect)
    except ValueError:
        parsed = TaintEffect.NO_SCHEDULE
    return Taint(str(entry.get("key", "")), str(entry.get("value") or ""), parsed)


def _ready(status: JSON) -> bool:
    for condition in status.get("conditions") or []:
        if condition.get("type") == "Ready":
            return bool(condition.get("status") == "True")
    return True  # a node without conditions (a fresh object) is taken as ready


def node_from_k8s(obj: JSON) -> Node:
    """A core/v1 Node as a hetsched Node. Raises TranslateError on a field it cannot read."""
    meta = _meta(obj)
    name = str(meta.get("name") or "")
    if not name:
        raise TranslateError("node: metadata.name is empty")
    spec = obj.get("spec") or {}
    status = obj.get("status") or {}
    allocatable = status.get("allocatable") or status.get("capacity") or {}
    try:
        cpu = parse_cpu(allocatable.get("cpu", 0))
        memory = parse_memory(allocatable.get("memory", 0))
    except QuantityError as exc:
        raise TranslateError(f"node {name}: status.allocatable: {exc}") from None
    devices: tuple[Device, ...] = ()
    raw = _str_map(meta.get("annotations")).get(NODE_DEVICES)
    if raw:
        where = f"node {name}: annotation {NODE_DEVICES}"
        try:
            entries = json.loads(raw)
        except json.JSONDecodeError as exc:
            raise TranslateError(f"{where}: not JSON: {exc}") from None
        if not isinstance(entries, list):
            raise TranslateError(f"{where}: must be a JSON list")
        devices = tuple(_device(e, where) for e in entries)
    taints = [_taint(t) for t in spec.get("taints") or []]
    if spec.get("unschedulable"):
        taints.append(Taint("node.kubernetes.io/unschedulable"))
    if not _ready(status):
        taints.append(Taint("node.kubernetes.io/not-ready"))
    return Node(name, cpu, memory, devices, _str_map(meta.get("labels")), tuple(taints))


# -- pods ---------------------------------------------------------------------------------


def _containers(spec: JSON, key: str) -> list[JSON]:
    return [c for c in spec.get(key) or [] if isinstance(c, Mapping)]


def _amounts(container: JSON) -> tuple[dict[str, Any], dict[str, Any]]:
    resources = container.get("resources") or {}
    return dict(resources.get("requests") or {}), dict(resources.get("limits") or {})


def _toleration(entry: Mapping[str, Any]) -> Toleration:
    effect = entry.get("effect")
    value = None if entry.get("operator") == "Exists" else str(entry.get("value") or "")
    try:
        parsed = TaintEffect(effect) if effect else None
    except ValueError:
        parsed = None
    return Toleration(str(entry.get("key") or ""), value, parsed)


def pod_request(obj: JSON) -> TaskRequest:
    """What one pod asks for, as a hetsched task request."""
    name = pod_key(obj)
    spec = obj.get("spec") or {}
    annotations = _str_map(_meta(obj).get("annotations"))
    cpu = memory = 0
    counts: dict[str, int] = {}
    try:
        for container in _containers(spec, "containers"):
            requests, limits = _amounts(container)
            cpu += parse_cpu(requests.get("cpu", limits.get("cpu", 0)))
            memory += parse_memory(requests.get("memory", limits.get("memory", 0)))
            for resource in {*requests, *limits}:
                if resource.startswith(DOMAIN + "/"):
                    amount = limits.get(resource, requests.get(resource, 0))
                    device_class = resource[len(DOMAIN) + 1 :].removesuffix(SHARED_SUFFIX)
                    counts[device_class] = counts.get(device_class, 0) + int(amount)
        for container in _containers(spec, "initContainers"):
            requests, limits = _amounts(container)
            cpu = max(cpu, parse_cpu(requests.get("cpu", limits.get("cpu", 0))))
            memory = max(memory, parse_memory(requests.get("memory", limits.get("memory", 0))))
    except (QuantityError, ValueError, TypeError) as exc:
        raise TranslateError(f"pod {name}: resources: {exc}") from None
    share = SHARE_UNITS
    if DEVICE_SHARE in annotations:
        try:
            share = int(annotations[DEVICE_SHARE])
        except ValueError:
            raise TranslateError(
                f"pod {name}: annotation {DEVICE_SHARE} must be an integer"
            ) from None
        if not 1 <= share <= SHARE_UNITS:
            raise TranslateError(f"pod {name}: annotation {DEVICE_SHARE} must be 1..{SHARE_UNITS}")
    selector = annotations.get(DEVICE_SELECTOR) or None
    if selector is not None:
        try:
            compile_selector(selector)
        except SelectorError as exc:
            raise TranslateError(f"pod {name}: annotation {DEVICE_SELECTOR}: {exc}") from None
    devices: list[DeviceRequest] = []
    for device_class, count in sorted(counts.items()):
        if count <= 0:
            continue
        if share < SHARE_UNITS and count != 1:
            raise TranslateError(
                f"pod {name}: a share below {SHARE_UNITS} needs a limit of 1 {DOMAIN}/"
                f"{device_class}, got {count}"
            )
        devices.append(DeviceRequest.of(device_class, count, share, selector))
    return TaskRequest(
        cpu_milli=cpu,
        memory_mib=memory,
        devices=tuple(devices),
        node_selector=_str_map(spec.get("nodeSelector")),
        tolerations=tuple(_toleration(t) for t in spec.get("tolerations") or []),
    )


@dataclass(frozen=True, slots=True)
class PodInfo:
    """What the scheduler needs to know about a pod, read once from its JSON."""

    key: str
    namespace: str
    name: str
    uid: str
    scheduler_name: str
    node_name: str
    phase: str
    #: being deleted (``metadata.deletionTimestamp`` set)
    deleting: bool
    #: has scheduling gates: not ready to be scheduled
    gated: bool
    priority: int
    queue: str
    #: the pod group (gang) label, or None
    group: str | None
    #: the group's minimum count, or None
    min_available: int | None

    @property
    def terminal(self) -> bool:
        return self.phase in _TERMINAL_PHASES

    def schedulable_by(self, scheduler_name: str) -> bool:
        """Ours and waiting for a node: not bound, not gated, not ending."""
        return (
            self.scheduler_name == scheduler_name
            and not self.node_name
            and not self.deleting
            and not self.gated
            and not self.terminal
        )


def pod_info(obj: JSON) -> PodInfo:
    meta = _meta(obj)
    spec = obj.get("spec") or {}
    labels = _str_map(meta.get("labels"))
    annotations = _str_map(meta.get("annotations"))
    namespace = str(meta.get("namespace") or "default")
    group = labels.get(POD_GROUP) or None
    min_available: int | None = None
    if group is not None and POD_GROUP_MIN in annotations:
        try:
            min_available = max(1, int(annotations[POD_GROUP_MIN]))
        except ValueError:
            raise TranslateError(
                f"pod {pod_key(obj)}: annotation {POD_GROUP_MIN} must be an integer"
            ) from None
    return PodInfo(
        key=pod_key(obj),
        namespace=namespace,
        name=str(meta.get("name") or ""),
        uid=str(meta.get("uid") or ""),
        scheduler_name=str(spec.get("schedulerName") or "default-scheduler"),
        node_name=str(spec.get("nodeName") or ""),
        phase=str((obj.get("status") or {}).get("phase") or "Pending"),
        deleting=bool(meta.get("deletionTimestamp")),
        gated=bool(spec.get("schedulingGates")),
        priority=int(spec.get("priority") or 0),
        queue=labels.get(QUEUE) or namespace,
        group=group,
        min_available=min_available,
    )


def pod_job(obj: JSON, job_id: str | None = None, submit_time: float = 0.0) -> Job:
    """One pod as a one-task job (id ``namespace/name`` unless given)."""
    info = pod_info(obj)
    return Job(
        id=job_id or info.key,
        resources=pod_request(obj),
        name=info.name,
        user=info.namespace,
        queue=info.queue,
        priority=info.priority,
        submit_time=submit_time,
    )


def group_job(
    job_id: str, pods: Sequence[JSON], min_available: int, submit_time: float = 0.0
) -> Job:
    """The pods of one pod group as one job: task ``i`` is ``pods[i]``, the gang minimum is
    ``min_available`` (capped at the pods given). The pods' requests must be equal, as the
    replicas of a hetsched job are; the first pod's request, priority and queue count."""
    if not pods:
        raise TranslateError(f"group {job_id}: no pods")
    first = pod_info(pods[0])
    request = pod_request(pods[0])
    for pod in pods[1:]:
        if pod_request(pod) != request:
            raise TranslateError(
                f"group {job_id}: pod {pod_key(pod)} asks for {pod_request(pod).describe()}, "
                f"but {first.key} asks for {request.describe()}; the pods of a group must "
                "ask for the same resources"
            )
    return Job(
        id=job_id,
        resources=request,
        name=first.group or first.name,
        user=first.namespace,
        queue=first.queue,
        priority=first.priority,
        replicas=len(pods),
        gang=min(min_available, len(pods)),
        submit_time=submit_time,
    )


def assigned_devices(placement: Placement) -> str:
    """The ``hetsched.io/assigned-devices`` pod annotation: ``[{"id", "share"}]``."""
    return json.dumps([{"id": d.device_id, "share": d.share} for d in placement.devices])


def restored_placement(obj: JSON) -> Placement | None:
    """What a bound pod holds on its node, for rebuilding state after a restart: its cpu and
    memory requests and the devices of its ``hetsched.io/assigned-devices`` annotation.
    None for a pod that is not bound."""
    info = pod_info(obj)
    if not info.node_name:
        return None
    request = pod_request(obj)
    shares: tuple[DeviceShare, ...] = ()
    raw = _str_map(_meta(obj).get("annotations")).get(ASSIGNED_DEVICES)
    if raw:
        try:
            entries = json.loads(raw)
            shares = tuple(DeviceShare(str(e["id"]), int(e["share"])) for e in entries)
        except (json.JSONDecodeError, KeyError, TypeError, ValueError) as exc:
            raise TranslateError(
                f"pod {info.key}: annotation {ASSIGNED_DEVICES}: {exc!r}"
            ) from None
    return Placement(info.node_name, request.cpu_milli, request.memory_mib, shares)

"""Kubernetes JSON to hetsched's model and back: pure functions, no client, no I/O.

Inputs are plain core/v1 JSON (``metadata``, ``spec``, ``status``, camelCase) as the API
server sends it, so the same functions serve the scheduler (which reads raw watch objects)
and the extender (which gets pods and nodes inside kube-scheduler's requests).

What is read:

- Node: ``status.allocatable`` cpu and memory; devices from the ``hetsched.io/devices``
  annotation the device plugin writes; labels; taints (``spec.unschedulable`` and a node
  that is not Ready count as NoSchedule taints, as in Kubernetes).
- Pod: what it asks for (cpu, memory, devices per class and their shares: see
  :mod:`hetsched.k8s.podrequest`); ``spec.priority``; the queue from the
  ``hetsched.io/queue`` label, else the namespace; the gang from the
  ``hetsched.io/pod-group`` label and ``hetsched.io/min-available`` annotation;
  ``spec.nodeSelector``; ``spec.tolerations``; how the job saves its state from the
  ``hetsched.io/checkpoint`` annotation (:mod:`hetsched.k8s.checkpoints`).

Every field of the wrong shape (a list where an object belongs, a bad quantity, an
annotation that is not JSON) is a TranslateError naming it, never another exception.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from hetsched.cluster.placement import DeviceShare, Placement
from hetsched.k8s.checkpoints import declaration
from hetsched.k8s.deviceplugin.publisher import devices_annotation
from hetsched.k8s.names import (
    ASSIGNED_DEVICES,
    NODE_DEVICES,
    POD_GROUP,
    POD_GROUP_ELASTIC,
    POD_GROUP_MIN,
    QUEUE,
    SPEED,
    SPEED_JOB_TYPE,
    SPEED_WORK,
    TOPOLOGY_SLICE_SIZE,
)
from hetsched.k8s.podrequest import (
    TranslateError,
    assignment_annotations,
    mapping,
    objects,
    pod_key,
    pod_request,
    str_map,
)
from hetsched.k8s.topology import pod_topology
from hetsched.model.checkpoint import Checkpointing
from hetsched.model.device import Device, Health, Node, Taint, TaintEffect
from hetsched.model.job import Job, ResizeMode
from hetsched.model.quantity import QuantityError, parse_cpu, parse_memory
from hetsched.model.specs import build_speed, parse_speed_map, parse_work
from hetsched.model.speed import JobSpeed
from hetsched.model.topology import TopologyRequest

__all__ = [
    "PodInfo",
    "TranslateError",
    "assigned_devices",
    "assignment_annotations",
    "controller_uid",
    "devices_annotation",
    "group_job",
    "node_from_k8s",
    "pod_info",
    "pod_job",
    "pod_key",
    "pod_request",
    "pod_speed",
    "restored_placement",
]

JSON = Mapping[str, Any]

_TERMINAL_PHASES = frozenset({"Succeeded", "Failed"})


def _meta(obj: JSON) -> JSON:
    return mapping(obj.get("metadata"), "metadata")


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


def _taint(entry: JSON) -> Taint:
    effect = str(entry.get("effect") or TaintEffect.NO_SCHEDULE.value)
    try:
        parsed = TaintEffect(effect)
    except ValueError:
        parsed = TaintEffect.NO_SCHEDULE
    return Taint(str(entry.get("key", "")), str(entry.get("value") or ""), parsed)


def _ready(status: JSON) -> bool:
    for condition in objects(status.get("conditions"), "status.conditions"):
        if condition.get("type") == "Ready":
            return bool(condition.get("status") == "True")
    return True  # a node without conditions (a fresh object) is taken as ready


def node_from_k8s(obj: JSON) -> Node:
    """A core/v1 Node as a hetsched Node. Raises TranslateError on a field it cannot read."""
    if not isinstance(obj, Mapping):
        raise TranslateError(f"node: must be an object, got {type(obj).__name__}")
    meta = _meta(obj)
    name = str(meta.get("name") or "")
    if not name:
        raise TranslateError("node: metadata.name is empty")
    try:
        return _node(name, obj, meta)
    except TranslateError as exc:
        if str(exc).startswith(f"node {name}:"):
            raise
        raise TranslateError(f"node {name}: {exc}") from None


def _node(name: str, obj: JSON, meta: JSON) -> Node:
    spec = mapping(obj.get("spec"), "spec")
    status = mapping(obj.get("status"), "status")
    allocatable = mapping(status.get("allocatable") or status.get("capacity"), "status.allocatable")
    try:
        cpu = parse_cpu(allocatable.get("cpu", 0))
        memory = parse_memory(allocatable.get("memory", 0))
    except (QuantityError, ValueError, TypeError) as exc:
        raise TranslateError(f"node {name}: status.allocatable: {exc}") from None
    devices: tuple[Device, ...] = ()
    raw = str_map(meta.get("annotations"), "metadata.annotations").get(NODE_DEVICES)
    if raw:
        where = f"node {name}: annotation {NODE_DEVICES}"
        try:
            entries = json.loads(raw)
        except json.JSONDecodeError as exc:
            raise TranslateError(f"{where}: not JSON: {exc}") from None
        if not isinstance(entries, list):
            raise TranslateError(f"{where}: must be a JSON list")
        devices = tuple(_device(e, where) for e in entries)
    taints = [_taint(t) for t in objects(spec.get("taints"), "spec.taints")]
    if spec.get("unschedulable"):
        taints.append(Taint("node.kubernetes.io/unschedulable"))
    if not _ready(status):
        taints.append(Taint("node.kubernetes.io/not-ready"))
    labels = str_map(meta.get("labels"), "metadata.labels")
    return Node(name, cpu, memory, devices, labels, tuple(taints))


# -- pods ---------------------------------------------------------------------------------


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


#: the latest PodInfo of each pod object, by identity: a pod's JSON, once received, is never
#: changed in place (a change is a new object from the watch, and whoever edits a pod edits
#: a copy), and the scheduler reads the same object's info several times in one batch
_INFOS: dict[int, tuple[JSON, PodInfo]] = {}
_INFOS_MAX = 8192


def pod_info(obj: JSON) -> PodInfo:
    """What the scheduler needs of the pod ``obj`` (see :class:`PodInfo`), read once per
    object (never change a pod's JSON in place: copy it)."""
    hit = _INFOS.get(id(obj))
    if hit is not None and hit[0] is obj:
        return hit[1]
    info = _pod_info(obj)
    if len(_INFOS) >= _INFOS_MAX:
        _INFOS.clear()
    _INFOS[id(obj)] = (obj, info)
    return info


def _pod_info(obj: JSON) -> PodInfo:
    if not isinstance(obj, Mapping):
        raise TranslateError(f"pod: must be an object, got {type(obj).__name__}")
    meta = _meta(obj)
    spec = mapping(obj.get("spec"), "spec")
    labels = str_map(meta.get("labels"), "metadata.labels")
    annotations = str_map(meta.get("annotations"), "metadata.annotations")
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
    try:
        priority = int(spec.get("priority") or 0)
    except (TypeError, ValueError):
        raise TranslateError(f"pod {pod_key(obj)}: spec.priority must be an integer") from None
    return PodInfo(
        key=pod_key(obj),
        namespace=namespace,
        name=str(meta.get("name") or ""),
        uid=str(meta.get("uid") or ""),
        scheduler_name=str(spec.get("schedulerName") or "default-scheduler"),
        node_name=str(spec.get("nodeName") or ""),
        phase=str(mapping(obj.get("status"), "status").get("phase") or "Pending"),
        deleting=bool(meta.get("deletionTimestamp")),
        gated=bool(spec.get("schedulingGates")),
        priority=priority,
        queue=labels.get(QUEUE) or namespace,
        group=group,
        min_available=min_available,
    )


def pod_speed(obj: JSON) -> JobSpeed:
    """The speed model of a pod's ``hetsched.io/speed``, ``hetsched.io/job-type`` and
    ``hetsched.io/work`` annotations (none: every model equal); a bad value is a
    TranslateError naming the annotation."""
    annotations = str_map(_meta(obj).get("annotations"), "metadata.annotations")
    where = f"pod {pod_key(obj)}: annotation"
    try:
        raw = annotations.get(SPEED)
        speed = parse_speed_map(raw) if raw is not None else None
    except ValueError as exc:
        raise TranslateError(f"{where} {SPEED}: {exc}") from None
    try:
        raw = annotations.get(SPEED_WORK)
        work = parse_work(raw) if raw is not None else None
    except ValueError as exc:
        raise TranslateError(f"{where} {SPEED_WORK}: {exc}") from None
    job_type = (annotations.get(SPEED_JOB_TYPE) or "").strip() or None
    try:
        return build_speed(speed, work, job_type)
    except ValueError as exc:
        raise TranslateError(f"{where}s {SPEED}/{SPEED_WORK}: {exc}") from None


def controller_uid(obj: JSON) -> str | None:
    """The uid of the pod's controller (a Job, a ReplicaSet, ...: what recreates it once it
    is deleted), None for a pod that has none (or an object that is no pod: no answer)."""
    meta = obj.get("metadata")
    refs = meta.get("ownerReferences") if isinstance(meta, Mapping) else None
    for ref in refs if isinstance(refs, list) else []:
        if isinstance(ref, Mapping) and ref.get("controller") and ref.get("uid"):
            return str(ref["uid"])
    return None


def pod_job(obj: JSON, job_id: str | None = None, submit_time: float = 0.0) -> Job:
    """One pod as a one-task job (id ``namespace/name`` unless given). A bare pod (no
    controller recreates it) is not movable: moving a job deletes its pods for their
    controller to recreate them where the job goes (docs/kubernetes.md)."""
    info = pod_info(obj)
    return Job(
        id=job_id or info.key,
        resources=pod_request(obj),
        name=info.name,
        user=info.namespace,
        queue=info.queue,
        priority=info.priority,
        submit_time=submit_time,
        speed=pod_speed(obj),
        checkpoint=_checkpointing(obj),
        movable=controller_uid(obj) is not None or info.group is not None,
        topology=_topology(obj),
    )


def _topology(obj: JSON) -> TopologyRequest | None:
    annotations = str_map(_meta(obj).get("annotations"), "metadata.annotations")
    return pod_topology(annotations, f"pod {pod_key(obj)}")


def _checkpointing(obj: JSON) -> Checkpointing | None:
    declared = declaration(obj)
    return None if declared is None else declared.checkpointing


def group_job(
    job_id: str, pods: Sequence[JSON], min_available: int, submit_time: float = 0.0
) -> Job:
    """The pods of one pod group as one job: task ``i`` is ``pods[i]``, the gang minimum is
    ``min_available`` (capped at the pods given). The pods' requests must be equal, as the
    replicas of a hetsched job are; the first pod's request, priority, queue and checkpoint
    declaration count."""
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
    least = min(min_available, len(pods))
    annotations = str_map(_meta(pods[0]).get("annotations"), "metadata.annotations")
    elastic = annotations.get(POD_GROUP_ELASTIC) == "true" and least < len(pods)
    topology = _topology(pods[0])
    size = None if topology is None else topology.slice_size
    if size is not None and len(pods) % size:
        raise TranslateError(
            f"group {job_id}: {len(pods)} pods do not divide into slices of {size} "
            f"(annotation {TOPOLOGY_SLICE_SIZE} of {first.key})"
        )
    return Job(
        id=job_id,
        resources=request,
        name=first.group or first.name,
        user=first.namespace,
        queue=first.queue,
        priority=first.priority,
        replicas=len(pods),
        gang=None if elastic else least,
        # an elastic group resizes live: its pods are bound and deleted one by one
        min_replicas=least if elastic else None,
        resize=ResizeMode.LIVE,
        submit_time=submit_time,
        speed=pod_speed(pods[0]),
        checkpoint=_checkpointing(pods[0]),
        topology=topology,
    )


def assigned_devices(placement: Placement) -> str:
    """The devices of a placement as ``[{"id", "share"}]``, the shape
    :func:`restored_placement` reads (:func:`assignment_annotations` writes the full
    annotation, which adds each device's resource)."""
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
    raw = str_map(_meta(obj).get("annotations"), "metadata.annotations").get(ASSIGNED_DEVICES)
    if raw:
        try:
            entries = json.loads(raw)
            shares = tuple(DeviceShare(str(e["id"]), int(e["share"])) for e in entries)
        except (json.JSONDecodeError, KeyError, TypeError, ValueError) as exc:
            raise TranslateError(
                f"pod {info.key}: annotation {ASSIGNED_DEVICES}: {exc!r}"
            ) from None
    return Placement(info.node_name, request.cpu_milli, request.memory_mib, shares)

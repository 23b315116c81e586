"""What a pod asks for, read from its JSON, and the assignment the scheduler writes back.

Resources (containers' limits, else requests; init containers: the largest, if larger):

- ``cpu`` and ``memory``: summed over the containers;
- ``hetsched.io/<class>: N``: N whole devices of the class;
- ``hetsched.io/<class>-shared: 1``: one slot of a shared device of the class (the device
  plugin's shared resource), i.e. a share of one device.

Shares, in milli-units of one device (1..1000), per class:

- ``hetsched.io/share.<class>`` (``hetsched.io/share.gpu: "300"``) is the share of that
  class: of its shared slot when the pod asks for one, else of its one whole device
  (``hetsched.io/gpu: 1``, which then counts as 300);
- ``hetsched.io/share`` without a class is the share of the pod's shared slots when it asks
  for exactly one shared class, else of its only device class; it never applies to a class
  besides those (``gpu-shared: 1`` + ``fpga: 1`` with share 300: 300 of a GPU and a whole
  FPGA), and a pod where it would be ambiguous is refused;
- a shared slot without a share is :data:`~hetsched.k8s.names.DEFAULT_SLOT_SHARE` (100, a
  tenth), never a whole device.

``hetsched.io/gpu: 1`` + ``hetsched.io/gpu-shared: 1`` are two requests: a whole GPU and a
share of another one. ``hetsched.io/selector.<class>`` is a CEL selector for that class;
``hetsched.io/selector`` one for every class that has none of its own.

The assignment the scheduler writes on the pod (in the Binding, so with ``spec.nodeName``
in one update): ``hetsched.io/assigned-devices`` = ``[{"id", "share", "resource"}]`` in
request order, ``hetsched.io/assign-phase: allocating`` and ``hetsched.io/assigned-for:
<node>/<pod uid>``, which the device plugin checks before it hands the devices out.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from hetsched.cluster.placement import Placement
from hetsched.k8s.names import (
    ASSIGN_PHASE,
    ASSIGNED_DEVICES,
    ASSIGNED_FOR,
    DEFAULT_SLOT_SHARE,
    DEVICE_SELECTOR,
    DEVICE_SHARE,
    DOMAIN,
    SHARED_SUFFIX,
    resource_name,
)
from hetsched.model.device import SHARE_UNITS, TaintEffect
from hetsched.model.job import DeviceRequest, TaskRequest, Toleration
from hetsched.model.quantity import QuantityError, parse_cpu, parse_memory
from hetsched.model.selector import SelectorError, compile_selector

__all__ = [
    "TranslateError",
    "assigned_for",
    "assignment_annotations",
    "device_requests",
    "pod_key",
    "pod_request",
]

JSON = Mapping[str, Any]


class TranslateError(ValueError):
    """An object hetsched cannot read; the message names the field."""


def mapping(value: Any, where: str) -> JSON:
    """``value`` as an object (absent: empty); TranslateError naming ``where`` otherwise."""
    if type(value) is dict:  # what JSON decodes to: checked first, it is every call but few
        return value
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise TranslateError(f"{where} must be an object, got {type(value).__name__}")
    return value


def objects(value: Any, where: str) -> list[JSON]:
    """``value`` as a list of objects (absent: empty)."""
    if value is None:
        return []
    if not isinstance(value, list):
        raise TranslateError(f"{where} must be a list, got {type(value).__name__}")
    if all(type(item) is dict for item in value):
        return value
    return [mapping(item, f"{where}[{i}]") for i, item in enumerate(value)]


def str_map(value: Any, where: str) -> dict[str, str]:
    return {str(k): str(v) for k, v in mapping(value, where).items()}


def meta(obj: JSON) -> JSON:
    return mapping(obj.get("metadata"), "metadata")


def pod_key(obj: JSON) -> str:
    """``namespace/name``: how the scheduler names a pod (and a single pod's job)."""
    m = obj.get("metadata")
    m = m if isinstance(m, Mapping) else {}
    return f"{m.get('namespace') or 'default'}/{m.get('name', '')}"


def _containers(spec: JSON, key: str) -> list[JSON]:
    return objects(spec.get(key), f"spec.{key}")


def _amounts(container: JSON, where: str) -> tuple[JSON, JSON]:
    resources = mapping(container.get("resources"), f"{where}.resources")
    return (
        mapping(resources.get("requests"), f"{where}.resources.requests"),
        mapping(resources.get("limits"), f"{where}.resources.limits"),
    )


def _count(value: Any, resource: str) -> int:
    try:
        count = int(str(value))
    except ValueError:
        raise TranslateError(f"{resource} must be a whole number, got {value!r}") from None
    if count < 0:
        raise TranslateError(f"{resource} must not be negative, got {count}")
    return count


def _share(annotations: Mapping[str, str], key: str) -> int | None:
    if key not in annotations:
        return None
    try:
        share = int(annotations[key])
    except ValueError:
        raise TranslateError(f"annotation {key} must be an integer") from None
    if not 1 <= share <= SHARE_UNITS:
        raise TranslateError(f"annotation {key} must be 1..{SHARE_UNITS}")
    return share


def _device_counts(spec: JSON) -> tuple[dict[str, int], dict[str, int]]:
    """Whole and shared device counts per class, summed over the containers."""
    whole: dict[str, int] = {}
    shared: dict[str, int] = {}
    for i, container in enumerate(_containers(spec, "containers")):
        requests, limits = _amounts(container, f"spec.containers[{i}]")
        for resource in {*requests, *limits}:
            if not str(resource).startswith(DOMAIN + "/"):
                continue
            amount = _count(limits.get(resource, requests.get(resource, 0)), resource)
            kind = str(resource)[len(DOMAIN) + 1 :]
            if kind.endswith(SHARED_SUFFIX):
                target, kind = shared, kind.removesuffix(SHARED_SUFFIX)
            else:
                target = whole
            target[kind] = target.get(kind, 0) + amount
    return (
        {k: n for k, n in whole.items() if n > 0},
        {k: n for k, n in shared.items() if n > 0},
    )


def _class_annotations(annotations: Mapping[str, str], base: str) -> dict[str, str]:
    """``<base>.<class>`` annotations by class."""
    prefix = base + "."
    return {k[len(prefix) :]: v for k, v in annotations.items() if k.startswith(prefix)}


def _legacy_share_targets(
    whole: Mapping[str, int], shared: Mapping[str, int], name: str
) -> set[str]:
    """The classes ``hetsched.io/share`` (no class) applies to (see the module doc)."""
    targets = set(shared) if shared else set(whole)
    if len(targets) > 1:
        raise TranslateError(
            f"pod {name}: annotation {DEVICE_SHARE} is ambiguous for {sorted(targets)}; "
            f"name the class: {DEVICE_SHARE}.<class>"
        )
    return targets


def _check_selectors(name: str, common: str | None, per_class: Mapping[str, str]) -> None:
    """A selector that does not compile (or is past the static limits) is refused here,
    naming its annotation, rather than failing later in a filter."""
    for key, selector in [(DEVICE_SELECTOR, common)] + [
        (f"{DEVICE_SELECTOR}.{k}", v) for k, v in sorted(per_class.items())
    ]:
        if not selector:
            continue
        try:
            compile_selector(selector)
        except SelectorError as exc:
            raise TranslateError(f"pod {name}: annotation {key}: {exc}") from None


#: the device requests of each pod object, by identity (as ``translate.pod_info``: a pod's
#: JSON is never changed in place): read when the pod is submitted, again when it is bound
_REQUESTS: dict[int, tuple[JSON, tuple[tuple[str, DeviceRequest], ...]]] = {}
_REQUESTS_MAX = 8192


def device_requests(obj: JSON) -> list[tuple[str, DeviceRequest]]:
    """The pod's device requests, each with the extended resource it comes from, in a fixed
    order: by class, the whole devices before the shared slot (read once per object)."""
    hit = _REQUESTS.get(id(obj))
    if hit is not None and hit[0] is obj:
        return list(hit[1])
    out = _device_requests(obj)
    if len(_REQUESTS) >= _REQUESTS_MAX:
        _REQUESTS.clear()
    _REQUESTS[id(obj)] = (obj, tuple(out))
    return out


def _device_requests(obj: JSON) -> list[tuple[str, DeviceRequest]]:
    name = pod_key(obj)
    spec = mapping(obj.get("spec"), "spec")
    annotations = str_map(meta(obj).get("annotations"), "metadata.annotations")
    try:
        whole, shared = _device_counts(spec)
    except TranslateError as exc:
        raise TranslateError(f"pod {name}: resources: {exc}") from None
    asked = set(whole) | set(shared)
    shares = {c: _share(annotations, f"{DEVICE_SHARE}.{c}") for c in asked}
    for kind in _class_annotations(annotations, DEVICE_SHARE):
        if kind not in asked:
            raise TranslateError(
                f"pod {name}: annotation {DEVICE_SHARE}.{kind}: the pod asks for no "
                f"{resource_name(kind)} or {resource_name(kind)}{SHARED_SUFFIX}"
            )
    legacy = _share(annotations, DEVICE_SHARE)
    if legacy is not None:
        for kind in _legacy_share_targets(whole, shared, name):
            shares[kind] = shares[kind] or legacy
    selectors = _class_annotations(annotations, DEVICE_SELECTOR)
    common = annotations.get(DEVICE_SELECTOR) or None
    _check_selectors(name, common, selectors)
    out: list[tuple[str, DeviceRequest]] = []
    for kind in sorted(asked):
        selector = selectors.get(kind) or common
        share = shares[kind]
        if kind in shared:
            if shared[kind] != 1:
                raise TranslateError(
                    f"pod {name}: {resource_name(kind)}{SHARED_SUFFIX} must be 1 (one slot of "
                    f"one device), got {shared[kind]}"
                )
            if kind in whole:
                out.append(
                    (
                        resource_name(kind),
                        DeviceRequest.of(kind, whole[kind], SHARE_UNITS, selector),
                    )
                )
            slot = share if share is not None else DEFAULT_SLOT_SHARE
            out.append(
                (resource_name(kind) + SHARED_SUFFIX, DeviceRequest.of(kind, 1, slot, selector))
            )
            continue
        share = share if share is not None else SHARE_UNITS
        if share < SHARE_UNITS and whole[kind] != 1:
            raise TranslateError(
                f"pod {name}: a share below {SHARE_UNITS} needs a limit of 1 "
                f"{resource_name(kind)}, got {whole[kind]}"
            )
        out.append((resource_name(kind), DeviceRequest.of(kind, whole[kind], share, selector)))
    return out


def _toleration(entry: JSON) -> Toleration:
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
    spec = mapping(obj.get("spec"), "spec")
    cpu = memory = 0
    try:
        for i, container in enumerate(_containers(spec, "containers")):
            requests, limits = _amounts(container, f"spec.containers[{i}]")
            cpu += parse_cpu(requests.get("cpu", limits.get("cpu", 0)))
            memory += parse_memory(requests.get("memory", limits.get("memory", 0)))
        for i, container in enumerate(_containers(spec, "initContainers")):
            requests, limits = _amounts(container, f"spec.initContainers[{i}]")
            cpu = max(cpu, parse_cpu(requests.get("cpu", limits.get("cpu", 0))))
            memory = max(memory, parse_memory(requests.get("memory", limits.get("memory", 0))))
    except (QuantityError, ValueError, TypeError) as exc:
        raise TranslateError(f"pod {name}: resources: {exc}") from None
    return TaskRequest(
        cpu_milli=cpu,
        memory_mib=memory,
        devices=tuple(request for _, request in device_requests(obj)),
        node_selector=str_map(spec.get("nodeSelector"), "spec.nodeSelector"),
        tolerations=tuple(
            _toleration(t) for t in objects(spec.get("tolerations"), "spec.tolerations")
        ),
    )


def assigned_for(node: str, uid: str) -> str:
    """The :data:`~hetsched.k8s.names.ASSIGNED_FOR` annotation's value."""
    return f"{node}/{uid}"


def assignment_annotations(obj: JSON, placement: Placement) -> dict[str, str]:
    """The annotations that hand ``placement`` to the device plugin (see the module doc):
    the devices in request order, each with the resource it was asked as."""
    entries: list[dict[str, Any]] = []
    devices = list(placement.devices)
    for resource, request in device_requests(obj):
        for _ in range(request.primary.count):
            if not devices:
                break
            device = devices.pop(0)
            entries.append({"id": device.device_id, "share": device.share, "resource": resource})
    entries += [{"id": d.device_id, "share": d.share} for d in devices]
    uid = str(meta(obj).get("uid") or "")
    return {
        ASSIGNED_DEVICES: json.dumps(entries, separators=(",", ":")),
        ASSIGN_PHASE: "allocating",
        ASSIGNED_FOR: assigned_for(placement.node, uid),
    }

"""hetsched devices as DRA devices, ResourceSlices and allocation results: pure functions.

A device of the model becomes one ``Device`` of a ResourceSlice (resource.k8s.io/v1):

- its **name** is its short id (``n1/gpu3`` -> ``gpu3``), made a DNS label;
- its **attributes**, all in the driver's domain (written bare): ``type`` (the device
  class), ``vendor``, ``model``, ``healthy`` (bool), then the device's own attributes under
  their hetsched names (``memory_gib``, ``numa``, ``nvlink_domain``, ``uuid``,
  ``pci_address``, ...), so a CEL selector reads ``device.attributes["hetsched.io"].model``.
  DRA attributes are int, bool, string or version: a whole float becomes an int, any other
  float a string; a string longer than 64 characters, and attributes past the 32 a device
  may carry (capacities included), are left out;
- its **capacity**: ``share`` (1000 milli-units, the unit hetsched shares a device in) and,
  when known, ``memory`` (from ``memory_gib``). A class listed as shareable publishes
  ``allowMultipleAllocations: true`` with a request policy on ``share`` (default 1000,
  1..1000), which lets an allocator with consumable capacity (Kubernetes' DRAConsumableCapacity)
  give one device to several claims; an API server without that feature drops those fields.

A node's devices are one pool, named after the node, in slices of at most 128 devices named
``<node>-<driver>-<k>``; every slice carries the pool's generation and slice count.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from hetsched.model.device import SHARE_UNITS, AttrValue, Device, Health
from hetsched.model.quantity import QuantityError, parse_cpu

__all__ = [
    "MAX_DEVICES_PER_SLICE",
    "SHARE",
    "AllocatedDevice",
    "allocated_devices",
    "dra_device",
    "dra_name",
    "node_slices",
    "slice_name",
]

#: a ResourceSlice holds at most this many devices
MAX_DEVICES_PER_SLICE = 128
#: attributes and capacities of one device, together
_MAX_FIELDS = 32
_MAX_STRING = 64
#: the capacity a device is shared in
SHARE = "share"
#: attributes written first (the rest follow by name, while room is left)
_FIRST = ("type", "vendor", "model", "healthy", "memory_gib", "numa", "nvlink_domain")

Obj = dict[str, Any]


def dra_name(device: Device) -> str:
    """The device's name in its pool: its short id as a DNS label (``gpu3``)."""
    short = device.id.rsplit("/", 1)[-1].lower()
    label = re.sub(r"[^a-z0-9-]+", "-", short).strip("-")[:63].strip("-")
    return label or "device"


def _attribute_name(name: str) -> str:
    ident = re.sub(r"[^A-Za-z0-9_]", "_", name)
    if not ident or ident[0].isdigit():
        ident = "_" + ident
    return ident[:32]


def _attribute(value: AttrValue) -> Obj | None:
    if isinstance(value, bool):
        return {"bool": value}
    if isinstance(value, int):
        return {"int": value}
    if isinstance(value, float):
        return {"int": int(value)} if value.is_integer() else {"string": repr(value)}
    text = str(value)
    return {"string": text} if len(text) <= _MAX_STRING else None


def _memory(device: Device) -> str | None:
    value = device.attributes.get("memory_gib")
    if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
        return None
    return f"{int(value)}Gi" if float(value).is_integer() else str(int(value * 1024**3))


def dra_device(device: Device, shareable: bool = False) -> Obj:
    """One ResourceSlice ``Device`` (see the module doc)."""
    capacity: Obj = {SHARE: {"value": str(SHARE_UNITS)}}
    memory = _memory(device)
    if memory is not None:
        capacity["memory"] = {"value": memory}
    values: dict[str, AttrValue] = {
        "type": device.device_class,
        "vendor": device.vendor,
        "model": device.model,
        "healthy": device.health is Health.HEALTHY,
    }
    for name, value in sorted(device.attributes.items()):
        values.setdefault(_attribute_name(name), value)
    ordered = [n for n in _FIRST if n in values] + sorted(n for n in values if n not in _FIRST)
    attributes: Obj = {}
    for name in ordered:
        if len(attributes) + len(capacity) >= _MAX_FIELDS:
            break
        attribute = _attribute(values[name])
        if attribute is not None:
            attributes[name] = attribute
    out: Obj = {"name": dra_name(device), "attributes": attributes, "capacity": capacity}
    if shareable:
        out["allowMultipleAllocations"] = True
        capacity[SHARE]["requestPolicy"] = {
            "default": str(SHARE_UNITS),
            "validRange": {"min": "1", "max": str(SHARE_UNITS)},
        }
    return out


def slice_name(node: str, driver: str, index: int) -> str:
    """``<node>-<driver with dots as dashes>-<index>``, at most 253 characters."""
    tail = f"-{re.sub(r'[^a-z0-9-]+', '-', driver.lower())}-{index}"
    return node[: 253 - len(tail)] + tail


def node_slices(
    node: str,
    driver: str,
    devices: Iterable[Device],
    generation: int,
    shareable: Iterable[str] = (),
    owner: Obj | None = None,
) -> list[Obj]:
    """The ResourceSlices of one node's pool: devices by name, 128 to a slice (at least
    one slice, empty when the node has no device). ``owner`` (a Node's ownerReference)
    makes the slices go with their Node."""
    sharing = set(shareable)
    listed = sorted((dra_device(d, d.device_class in sharing) for d in devices), key=_natural)
    chunks = [
        listed[i : i + MAX_DEVICES_PER_SLICE] for i in range(0, len(listed), MAX_DEVICES_PER_SLICE)
    ] or [[]]
    out = []
    for index, chunk in enumerate(chunks):
        metadata: Obj = {"name": slice_name(node, driver, index)}
        if owner is not None:
            metadata["ownerReferences"] = [owner]
        out.append(
            {
                "apiVersion": "resource.k8s.io/v1",
                "kind": "ResourceSlice",
                "metadata": metadata,
                "spec": {
                    "driver": driver,
                    "nodeName": node,
                    "pool": {
                        "name": node,
                        "generation": generation,
                        "resourceSliceCount": len(chunks),
                    },
                    "devices": chunk,
                },
            }
        )
    return out


def _natural(device: Obj) -> tuple[str, int, str]:
    name = str(device["name"])
    head = name.rstrip("0123456789")
    tail = name[len(head) :]
    return (head, int(tail) if tail else -1, name)


# -- allocation results --------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class AllocatedDevice:
    """One device of this driver in a claim's allocation."""

    #: the requests it serves (``gpu``, or ``gpu/small`` for a firstAvailable sub-request)
    requests: tuple[str, ...]
    pool: str
    device: str
    #: milli-units of the device (1000: whole)
    share: int
    share_id: str | None = None


def _share_from(parameters: Any) -> int | None:
    if not isinstance(parameters, Mapping):
        return None
    value = parameters.get(SHARE)
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= SHARE_UNITS:
        return None
    return value


def _config_shares(config: Sequence[Any], driver: str) -> dict[str, int]:
    """Request -> share from the allocation's opaque configs of this driver, class configs
    first and claim configs after them, later entries winning; key "" for no request."""
    out: dict[str, int] = {}
    ordered = sorted(
        (c for c in config if isinstance(c, Mapping)),
        key=lambda c: 0 if c.get("source") == "FromClass" else 1,
    )
    for entry in ordered:
        opaque = entry.get("opaque")
        if not isinstance(opaque, Mapping) or opaque.get("driver") != driver:
            continue
        share = _share_from(opaque.get("parameters"))
        if share is None:
            continue
        for request in entry.get("requests") or [""]:
            out[str(request)] = share
    return out


def _consumed(result: Mapping[str, Any]) -> int | None:
    consumed = result.get("consumedCapacity")
    if not isinstance(consumed, Mapping) or SHARE not in consumed:
        return None
    try:
        milli = parse_cpu(str(consumed[SHARE]))  # a Quantity, read in thousandths
    except QuantityError:
        return None
    value = milli // 1000
    return value if milli % 1000 == 0 and 1 <= value <= SHARE_UNITS else None


def allocated_devices(claim: Mapping[str, Any], driver: str) -> list[AllocatedDevice]:
    """This driver's devices in a claim's ``status.allocation`` (empty when it has none),
    each with its share: the consumed ``share`` capacity when the allocator recorded one,
    else the ``share`` of the driver's opaque config for its request (the claim's over the
    class's), else the whole device."""
    status = claim.get("status") or {}
    allocation = status.get("allocation") if isinstance(status, Mapping) else None
    devices = (allocation or {}).get("devices") or {}
    shares = _config_shares(devices.get("config") or [], driver)
    out = []
    for result in devices.get("results") or []:
        if not isinstance(result, Mapping) or result.get("driver") != driver:
            continue
        request = str(result.get("request") or "")
        parent = request.split("/", 1)[0]
        share = _consumed(result)
        if share is None:
            share = shares.get(request, shares.get(parent, shares.get("", SHARE_UNITS)))
        share_id = result.get("shareID")
        out.append(
            AllocatedDevice(
                (request,) if request else (),
                str(result.get("pool") or ""),
                str(result.get("device") or ""),
                share,
                str(share_id) if share_id else None,
            )
        )
    return out

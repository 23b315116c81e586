"""The devices ResourceSlices publish, as devices of the core's nodes.

The hetsched scheduler reads every ResourceSlice, as kube-scheduler does, and keeps of each
pool (driver, pool name) only the slices of its highest generation, once all
``resourceSliceCount`` of them are there (an incomplete pool is not used yet: its devices
are not all known). A slice tied to one node (``spec.nodeName``) gives that node its
devices; slices for a node selector or all nodes (devices reached over a network) are not
used.

Each DRA device becomes one device of the core (:func:`core_device`):

- id ``dra:<driver>/<pool>/<device>`` (never one of the device plugin's ids);
- class: its ``type`` attribute in the driver's own domain when it has one (hetsched's
  driver publishes ``gpu``, ``fpga``, ``npu``), so the core's policies see a GPU of either
  path alike; else the driver's name;
- vendor and model from those attributes; health from ``healthy`` (absent: healthy);
- attributes: every attribute by its qualified name (``hetsched.io/model``; a bare name is
  in the driver's domain), the driver's own also by their bare name (as the device plugin
  path names them), and the driver as :data:`~hetsched.model.selector.DRIVER`, so a DRA
  CEL selector (``device.driver``, ``device.attributes["hetsched.io"].model``) is evaluated
  by the core on them as the API server's allocator would.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from hetsched.model.device import AttrValue, Device, Health
from hetsched.model.selector import DRIVER

__all__ = ["DraDevice", "Inventory", "core_device", "dra_id"]

Obj = Mapping[str, Any]


def dra_id(driver: str, pool: str, device: str) -> str:
    return f"dra:{driver}/{pool}/{device}"


@dataclass(frozen=True, slots=True)
class DraDevice:
    """Where a core device comes from: what an allocation result names."""

    driver: str
    pool: str
    name: str

    @property
    def id(self) -> str:
        return dra_id(self.driver, self.pool, self.name)


def _value(attribute: Any) -> AttrValue | None:
    if not isinstance(attribute, Mapping):
        return None
    for kind in ("bool", "int", "string", "version"):
        if kind in attribute:
            value = attribute[kind]
            if isinstance(value, bool | int | str):
                return value
    return None


def core_device(driver: str, pool: str, device: Obj) -> Device:
    """One ResourceSlice device as a device of the core (see the module docstring)."""
    name = str(device.get("name") or "")
    attributes: dict[str, AttrValue] = {DRIVER: driver}
    own: dict[str, AttrValue] = {}
    raw = device.get("attributes")
    for key, attribute in raw.items() if isinstance(raw, Mapping) else ():
        value = _value(attribute)
        if value is None:
            continue
        domain, slash, bare = str(key).rpartition("/")
        if not slash:
            domain, bare = driver, str(key)
        attributes[f"{domain}/{bare}"] = value
        if domain == driver:
            own[bare] = value
    for bare, value in own.items():
        attributes.setdefault(bare, value)
    kind = own.get("type")
    healthy = own.get("healthy", True)
    return Device(
        id=dra_id(driver, pool, name),
        device_class=kind if isinstance(kind, str) and kind else driver,
        vendor=str(own.get("vendor") or ""),
        model=str(own.get("model") or ""),
        attributes=attributes,
        health=Health.HEALTHY if healthy is not False else Health.UNHEALTHY,
    )


def _generation(slice_: Obj) -> int:
    try:
        return int(slice_["spec"]["pool"].get("generation") or 0)
    except (KeyError, TypeError, AttributeError, ValueError):
        return -1


class Inventory:
    """The devices of complete pools, by node (see the module docstring)."""

    def __init__(self) -> None:
        #: node -> its devices, in pool and device order
        self.by_node: dict[str, list[Device]] = {}
        #: core device id -> where it comes from
        self.origin: dict[str, DraDevice] = {}

    @classmethod
    def of(cls, slices: Iterable[Obj]) -> Inventory:
        pools: dict[tuple[str, str], list[Obj]] = {}
        for slice_ in slices:
            spec = slice_.get("spec")
            if not isinstance(spec, Mapping) or not spec.get("nodeName"):
                continue
            pool = spec.get("pool") or {}
            key = (str(spec.get("driver") or ""), str(pool.get("name") or ""))
            pools.setdefault(key, []).append(slice_)
        inventory = cls()
        for (driver, pool), members in sorted(pools.items()):
            newest = max(_generation(s) for s in members)
            current = [s for s in members if _generation(s) == newest]
            wanted = int((current[0]["spec"]["pool"] or {}).get("resourceSliceCount") or 1)
            if len(current) < wanted:
                continue  # a pool being rewritten: not all of its slices are there yet
            for slice_ in sorted(current, key=lambda s: str(s["metadata"].get("name"))):
                node = str(slice_["spec"]["nodeName"])
                for device in slice_["spec"].get("devices") or []:
                    if not isinstance(device, Mapping) or not device.get("name"):
                        continue
                    core = core_device(driver, pool, device)
                    inventory.by_node.setdefault(node, []).append(core)
                    inventory.origin[core.id] = DraDevice(driver, pool, str(device["name"]))
        return inventory

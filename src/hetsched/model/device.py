"""Devices and nodes: what a cluster is made of."""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

__all__ = [
    "SHARE_UNITS",
    "AttrValue",
    "Device",
    "Health",
    "Node",
    "Taint",
    "TaintEffect",
]

#: A device's share capacity: 1000 milli-units, so a task can take part of one.
SHARE_UNITS = 1000

AttrValue = str | int | float | bool


class Health(enum.StrEnum):
    HEALTHY = "healthy"
    UNHEALTHY = "unhealthy"


def _frozen(mapping: Mapping[str, AttrValue] | None) -> Mapping[str, AttrValue]:
    return MappingProxyType(dict(mapping or {}))


@dataclass(frozen=True, slots=True)
class Device:
    """One accelerator (or other countable device) on a node.

    ``attributes`` holds what selectors see besides class, vendor and model:
    ``memory_gib``, ``compute_capability``, ``numa``, ``nvlink_domain``, ``pcie_root``, ...
    """

    id: str
    device_class: str
    vendor: str = ""
    model: str = ""
    attributes: Mapping[str, AttrValue] = field(default_factory=lambda: _frozen(None))
    health: Health = Health.HEALTHY

    def __post_init__(self) -> None:
        if not isinstance(self.attributes, MappingProxyType):
            object.__setattr__(self, "attributes", _frozen(self.attributes))

    def selector_view(self) -> dict[str, AttrValue]:
        """The attribute map a selector evaluates against: class, vendor and model included."""
        view: dict[str, AttrValue] = dict(self.attributes)
        view.setdefault("class", self.device_class)
        view.setdefault("vendor", self.vendor)
        view.setdefault("model", self.model)
        return view


class TaintEffect(enum.StrEnum):
    NO_SCHEDULE = "NoSchedule"
    PREFER_NO_SCHEDULE = "PreferNoSchedule"
    NO_EXECUTE = "NoExecute"


@dataclass(frozen=True, slots=True)
class Taint:
    key: str
    value: str = ""
    effect: TaintEffect = TaintEffect.NO_SCHEDULE


@dataclass(frozen=True, slots=True)
class Node:
    """A machine: CPU in millicores, memory in MiB, devices, labels, taints, topology."""

    name: str
    cpu_milli: int
    memory_mib: int
    devices: tuple[Device, ...] = ()
    labels: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    taints: tuple[Taint, ...] = ()

    def __post_init__(self) -> None:
        if not isinstance(self.labels, MappingProxyType):
            object.__setattr__(self, "labels", MappingProxyType(dict(self.labels)))

    @property
    def zone(self) -> str | None:
        return self.labels.get("zone")

    @property
    def rack(self) -> str | None:
        return self.labels.get("rack")

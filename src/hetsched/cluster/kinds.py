"""Device kinds: the distinct (class, vendor, model, attributes) of a cluster's devices.

A cluster has thousands of devices and a handful of kinds; the cluster state keeps a kind
row per device slot, so a selector is evaluated once per kind, never once per device.
"""

from __future__ import annotations

from dataclasses import dataclass

from hetsched.model.device import Device
from hetsched.model.selector import AttrKey, attr_key

__all__ = ["DeviceKind", "kind_of"]


@dataclass(frozen=True, slots=True)
class DeviceKind:
    """A distinct (class, vendor, model, attributes): selectors are evaluated once per kind."""

    device_class: str
    vendor: str
    model: str
    attributes: AttrKey


def kind_of(device: Device) -> DeviceKind:
    """The kind a device is of (its attributes as the selectors see them)."""
    return DeviceKind(
        device.device_class, device.vendor, device.model, attr_key(device.selector_view())
    )

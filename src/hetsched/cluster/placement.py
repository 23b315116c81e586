"""What a task holds on a node: the unit of allocate and release."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["DeviceShare", "Placement"]


@dataclass(frozen=True, slots=True)
class DeviceShare:
    """``share`` milli-units of the device ``device_id`` (1000 = the whole device)."""

    device_id: str
    share: int


@dataclass(frozen=True, slots=True)
class Placement:
    """A task's allocation: CPU in millicores and memory in MiB on ``node``, plus devices."""

    node: str
    cpu_milli: int
    memory_mib: int
    devices: tuple[DeviceShare, ...] = ()

    def to_dict(self) -> dict[str, object]:
        return {
            "node": self.node,
            "cpu_milli": self.cpu_milli,
            "memory_mib": self.memory_mib,
            "devices": [{"id": d.device_id, "share": d.share} for d in self.devices],
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Placement:
        """The placement :meth:`to_dict` wrote (as a store keeps it)."""
        return cls(
            str(data["node"]),
            int(data["cpu_milli"]),
            int(data["memory_mib"]),
            tuple(DeviceShare(str(d["id"]), int(d["share"])) for d in data.get("devices", [])),
        )

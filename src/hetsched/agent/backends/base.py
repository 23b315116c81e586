"""What every discovery backend shares: the device it finds, where it looks, its protocol."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any, Protocol

from hetsched.model.device import AttrValue, Health

__all__ = ["HOST_CLASS", "Backend", "DiscoveryContext", "FoundDevice"]

#: the class of the ``cpu`` backend's entries: they describe the host, they are not devices
HOST_CLASS = "cpu"


@dataclass(frozen=True, slots=True)
class FoundDevice:
    """A device as a backend sees it; ``key`` identifies it across discovery rounds."""

    key: str
    device_class: str
    vendor: str
    model: str
    attributes: Mapping[str, AttrValue] = field(default_factory=lambda: MappingProxyType({}))
    health: Health = Health.HEALTHY
    #: the backend that found it
    source: str = ""

    def __post_init__(self) -> None:
        if not isinstance(self.attributes, MappingProxyType):
            object.__setattr__(self, "attributes", MappingProxyType(dict(self.attributes)))

    def to_dict(self) -> dict[str, Any]:
        return {
            "key": self.key,
            "class": self.device_class,
            "vendor": self.vendor,
            "model": self.model,
            "health": self.health.value,
            "source": self.source,
            "attributes": dict(self.attributes),
        }


@dataclass(frozen=True, slots=True)
class DiscoveryContext:
    """Where backends look: roots of sysfs and procfs (tests point them at fake trees), the
    ``fake`` backend's file, and an NVML module to use instead of importing ``pynvml``
    (tests inject recorded answers)."""

    sysfs_root: Path = Path("/sys")
    proc_root: Path = Path("/proc")
    fake_file: Path | None = None
    nvml: Any = None


class Backend(Protocol):
    """One kind of discovery. ``discover`` may be called repeatedly (the watcher polls);
    it never raises for a missing driver or library, it answers [] and logs once."""

    name: str
    #: yields to other backends for devices at the same PCI address
    fallback: bool

    def discover(self) -> list[FoundDevice]: ...

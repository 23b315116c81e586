"""Device discovery backends, registered by name.

A backend finds devices of one kind on this machine and answers a list of
:class:`FoundDevice`: class, vendor, model, attributes, health, and a stable ``key`` (a PCI
address, an NVML UUID) that identifies the device across discovery rounds, which is what
hot-plug watching compares. A backend whose driver or library is absent answers "none
found" and logs one line saying why, once per backend object.

Backends:
- ``cpu``: cores, memory and NUMA nodes (psutil and ``<sysfs>/devices/system/node``); its
  entries describe the host and feed the node's CPU and memory, they are not devices;
- ``nvidia``: NVML through nvidia-ml-py (UUID, model, memory, compute capability, NUMA node,
  NVLink peers, MIG instances, health from ECC errors and XID events);
- ``pci``: every accelerator visible in sysfs, by PCI vendor and class codes, AMD GPU memory
  from DRM, FPGAs from the FPGA manager and region classes;
- ``fake``: devices from a YAML file (``--demo``, tests).

:func:`discover` runs several backends and merges their answers: a *fallback* backend
(``pci``) yields to a richer one (``nvidia``) for a device both found at the same PCI address.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from hetsched.agent.backends import cpu, fake, nvidia, pci
from hetsched.agent.backends.base import HOST_CLASS, Backend, DiscoveryContext, FoundDevice
from hetsched.model.device import Device

__all__ = [
    "HOST_CLASS",
    "Backend",
    "DiscoveryContext",
    "FoundDevice",
    "assign_ids",
    "backend_names",
    "create",
    "discover",
    "register",
]

log = logging.getLogger("hetsched.agent.discovery")

Factory = Callable[[DiscoveryContext], Backend]
_REGISTRY: dict[str, Factory] = {}


def register(name: str, factory: Factory) -> None:
    """Make a backend available under ``name`` (an out-of-tree backend registers the same way)."""
    if name in _REGISTRY:
        raise ValueError(f"discovery backend {name!r} is already registered")
    _REGISTRY[name] = factory


def backend_names() -> list[str]:
    return sorted(_REGISTRY)


def create(name: str, context: DiscoveryContext | None = None) -> Backend:
    """A backend object by name; ValueError naming the known ones for an unknown name."""
    try:
        factory = _REGISTRY[name]
    except KeyError:
        known = ", ".join(sorted(_REGISTRY))
        raise ValueError(f"unknown discovery backend {name!r} (known: {known})") from None
    return factory(context or DiscoveryContext())


def merge(found: Iterable[tuple[Backend, list[FoundDevice]]]) -> list[FoundDevice]:
    """All answers in backend order, less fallback devices another backend also found."""
    answers = list(found)
    claimed = {
        str(d.attributes["pci_address"])
        for backend, devices in answers
        if not backend.fallback
        for d in devices
        if "pci_address" in d.attributes
    }
    out: list[FoundDevice] = []
    seen: set[str] = set()
    for backend, devices in answers:
        for device in devices:
            if backend.fallback and str(device.attributes.get("pci_address", "")) in claimed:
                continue
            if device.key in seen:
                continue
            seen.add(device.key)
            out.append(device)
    return out


def discover(
    names: Sequence[str],
    sysfs_root: str | Path = "/sys",
    fake_file: str | Path | None = None,
    nvml: Any = None,
    proc_root: str | Path = "/proc",
) -> list[FoundDevice]:
    """Run the named backends once and merge what they found."""
    context = DiscoveryContext(
        Path(sysfs_root), Path(proc_root), Path(fake_file) if fake_file else None, nvml
    )
    backends = [create(name, context) for name in names]
    return merge((b, b.discover()) for b in backends)


def assign_ids(
    node: str, found: Iterable[FoundDevice], known: Mapping[str, str] | None = None
) -> dict[str, Device]:
    """Key -> Device with ids ``<node>/<class><index>``, host entries left out.

    ``known`` maps keys to the ids they had before: a device keeps its id across rounds, and
    a new one takes the lowest index of its class that no known device holds, so a device
    that comes back after an unplug gets its old id and nobody else's.
    """
    known = known or {}
    taken = set(known.values())
    out: dict[str, Device] = {}
    next_index: dict[str, int] = {}
    for device in found:
        if device.device_class == HOST_CLASS:
            continue
        device_id = known.get(device.key)
        if device_id is None:
            index = next_index.get(device.device_class, 0)
            while f"{node}/{device.device_class}{index}" in taken:
                index += 1
            next_index[device.device_class] = index + 1
            device_id = f"{node}/{device.device_class}{index}"
            taken.add(device_id)
        out[device.key] = Device(
            device_id,
            device.device_class,
            device.vendor,
            device.model,
            device.attributes,
            device.health,
        )
    return out


for _name, _factory in (
    ("cpu", cpu.CpuBackend),
    ("fake", fake.FakeBackend),
    ("nvidia", nvidia.NvidiaBackend),
    ("pci", pci.PciBackend),
):
    register(_name, _factory)

"""The discovery probe: what runs on a Ray node (as a Ray task pinned to it) to describe it
with hetsched's own discovery backends.

The backends come from the caller (the node's ``hetsched.io/discovery`` label), else from
``HETSCHED_DISCOVERY`` in the node's environment, else ``cpu``, ``nvidia`` and ``pci``. The
``fake`` backend reads ``HETSCHED_FAKE_DEVICES``. The answer is plain data (it crosses Ray's
object store): the backends run, the host's name, CPUs and memory, and each device found.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Sequence
from types import MappingProxyType
from typing import Any

import psutil

from hetsched.agent.backends import FoundDevice, backend_names, discover
from hetsched.model.device import Health
from hetsched.ray import labels

__all__ = [
    "DEFAULT_BACKENDS",
    "backend_list",
    "fake_file",
    "found_from_dict",
    "parse_backends",
    "probe",
]

DEFAULT_BACKENDS = ("cpu", "nvidia", "pci")


def parse_backends(text: str) -> list[str]:
    """``cpu.nvidia.pci`` (a label value) or ``cpu,nvidia`` (an environment value) -> names;
    ValueError naming the unknown ones."""
    names = [n for n in text.replace(",", ".").split(".") if n]
    unknown = [n for n in names if n not in backend_names()]
    if unknown or not names:
        raise ValueError(
            f"discovery backends {text!r}: unknown {', '.join(unknown) or '(none given)'} "
            f"(known: {', '.join(backend_names())})"
        )
    return names


def backend_list(backends: Sequence[str] | None = None) -> list[str]:
    """The backends to run on this node: ``backends`` when given, else those
    ``HETSCHED_DISCOVERY`` names in the node's environment, else the defaults."""
    if backends:
        return list(backends)
    if os.environ.get(labels.DISCOVERY_ENV):
        return parse_backends(os.environ[labels.DISCOVERY_ENV])
    return list(DEFAULT_BACKENDS)


def fake_file() -> str | None:
    """The ``fake`` backend's device file named in the node's environment."""
    return os.environ.get(labels.FAKE_DEVICES_ENV) or None


def probe(backends: Sequence[str] | None = None) -> dict[str, Any]:
    """Run the discovery backends on this machine once; the answer as plain data."""
    names = backend_list(backends)
    found = discover(names, fake_file=fake_file())
    return {
        "backends": names,
        "hostname": socket.gethostname(),
        "cpus": psutil.cpu_count(logical=True) or 1,
        "memory_mib": psutil.virtual_memory().total // (1 << 20),
        "found": [device.to_dict() for device in found],
    }


def found_from_dict(data: dict[str, Any]) -> FoundDevice:
    """The inverse of :meth:`FoundDevice.to_dict`."""
    return FoundDevice(
        key=str(data["key"]),
        device_class=str(data["class"]),
        vendor=str(data["vendor"]),
        model=str(data["model"]),
        attributes=MappingProxyType(dict(data.get("attributes", {}))),
        health=Health(data.get("health", Health.HEALTHY.value)),
        source=str(data.get("source", "")),
    )

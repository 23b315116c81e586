"""Device discovery for the node the service runs on.

The backends live in :mod:`hetsched.agent.backends` (``cpu``, ``nvidia``, ``pci``, ``fake``);
this module turns what they find into a :class:`~hetsched.model.device.Node`. ``fake`` reads
a YAML list of device groups in the cluster-spec format, for machines without accelerators
and for tests:

```yaml
devices:
  - {class: gpu, vendor: nvidia, model: A100, count: 2, attributes: {memory_gib: 80}}
  - {class: fpga, vendor: xilinx, model: U250, count: 1}
```

Device ids are ``<node>/<class><index>``; the index is what ``CUDA_VISIBLE_DEVICES`` and
friends receive.
"""

from __future__ import annotations

import socket
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import psutil

from hetsched.agent.backends import HOST_CLASS, FoundDevice, assign_ids, discover
from hetsched.agent.backends.fake import load_fake_devices
from hetsched.model.device import Node

__all__ = ["discover_local", "load_fake_devices", "node_from"]


def node_from(
    name: str,
    found: Sequence[FoundDevice],
    cpu_milli: int | None = None,
    memory_mib: int | None = None,
) -> Node:
    """A node from discovered devices: CPU and memory from psutil unless given, the
    devices (host entries left out) numbered per class in the order found."""
    cpus = psutil.cpu_count(logical=True) or 1
    devices = tuple(assign_ids(name, found).values())
    numa = {d.attributes.get("numa") for d in found if d.device_class == HOST_CLASS}
    labels = {"hetsched.io/node": "local"}
    if len(numa) > 1:
        labels["hetsched.io/numa-nodes"] = str(len(numa))
    return Node(
        name,
        cpu_milli if cpu_milli is not None else cpus * 1000,
        memory_mib if memory_mib is not None else psutil.virtual_memory().total // (1 << 20),
        devices,
        labels,
    )


def discover_local(
    name: str | None = None,
    fake_devices: str | Path | None = None,
    cpu_milli: int | None = None,
    memory_mib: int | None = None,
    backends: Sequence[str] | None = None,
    sysfs_root: str | Path = "/sys",
    nvml: Any = None,
) -> Node:
    """This machine as a node: its logical CPUs, its memory, and the devices found.

    ``backends`` defaults to ``cpu`` plus ``fake`` when a device file is given; pass
    ``["cpu", "nvidia", "pci"]`` to look at the real hardware.
    """
    if backends is None:
        backends = ["cpu", "fake"] if fake_devices is not None else ["cpu"]
    found = discover(backends, sysfs_root=sysfs_root, fake_file=fake_devices, nvml=nvml)
    return node_from(name or socket.gethostname() or "local", found, cpu_milli, memory_mib)

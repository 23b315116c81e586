"""Device discovery for the node the service runs on.

Backends: the machine itself (CPUs and memory from psutil) and ``fake``, a YAML list of
device groups in the cluster-spec format, for machines without accelerators and for tests:

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
from pathlib import Path

import psutil
from pydantic import Field, ValidationError

from hetsched.model.device import Node
from hetsched.model.specs import DeviceGroupSpec, NodeSpec, SpecError, _Strict, format_errors
from hetsched.model.specs import load_yaml as _load_yaml

__all__ = ["discover_local", "load_fake_devices"]


class _FakeDevices(_Strict):
    devices: list[DeviceGroupSpec] = Field(default_factory=list)


def load_fake_devices(path: str | Path) -> list[DeviceGroupSpec]:
    """Device groups from a ``fake`` backend file; SpecError with field paths if invalid."""
    data = _load_yaml(path)
    try:
        return _FakeDevices.model_validate(data or {}).devices
    except ValidationError as exc:
        raise SpecError(format_errors(exc), str(path)) from None


def discover_local(
    name: str | None = None,
    fake_devices: str | Path | None = None,
    cpu_milli: int | None = None,
    memory_mib: int | None = None,
) -> Node:
    """This machine as a node: its logical CPUs, its memory, and the devices found."""
    cpus = psutil.cpu_count(logical=True) or 1
    spec = NodeSpec.model_validate(
        {
            "name": name or socket.gethostname() or "local",
            "cpu": "1",
            "memory": "1Mi",
            "labels": {"hetsched.io/node": "local"},
        }
    )
    spec.cpu_milli = cpu_milli if cpu_milli is not None else cpus * 1000
    spec.memory_mib = (
        memory_mib if memory_mib is not None else psutil.virtual_memory().total // (1 << 20)
    )
    if fake_devices is not None:
        spec.devices = load_fake_devices(fake_devices)
    return spec.expand()[0]

"""The ``fake`` backend: devices from a YAML file, for machines without accelerators, the
demo and tests. The file is read at every discovery round, so editing it (a group removed,
``health: unhealthy``) looks like a hot-unplug or a failure to the watcher.

```yaml
devices:
  - {class: gpu, vendor: nvidia, model: A100, count: 2, attributes: {memory_gib: 80}}
  - {class: fpga, vendor: xilinx, model: U250, count: 1}
```

Keys are ``fake:<class><index>`` in file order, so the last device of a class is the one
that disappears when its count drops.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path

from pydantic import Field, ValidationError

from hetsched.agent.backends.base import DiscoveryContext, FoundDevice
from hetsched.model.specs import (
    DeviceGroupSpec,
    SpecError,
    _Strict,
    format_errors,
    number_devices,
)
from hetsched.model.specs import load_yaml as _load_yaml

__all__ = ["FakeBackend", "load_fake_devices"]

log = logging.getLogger("hetsched.agent.discovery")


class _FakeDevices(_Strict):
    devices: list[DeviceGroupSpec] = Field(default_factory=list)


def load_fake_devices(path: str | Path) -> list[DeviceGroupSpec]:
    """Device groups from a ``fake`` backend file; SpecError with field paths if invalid."""
    data = _load_yaml(path)
    try:
        return _FakeDevices.model_validate(data or {}).devices
    except ValidationError as exc:
        raise SpecError(format_errors(exc), str(path)) from None


@dataclass
class FakeBackend:
    context: DiscoveryContext
    name: str = "fake"
    fallback: bool = False
    _said: set[str] = field(default_factory=set)

    def discover(self) -> list[FoundDevice]:
        path = self.context.fake_file
        if path is None:
            self._say("fake: no device file given; none found")
            return []
        # a bad file raises SpecError: the watcher keeps its last answer for this backend
        # then, so a half-written file never looks like every device unplugged
        groups = load_fake_devices(path)
        return [
            FoundDevice(
                key=f"fake:{group.device_class}{index}",
                device_class=group.device_class,
                vendor=group.vendor,
                model=group.model,
                attributes=group.attributes,
                health=group.health,
                source=self.name,
            )
            for group, index in number_devices(groups)
        ]

    def _say(self, line: str) -> None:
        if line not in self._said:
            self._said.add(line)
            log.info(line)

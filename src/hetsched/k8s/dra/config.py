"""The DRA driver's configuration file (``--config``), validated at the boundary.

```yaml
node_name: gpu-node-7          # default: $NODE_NAME (the DaemonSet's downward API), else hostname
driver_name: hetsched.io       # the DRA driver name (a DNS subdomain)
plugins_dir: /var/lib/kubelet/plugins            # the socket and checkpoint: <dir>/<driver>
registry_dir: /var/lib/kubelet/plugins_registry  # where the kubelet looks for plugins
cdi_dir: /var/run/cdi          # where the container runtime reads CDI specs
classes: []                    # device classes to publish; empty: every class found
shareable: [gpu]               # classes whose devices may go to several claims (share)
poll_interval_s: 2.0           # device watch (health, hot-plug)
socket_check_interval_s: 0.5   # a deleted socket is served again
slice_resync_s: 60             # rewrite the ResourceSlices this often even without a change
health_interval_s: 10          # the health stream speaks this often without a change
health_timeout_s: 30           # per device: the kubelet counts it Unknown after this silence
fake_devices: devices.yaml     # the fake backend's file (relative to this file)
sysfs_root: /sys
dev_root: /dev
proc_root: /proc
mounts:                        # added to every container that gets a device of a claim
  - {host_path: /usr/lib/x86_64-linux-gnu/libcuda.so.1, container_path: /usr/lib/libcuda.so.1}
kubeconfig: null               # default: in-cluster credentials
```
"""

from __future__ import annotations

from pathlib import Path

from pydantic import Field, model_validator

from hetsched.k8s.dra.driver import (
    DEFAULT_CDI_DIR,
    DEFAULT_DRIVER,
    DEFAULT_PLUGINS_DIR,
    DEFAULT_REGISTRY_DIR,
    DriverSettings,
)
from hetsched.k8s.dra.service import HealthTiming
from hetsched.k8s.nodeconfig import NodeAgentConfig, load_node_config

__all__ = ["DriverConfig", "load_config"]

#: a DNS subdomain of at most 63 characters, as Kubernetes wants of a DRA driver name
_DRIVER_NAME = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"


class DriverConfig(NodeAgentConfig):
    """The driver's own fields; the node agents' shared ones are in k8s/nodeconfig.py."""

    driver_name: str = Field(default=DEFAULT_DRIVER, max_length=63, pattern=_DRIVER_NAME)
    plugins_dir: Path = DEFAULT_PLUGINS_DIR
    registry_dir: Path = DEFAULT_REGISTRY_DIR
    cdi_dir: Path = DEFAULT_CDI_DIR
    classes: list[str] = Field(default_factory=list)
    shareable: list[str] = Field(default_factory=lambda: ["gpu"])
    slice_resync_s: float = Field(default=60.0, gt=0)
    health_interval_s: float = Field(default=10.0, gt=0)
    health_timeout_s: int = Field(default=30, gt=0)

    @model_validator(mode="after")
    def _health_fits(self) -> DriverConfig:
        if self.health_interval_s >= self.health_timeout_s:
            raise ValueError(
                f"health_interval_s ({self.health_interval_s}) must be below health_timeout_s "
                f"({self.health_timeout_s}): the kubelet would count devices Unknown between "
                "two lists"
            )
        return self

    def settings(self) -> DriverSettings:
        return DriverSettings(
            node_name=self.node(),
            driver_name=self.driver_name,
            plugins_dir=self.plugins_dir,
            registry_dir=self.registry_dir,
            cdi_dir=self.cdi_dir,
            classes=tuple(self.classes),
            shareable=tuple(self.shareable),
            socket_check_interval_s=self.socket_check_interval_s,
            slice_resync_s=self.slice_resync_s,
            roots=self.roots(),
            mounts=self.mount_specs(),
            health=HealthTiming(self.health_interval_s, self.health_timeout_s),
        )


def load_config(path: str | Path | None) -> DriverConfig:
    """The file's configuration (defaults without a file); SpecError with field paths.
    ``fake_devices`` is taken relative to the file."""
    return load_node_config(DriverConfig, path)

"""The device plugin's configuration file (``--config``), validated at the boundary.

```yaml
node_name: gpu-node-7          # default: $NODE_NAME (the DaemonSet's downward API), else hostname
device_class: gpu              # default: the resource's name after the domain
plugin_dir: /var/lib/kubelet/device-plugins
shared_slots: 10               # slots per device of <resource>-shared; 0: whole devices only
shared_resource: hetsched.io/gpu-shared
pre_start_required: false
poll_interval_s: 2.0           # device watch (health, hot-plug)
socket_check_interval_s: 0.5   # kubelet restart detection
annotation_resync_s: 60        # rewrite the Node annotation this often even without a change
fake_devices: devices.yaml     # the fake backend's file (relative to this file)
sysfs_root: /sys
dev_root: /dev
proc_root: /proc
mounts:                        # given to every container that gets a device
  - {host_path: /usr/lib/x86_64-linux-gnu/libcuda.so.1, container_path: /usr/lib/libcuda.so.1}
kube_api: true                 # false: no Node annotation, no pod lookup (shares fall back)
kubeconfig: null               # default: in-cluster credentials
pod_resources_socket: /var/lib/kubelet/pod-resources/kubelet.sock   # null: not asked
```
"""

from __future__ import annotations

from pathlib import Path

from pydantic import Field

from hetsched.k8s.deviceplugin.plugin import DEFAULT_PLUGIN_DIR, PluginSettings
from hetsched.k8s.deviceplugin.podresources import DEFAULT_POD_RESOURCES_SOCKET
from hetsched.k8s.nodeconfig import NodeAgentConfig, load_node_config

__all__ = ["PluginConfig", "load_config"]


class PluginConfig(NodeAgentConfig):
    """The plugin's own fields; the node agents' shared ones are in k8s/nodeconfig.py."""

    device_class: str = ""
    plugin_dir: Path = DEFAULT_PLUGIN_DIR
    shared_slots: int = Field(default=0, ge=0, le=1000)
    shared_resource: str = ""
    pre_start_required: bool = False
    annotation_resync_s: float = Field(default=60.0, gt=0)
    kube_api: bool = True
    pod_resources_socket: Path | None = DEFAULT_POD_RESOURCES_SOCKET

    def settings(self, resource: str) -> PluginSettings:
        return PluginSettings(
            resource=resource,
            node_name=self.node(),
            device_class=self.device_class,
            plugin_dir=self.plugin_dir,
            shared_slots=self.shared_slots,
            shared_resource=self.shared_resource,
            pre_start_required=self.pre_start_required,
            socket_check_interval_s=self.socket_check_interval_s,
            annotation_resync_s=self.annotation_resync_s,
            roots=self.roots(),
            mounts=self.mount_specs(),
            pod_resources_socket=self.pod_resources_socket,
        )


def load_config(path: str | Path | None) -> PluginConfig:
    """The file's configuration (defaults without a file); SpecError with field paths.
    ``fake_devices`` is taken relative to the file."""
    return load_node_config(PluginConfig, path)

"""What the configuration files of the node agents (the device plugin and the DRA driver)
share: the node's name, where its devices are found and how they are watched, what every
container given a device gets mounted, and the API credentials. Each agent's file adds its
own fields (``deviceplugin/config.py``, ``dra/config.py``)."""

from __future__ import annotations

import os
import socket
from pathlib import Path
from typing import TypeVar

from pydantic import Field, ValidationError

from hetsched.k8s.deviceplugin.allocation import MountSpec, Roots
from hetsched.model.specs import SpecError, _Strict, format_errors, load_yaml

__all__ = ["MountConfig", "NodeAgentConfig", "load_node_config"]


class MountConfig(_Strict):
    host_path: str = Field(min_length=1)
    container_path: str = Field(min_length=1)
    read_only: bool = True


class NodeAgentConfig(_Strict):
    node_name: str | None = None
    poll_interval_s: float = Field(default=2.0, gt=0)
    socket_check_interval_s: float = Field(default=0.5, gt=0)
    fake_devices: Path | None = None
    sysfs_root: Path = Path("/sys")
    dev_root: Path = Path("/dev")
    proc_root: Path = Path("/proc")
    mounts: list[MountConfig] = Field(default_factory=list)
    kubeconfig: str | None = None

    def node(self) -> str:
        """This node's name: the file's, else $NODE_NAME (the DaemonSet's downward API),
        else the hostname."""
        return self.node_name or os.environ.get("NODE_NAME") or socket.gethostname()

    def roots(self) -> Roots:
        return Roots(dev=self.dev_root, sysfs=self.sysfs_root, proc=self.proc_root)

    def mount_specs(self) -> tuple[MountSpec, ...]:
        return tuple(MountSpec(m.host_path, m.container_path, m.read_only) for m in self.mounts)


C = TypeVar("C", bound=NodeAgentConfig)


def load_node_config(kind: type[C], path: str | Path | None) -> C:
    """The file's configuration (defaults without a file); SpecError with field paths.
    Every path in it (``fake_devices``, ``plugins_dir``, ``kubeconfig``, ...) that is
    relative is taken relative to the file's folder, made absolute: the agent serves
    sockets at them and hands them to the kubelet, which needs absolute paths."""
    if path is None:
        return kind()
    data = load_yaml(path)
    try:
        config = kind.model_validate(data or {})
    except ValidationError as exc:
        raise SpecError(format_errors(exc), str(path)) from None
    base = Path(path).absolute().parent
    for name in kind.model_fields:
        value = getattr(config, name)
        if isinstance(value, Path) and not value.is_absolute():
            setattr(config, name, base / value)
    if config.kubeconfig and not Path(config.kubeconfig).expanduser().is_absolute():
        config.kubeconfig = str(base / config.kubeconfig)
    return config

"""The device plugin's test rig: a fake device file, a test kubelet, the plugin, an
in-memory Kubernetes API, all in one short directory (AF_UNIX paths must stay under 108
bytes, so pytest's tmp_path is not used)."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

from hetsched.agent.watcher import DeviceWatcher
from hetsched.k8s.deviceplugin.allocation import Roots
from hetsched.k8s.deviceplugin.plugin import DevicePlugin, PluginSettings
from hetsched.k8s.names import ASSIGN_PHASE, ASSIGNED_DEVICES, ASSIGNED_FOR
from k8s.kubelet import FakeNodeAPI, KubeletDouble

GPU = "hetsched.io/gpu"
SHARED = "hetsched.io/gpu-shared"
NODE = "n1"

FOUR_GPUS = """devices:
  - {class: gpu, vendor: nvidia, model: A100, count: 2,
     attributes: {memory_gib: 80, numa: 0, nvlink_domain: 0}}
  - {class: gpu, vendor: nvidia, model: A100, count: 2,
     attributes: {memory_gib: 80, numa: 1, nvlink_domain: 2}}
  - {class: fpga, vendor: xilinx, model: U250, count: 1}
"""


@dataclass
class Rig:
    dir: Path
    devices: Path
    kubelet: KubeletDouble
    plugin: DevicePlugin
    api: FakeNodeAPI


def assignment(name: str, devices: list[tuple[str, int, str]], node: str = NODE) -> dict[str, str]:
    """The annotations the scheduler writes for pod ``name`` (uid ``uid-default-<name>`` in
    the fake API): ``devices`` as (id, share, resource)."""
    entries = [{"id": i, "share": s, "resource": r} for i, s, r in devices]
    return {
        ASSIGNED_DEVICES: json.dumps(entries),
        ASSIGN_PHASE: "allocating",
        ASSIGNED_FOR: f"{node}/uid-default-{name}",
    }


def make_rig(
    short_dir: Path, *, pre_start: bool = False, slots: int = 4, pod_resources: bool = False
) -> Rig:
    devices = short_dir / "devices.yaml"
    devices.write_text(FOUR_GPUS)
    dev = short_dir / "dev"
    dev.mkdir()
    (dev / "nvidiactl").touch()
    (dev / "nvidia-uvm").touch()
    kubelet = KubeletDouble(short_dir, pod_resources=pod_resources)
    kubelet.start()
    api = FakeNodeAPI()
    settings = PluginSettings(
        resource=GPU,
        node_name=NODE,
        plugin_dir=short_dir,
        shared_slots=slots,
        pre_start_required=pre_start,
        socket_check_interval_s=0.02,
        roots=Roots(dev=dev, sysfs=short_dir / "sys", proc=short_dir / "proc"),
        pod_resources_socket=kubelet.pod_resources_socket if pod_resources else None,
    )
    watcher = DeviceWatcher.create(NODE, ["fake"], fake_file=devices, interval_s=0.02)
    plugin = DevicePlugin(settings, watcher, api)
    plugin.start()
    return Rig(short_dir, devices, kubelet, plugin, api)


def write_devices(path: Path, text: str) -> None:
    """Replace the device file at once: the watcher never reads it half-written (an empty
    file is a valid one with no devices)."""
    staged = path.with_suffix(".new")
    staged.write_text(text)
    os.replace(staged, path)

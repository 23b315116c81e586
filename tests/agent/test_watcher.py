"""The device watcher: hot-plug and health changes on fake sysfs trees and device files."""

from __future__ import annotations

import threading
from pathlib import Path

from sysfs import SysfsTree
from test_backends_nvidia import recorded

from hetsched.agent.watcher import DeviceWatcher
from hetsched.model.device import Device, Health
from hetsched.scheduler import DeviceAdded, DeviceHealthChanged, Event


def _two_gpus(root: Path) -> SysfsTree:
    sysfs = SysfsTree(root)
    sysfs.pci("0000:1b:00.0", 0x10DE, 0x2330, 0x030200, numa=0)
    sysfs.pci("0000:43:00.0", 0x10DE, 0x2330, 0x030200, numa=0)
    return sysfs


def test_unplug_replug_and_a_new_device(tmp_path: Path) -> None:
    sysfs = _two_gpus(tmp_path)
    watcher = DeviceWatcher.create("n", ["pci"], sysfs_root=tmp_path)
    node = watcher.initial()
    assert [d.id for d in node.devices] == ["n/gpu0", "n/gpu1"]
    assert watcher.poll() == []

    sysfs.unplug("0000:1b:00.0")
    assert watcher.poll() == [DeviceHealthChanged("n/gpu0", Health.UNHEALTHY, "removed")]
    assert watcher.poll() == []
    assert [(s.id, s.present, s.reason) for s in watcher.view()] == [
        ("n/gpu0", False, "removed"),
        ("n/gpu1", True, ""),
    ]

    sysfs.pci("0000:1b:00.0", 0x10DE, 0x2330, 0x030200, numa=0)
    sysfs.pci("0000:c1:00.0", 0x10DE, 0x2330, 0x030200, numa=1, host_bridge="pci0000:c0")
    events = watcher.poll()
    assert [(type(e).__name__, getattr(e, "device", None) and e.device.id) for e in events] == [
        ("DeviceAdded", "n/gpu0"),  # back, with its old id
        ("DeviceAdded", "n/gpu2"),  # new: the next id nobody ever had
    ]
    added = events[1]
    assert isinstance(added, DeviceAdded)
    assert added.node_name == "n"
    assert added.device.attributes["pci_address"] == "0000:c1:00.0"
    assert watcher.changes == 3

    sysfs.unplug("0000:43:00.0")
    watcher.poll()
    now = watcher.current(node)
    assert [(d.id, d.health) for d in now.devices] == [
        ("n/gpu0", Health.HEALTHY),
        ("n/gpu1", Health.UNHEALTHY),
        ("n/gpu2", Health.HEALTHY),
    ]


def test_health_changes_from_a_fake_file(tmp_path: Path) -> None:
    path = tmp_path / "devices.yaml"
    path.write_text("devices:\n  - {class: gpu, vendor: nvidia, model: T4, count: 2}\n")
    watcher = DeviceWatcher.create("n", ["fake"], fake_file=path)
    watcher.initial()
    path.write_text(
        "devices:\n"
        "  - {class: gpu, vendor: nvidia, model: T4, count: 1}\n"
        "  - {class: gpu, vendor: nvidia, model: T4, count: 1, health: unhealthy}\n"
    )
    assert watcher.poll() == [DeviceHealthChanged("n/gpu1", Health.UNHEALTHY, "unhealthy")]
    path.write_text("devices:\n  - {class: gpu, count: [half-written")
    assert watcher.poll() == []  # a file that does not parse keeps the last answer
    path.write_text("devices:\n  - {class: gpu, vendor: nvidia, model: T4, count: 2}\n")
    assert watcher.poll() == [DeviceHealthChanged("n/gpu1", Health.HEALTHY, "healthy again")]


def test_an_xid_is_the_reason(tmp_path: Path) -> None:
    nvml = recorded()
    del nvml.gpus[2]
    watcher = DeviceWatcher.create("n", ["nvidia"], nvml=nvml)
    watcher.initial()
    nvml.xid_events = [(1, 79)]
    assert watcher.poll() == [DeviceHealthChanged("n/gpu1", Health.UNHEALTHY, "unhealthy: XID 79")]


def test_the_thread_hands_changes_to_the_sink(tmp_path: Path) -> None:
    sysfs = _two_gpus(tmp_path)
    got: list[Event] = []
    seen = threading.Event()

    def sink(events: list[Event]) -> None:
        got.extend(events)
        seen.set()

    watcher = DeviceWatcher.create("n", ["pci"], sysfs_root=tmp_path, interval_s=0.05)
    watcher.sink = sink
    watcher.initial()
    watcher.start()
    try:
        sysfs.unplug("0000:43:00.0")
        assert seen.wait(10)
    finally:
        watcher.stop()
    assert got == [DeviceHealthChanged("n/gpu1", Health.UNHEALTHY, "removed")]


def test_the_initial_node_matches_discovery(tmp_path: Path) -> None:
    _two_gpus(tmp_path)
    node = DeviceWatcher.create("n", ["pci"], sysfs_root=tmp_path).initial(4000, 8192)
    assert (node.cpu_milli, node.memory_mib) == (4000, 8192)
    assert all(isinstance(d, Device) and d.model == "H100-SXM5-80GB" for d in node.devices)

"""The ``cpu`` backend on fake sysfs and procfs trees, and the registry around the backends."""

from __future__ import annotations

from pathlib import Path

import psutil
import pytest
from sysfs import SysfsTree

from hetsched.agent.backends import FoundDevice, backend_names, create, discover
from hetsched.agent.backends.cpu import parse_cpulist
from hetsched.agent.discovery import discover_local

CPUINFO = (
    "processor\t: 0\nvendor_id\t: GenuineIntel\n"
    "model name\t: Intel(R) Xeon(R) Platinum 8480+\n\n"
    "processor\t: 1\nvendor_id\t: GenuineIntel\n"
    "model name\t: Intel(R) Xeon(R) Platinum 8480+\n"
)


@pytest.mark.parametrize(
    ("text", "cpus"),
    [("0-3", [0, 1, 2, 3]), ("0-1,8,10-11\n", [0, 1, 8, 10, 11]), ("", []), ("5", [5])],
)
def test_cpulists(text: str, cpus: list[int]) -> None:
    assert parse_cpulist(text) == cpus


def test_numa_nodes_from_sysfs(tmp_path: Path) -> None:
    sysfs = SysfsTree(tmp_path / "sys")
    sysfs.numa_node(0, "0-55,112-167", 527_968_256)
    sysfs.numa_node(1, "56-111,168-223", 528_434_176)
    (tmp_path / "proc").mkdir()
    (tmp_path / "proc" / "cpuinfo").write_text(CPUINFO)
    model = "Intel(R) Xeon(R) Platinum 8480+"
    assert discover(["cpu"], sysfs_root=tmp_path / "sys", proc_root=tmp_path / "proc") == [
        FoundDevice(
            "cpu:numa0",
            "cpu",
            "intel",
            model,
            {"numa": 0, "cores": 112, "memory_mib": 515594},
            source="cpu",
        ),
        FoundDevice(
            "cpu:numa1",
            "cpu",
            "intel",
            model,
            {"numa": 1, "cores": 112, "memory_mib": 516049},
            source="cpu",
        ),
    ]


def test_without_numa_the_host_is_one_node(tmp_path: Path) -> None:
    (found,) = discover(["cpu"], sysfs_root=tmp_path, proc_root=tmp_path)
    assert found.attributes == {
        "numa": 0,
        "cores": psutil.cpu_count(logical=True),
        "memory_mib": psutil.virtual_memory().total // (1 << 20),
    }


def test_host_entries_are_not_devices_of_the_node(tmp_path: Path) -> None:
    sysfs = SysfsTree(tmp_path)
    sysfs.numa_node(0, "0-1", 1024)
    sysfs.numa_node(1, "2-3", 1024)
    sysfs.pci("0000:1b:00.0", 0x10DE, 0x2330, 0x030200, numa=1)
    node = discover_local("box", backends=["cpu", "pci"], sysfs_root=tmp_path)
    assert [(d.id, d.model, d.attributes["numa"]) for d in node.devices] == [
        ("box/gpu0", "H100-SXM5-80GB", 1)
    ]
    assert node.labels["hetsched.io/numa-nodes"] == "2"


def test_the_registry_knows_the_backends_by_name() -> None:
    assert backend_names() == ["cpu", "fake", "nvidia", "pci"]
    with pytest.raises(ValueError, match=r"unknown discovery backend 'rocm' \(known: cpu, fake"):
        create("rocm")

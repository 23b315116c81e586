"""The ``pci`` backend on fake sysfs trees laid out like the real one."""

from __future__ import annotations

from pathlib import Path

import pytest
from sysfs import SysfsTree

from hetsched.agent.backends import FoundDevice, discover
from hetsched.model.device import Health

GIB = 1 << 30


def _machine(root: Path) -> SysfsTree:
    """A server with an NVIDIA H100, an AMD MI250X, a Xilinx U250 and an Intel PAC N3000,
    plus what a server also has and must not be offered: a BMC's VGA, a host bridge, a GPU's
    audio function, an NVSwitch, a NIC and the integrated graphics of an Intel CPU."""
    sysfs = SysfsTree(root)
    sysfs.pci("0000:1b:00.0", 0x10DE, 0x2330, 0x030200, numa=0)
    sysfs.pci("0000:1b:00.1", 0x10DE, 0x22BB, 0x040300, numa=0)
    amd = sysfs.pci("0000:c1:00.0", 0x1002, 0x740C, 0x038000, numa=1, host_bridge="pci0000:c0")
    sysfs.drm_card("card1", amd, 64 * GIB)
    sysfs.pci("0000:5e:00.0", 0x10EE, 0x5005, 0x120000, numa=0)
    pac = sysfs.pci("0000:af:00.0", 0x8086, 0x0B30, 0x120000, numa=1, host_bridge="pci0000:ae")
    sysfs.fpga_manager("fpga0", pac, "dfl-fme-mgr", "operating")
    sysfs.fpga_region("region0", pac)
    sysfs.fpga_region("region1", pac)
    sysfs.pci("0000:03:00.0", 0x1A03, 0x2000, 0x030000)
    sysfs.pci("0000:00:00.0", 0x8086, 0x0D57, 0x060000)
    sysfs.pci("0000:00:02.0", 0x8086, 0x9A49, 0x030000)
    sysfs.pci("0000:07:00.0", 0x10DE, 0x22A3, 0x068000)
    sysfs.pci("0000:3b:00.0", 0x15B3, 0x101B, 0x020700)
    return sysfs


def test_a_server_shows_exactly_its_accelerators(tmp_path: Path) -> None:
    _machine(tmp_path)
    found = {d.key: d for d in discover(["pci"], sysfs_root=tmp_path)}
    assert found == {
        "pci:0000:1b:00.0": FoundDevice(
            "pci:0000:1b:00.0",
            "gpu",
            "nvidia",
            "H100-SXM5-80GB",
            {
                "pci_address": "0000:1b:00.0",
                "vendor_id": "0x10de",
                "device_id": "0x2330",
                "pci_class": "0x0302",
                "numa": 0,
                "pcie_root": "pci0000:00",
            },
            Health.HEALTHY,
            "pci",
        ),
        "pci:0000:c1:00.0": FoundDevice(
            "pci:0000:c1:00.0",
            "gpu",
            "amd",
            "MI250X",
            {
                "pci_address": "0000:c1:00.0",
                "vendor_id": "0x1002",
                "device_id": "0x740c",
                "pci_class": "0x0380",
                "numa": 1,
                "pcie_root": "pci0000:c0",
                "memory_gib": 64.0,
            },
            Health.HEALTHY,
            "pci",
        ),
        "pci:0000:5e:00.0": FoundDevice(
            "pci:0000:5e:00.0",
            "fpga",
            "xilinx",
            "Alveo U250",
            {
                "pci_address": "0000:5e:00.0",
                "vendor_id": "0x10ee",
                "device_id": "0x5005",
                "pci_class": "0x1200",
                "numa": 0,
                "pcie_root": "pci0000:00",
            },
            Health.HEALTHY,
            "pci",
        ),
        "pci:0000:af:00.0": FoundDevice(
            "pci:0000:af:00.0",
            "fpga",
            "intel",
            "PAC N3000",
            {
                "pci_address": "0000:af:00.0",
                "vendor_id": "0x8086",
                "device_id": "0x0b30",
                "pci_class": "0x1200",
                "numa": 1,
                "pcie_root": "pci0000:ae",
                "fpga_manager": "dfl-fme-mgr",
                "fpga_state": "operating",
                "fpga_regions": 2,
            },
            Health.HEALTHY,
            "pci",
        ),
    }


# (vendor, device, class code) -> (device class, vendor, model), or None when skipped
CASES: list[tuple[int, int, int, tuple[str, str, str] | None]] = [
    (0x10DE, 0x20B2, 0x030200, ("gpu", "nvidia", "A100-SXM4-80GB")),
    (0x10DE, 0x1EB8, 0x030000, ("gpu", "nvidia", "T4")),
    (0x10DE, 0x9999, 0x030200, ("gpu", "nvidia", "0x9999")),
    (0x10DE, 0x22BB, 0x040300, None),
    (0x10DE, 0x1AD8, 0x0C0330, None),
    (0x1002, 0x74A1, 0x120000, ("gpu", "amd", "MI300X")),
    (0x1002, 0x73BF, 0x030000, ("gpu", "amd", "0x73bf")),
    (0x1002, 0xAB28, 0x040300, None),
    (0x10EE, 0x500C, 0x120000, ("fpga", "xilinx", "Alveo U280")),
    (0x10EE, 0x1234, 0x058000, ("fpga", "xilinx", "0x1234")),
    (0x8086, 0x0BD5, 0x038000, ("gpu", "intel", "Data Center GPU Max 1550")),
    (0x8086, 0x0D5C, 0x120000, ("accelerator", "intel", "0x0d5c")),
    (0x8086, 0x9A49, 0x030000, None),
    (0x8086, 0x1572, 0x020000, None),
    (0x1E36, 0x0021, 0x120000, ("npu", "enflame", "0x0021")),
    (0x19E5, 0xD801, 0x120000, ("npu", "huawei", "Ascend 910")),
    (0x19E5, 0x1822, 0x020000, None),
    (0x1DA3, 0x1020, 0x120000, ("npu", "habana", "Gaudi2")),
    (0xCABC, 0x0370, 0x120000, ("npu", "cambricon", "0x0370")),
    (0x1E52, 0x401E, 0x120000, ("accelerator", "0x1e52", "0x401e")),
    (0x1A03, 0x2000, 0x030000, None),
    (0x102B, 0x0536, 0x030000, None),
    (0x1AF4, 0x1050, 0x030000, None),
]


@pytest.mark.parametrize(("vendor", "device", "pci_class", "expected"), CASES)
def test_vendor_and_class_decide(
    tmp_path: Path,
    vendor: int,
    device: int,
    pci_class: int,
    expected: tuple[str, str, str] | None,
) -> None:
    SysfsTree(tmp_path).pci("0000:01:00.0", vendor, device, pci_class)
    found = [(d.device_class, d.vendor, d.model) for d in discover(["pci"], sysfs_root=tmp_path)]
    assert found == ([] if expected is None else [expected])


@pytest.mark.parametrize(
    ("state", "health"),
    [("operating", Health.HEALTHY), ("unknown", Health.HEALTHY), ("write error", Health.UNHEALTHY)],
)
def test_an_soc_fpga_shows_through_its_manager(tmp_path: Path, state: str, health: Health) -> None:
    sysfs = SysfsTree(tmp_path)
    sysfs.pci("0000:00:00.0", 0x8086, 0x0D57, 0x060000)
    devcfg = sysfs.platform("f8007000.devcfg")
    sysfs.fpga_manager("fpga0", devcfg, "Xilinx Zynq FPGA Manager", state)
    sysfs.fpga_region("region0", devcfg)
    assert discover(["pci"], sysfs_root=tmp_path) == [
        FoundDevice(
            "fpga:f8007000.devcfg",
            "fpga",
            "xilinx",
            "Xilinx Zynq FPGA Manager",
            {"fpga_manager": "Xilinx Zynq FPGA Manager", "fpga_state": state, "fpga_regions": 1},
            health,
            "pci",
        )
    ]


def test_no_sysfs_is_none_found_with_one_log_line(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    from hetsched.agent.backends import DiscoveryContext, create

    caplog.set_level("INFO", logger="hetsched.agent.discovery")
    backend = create("pci", DiscoveryContext(sysfs_root=tmp_path / "missing"))
    assert backend.discover() == []
    assert backend.discover() == []
    assert [r.getMessage() for r in caplog.records] == [
        f"pci: {tmp_path / 'missing' / 'bus' / 'pci' / 'devices'} not found; none found"
    ]


def test_an_unplugged_function_is_gone(tmp_path: Path) -> None:
    sysfs = _machine(tmp_path)
    sysfs.unplug("0000:1b:00.0")
    keys = [d.key for d in discover(["pci"], sysfs_root=tmp_path)]
    assert keys == ["pci:0000:5e:00.0", "pci:0000:af:00.0", "pci:0000:c1:00.0"]

"""The ``pci`` backend: every accelerator visible in sysfs, whatever its driver.

Reads ``<sysfs>/bus/pci/devices/*/{vendor,device,class,numa_node}``. A function counts as an
accelerator by its vendor and class code (the top 16 bits of ``class``):

- a known accelerator vendor (:data:`VENDORS`) with a GPU class (0x0300 VGA, 0x0302 3D
  controller, 0x0380 other display) or 0x1200 processing accelerator or 0x0b40 co-processor;
  Intel only with the accelerator classes and its discrete data-center GPUs, so the
  integrated graphics of a workstation is not offered as a GPU;
- any other vendor only with 0x1200 (processing accelerator), as class ``accelerator``: a
  server's BMC VGA (ASPEED, Matrox) is not a GPU.

Audio, USB and bridge functions of a GPU board (NVSwitch is a bridge) have other classes and
are skipped. AMD GPU memory comes from ``<sysfs>/class/drm/card*/device/mem_info_vram_total``;
FPGAs add what ``<sysfs>/class/fpga_manager`` and ``<sysfs>/class/fpga_region`` say (a
manager's state, how many regions), and an FPGA with no PCI function of its own (an SoC's
fabric) appears through its manager alone. It is a fallback: a device that a driver-backed
backend (``nvidia``) also found at the same PCI address is taken from that one.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass, field
from pathlib import Path

from hetsched.agent.backends.base import DiscoveryContext, FoundDevice
from hetsched.model.device import AttrValue, Health

__all__ = ["CLASSES", "MODELS", "VENDORS", "PciBackend"]

log = logging.getLogger("hetsched.agent.discovery")


@dataclass(frozen=True, slots=True)
class Vendor:
    name: str
    #: the device class of a processing accelerator (0x1200) from this vendor
    accelerator_class: str
    #: PCI classes that count for this vendor
    classes: frozenset[int]


_GPU = frozenset({0x0300, 0x0302, 0x0380})
_ACCEL = frozenset({0x1200, 0x0B40})

#: PCI vendor id -> vendor
VENDORS: dict[int, Vendor] = {
    0x10DE: Vendor("nvidia", "gpu", _GPU | _ACCEL),
    0x1002: Vendor("amd", "gpu", _GPU | _ACCEL),
    0x10EE: Vendor("xilinx", "fpga", _ACCEL | {0x0580}),
    0x1172: Vendor("altera", "fpga", _ACCEL),
    0x8086: Vendor("intel", "accelerator", _ACCEL | {0x0380}),
    0x1DA3: Vendor("habana", "npu", _ACCEL),
    0x1E36: Vendor("enflame", "npu", _ACCEL),
    0x19E5: Vendor("huawei", "npu", _ACCEL),
    0xCABC: Vendor("cambricon", "npu", _ACCEL),
}

#: PCI class (top 16 bits) -> the device class it implies, when the vendor does not say
CLASSES: dict[int, str] = {
    0x0300: "gpu",
    0x0302: "gpu",
    0x0380: "gpu",
    0x0B40: "accelerator",
    0x1200: "accelerator",
    0x0580: "fpga",
}

#: (vendor id, device id) -> (device class, model) for the devices we know by name
MODELS: dict[tuple[int, int], tuple[str, str]] = {
    (0x10DE, 0x1DB4): ("gpu", "V100-PCIE-16GB"),
    (0x10DE, 0x1EB8): ("gpu", "T4"),
    (0x10DE, 0x20B0): ("gpu", "A100-SXM4-40GB"),
    (0x10DE, 0x20B2): ("gpu", "A100-SXM4-80GB"),
    (0x10DE, 0x20B5): ("gpu", "A100-PCIE-80GB"),
    (0x10DE, 0x2330): ("gpu", "H100-SXM5-80GB"),
    (0x10DE, 0x2331): ("gpu", "H100-PCIE"),
    (0x10DE, 0x2335): ("gpu", "H200-SXM-141GB"),
    (0x10DE, 0x26B5): ("gpu", "L40"),
    (0x10DE, 0x26B9): ("gpu", "L40S"),
    (0x10DE, 0x27B8): ("gpu", "L4"),
    (0x1002, 0x738C): ("gpu", "MI100"),
    (0x1002, 0x740C): ("gpu", "MI250X"),
    (0x1002, 0x740F): ("gpu", "MI210"),
    (0x1002, 0x74A1): ("gpu", "MI300X"),
    (0x10EE, 0x5004): ("fpga", "Alveo U250"),
    (0x10EE, 0x5005): ("fpga", "Alveo U250"),
    (0x10EE, 0x500C): ("fpga", "Alveo U280"),
    (0x10EE, 0x5020): ("fpga", "Alveo U50"),
    (0x8086, 0x09C4): ("fpga", "PAC Arria 10 GX"),
    (0x8086, 0x0B30): ("fpga", "PAC N3000"),
    (0x8086, 0x0BD5): ("gpu", "Data Center GPU Max 1550"),
    (0x8086, 0x0BDA): ("gpu", "Data Center GPU Max 1100"),
    (0x1DA3, 0x1000): ("npu", "Gaudi"),
    (0x1DA3, 0x1020): ("npu", "Gaudi2"),
    (0x19E5, 0xD801): ("npu", "Ascend 910"),
    (0x19E5, 0xD802): ("npu", "Ascend 910B"),
    (0x19E5, 0xD500): ("npu", "Ascend 310"),
}


@dataclass
class PciBackend:
    context: DiscoveryContext
    name: str = "pci"
    fallback: bool = True
    _said: set[str] = field(default_factory=set)

    def discover(self) -> list[FoundDevice]:
        root = self.context.sysfs_root
        pci_dir = root / "bus" / "pci" / "devices"
        if not pci_dir.is_dir():
            self._say(f"pci: {pci_dir} not found; none found")
            return []
        vram = _vram_by_device(root)
        fpgas = _fpga_info(root)
        out: list[FoundDevice] = []
        claimed: set[str] = set()
        for entry in sorted(pci_dir.iterdir()):
            found = self._function(entry, vram, fpgas)
            if found is not None:
                out.append(found)
                claimed.add(os.path.realpath(entry))
        for parent, info in sorted(fpgas.items()):
            if parent not in claimed and "fpga_manager" in info:
                # an FPGA without a PCI function of its own (an SoC's programmable logic)
                out.append(
                    FoundDevice(
                        key=f"fpga:{Path(parent).name}",
                        device_class="fpga",
                        vendor=_fpga_vendor(str(info["fpga_manager"])),
                        model=str(info["fpga_manager"]),
                        attributes=info,
                        health=_fpga_health(info),
                        source=self.name,
                    )
                )
        return out

    def _function(
        self, entry: Path, vram: dict[str, int], fpgas: dict[str, dict[str, AttrValue]]
    ) -> FoundDevice | None:
        vendor_id = _hex(entry / "vendor")
        device_id = _hex(entry / "device")
        pci_class = _hex(entry / "class")
        if vendor_id is None or device_id is None or pci_class is None:
            return None
        base = pci_class >> 8
        vendor = VENDORS.get(vendor_id)
        if vendor is None:
            if base != 0x1200:
                return None
            vendor_name, device_class = f"0x{vendor_id:04x}", "accelerator"
        else:
            if base not in vendor.classes:
                return None
            vendor_name = vendor.name
            device_class = CLASSES.get(base, vendor.accelerator_class)
            if base in _ACCEL:
                device_class = vendor.accelerator_class
        known = MODELS.get((vendor_id, device_id))
        model = f"0x{device_id:04x}"
        if known is not None:
            device_class, model = known
        address = entry.name
        real = os.path.realpath(entry)
        attributes: dict[str, AttrValue] = {
            "pci_address": address,
            "vendor_id": f"0x{vendor_id:04x}",
            "device_id": f"0x{device_id:04x}",
            "pci_class": f"0x{base:04x}",
        }
        numa = _int(entry / "numa_node")
        if numa is not None and numa >= 0:
            attributes["numa"] = numa
        parts = Path(real).parts
        roots = [p for p in parts if p.startswith("pci")]
        if roots:
            attributes["pcie_root"] = roots[0]
        total = vram.get(real)
        if total is not None:
            attributes["memory_gib"] = round(total / (1 << 30), 1)
        health = Health.HEALTHY
        fpga = fpgas.get(real)
        if fpga is not None:
            attributes.update(fpga)
            device_class = "fpga"
            health = _fpga_health(fpga)
        return FoundDevice(
            key=f"pci:{address}",
            device_class=device_class,
            vendor=vendor_name,
            model=model,
            attributes=attributes,
            health=health,
            source=self.name,
        )

    def _say(self, line: str) -> None:
        if line not in self._said:
            self._said.add(line)
            log.info(line)


def _vram_by_device(root: Path) -> dict[str, int]:
    """Real path of the PCI device -> VRAM bytes, from the DRM cards (amdgpu)."""
    out: dict[str, int] = {}
    drm = root / "class" / "drm"
    if not drm.is_dir():
        return out
    for card in sorted(drm.glob("card*")):
        total = _int(card / "device" / "mem_info_vram_total")
        if total is not None and total > 0:
            out[os.path.realpath(card / "device")] = total
    return out


def _fpga_info(root: Path) -> dict[str, dict[str, AttrValue]]:
    """Real path of the parent device -> what the FPGA classes say about it.

    In sysfs a manager or region lives at ``<parent device>/<class>/<name>``, so its parent
    is two levels up from its real path.
    """
    out: dict[str, dict[str, AttrValue]] = {}
    managers = root / "class" / "fpga_manager"
    for manager in sorted(managers.glob("*")) if managers.is_dir() else []:
        parent = str(Path(os.path.realpath(manager)).parent.parent)
        info = out.setdefault(parent, {})
        info["fpga_manager"] = _read(manager / "name") or manager.name
        state = _read(manager / "state")
        if state:
            info["fpga_state"] = state
    regions = root / "class" / "fpga_region"
    for region in sorted(regions.glob("*")) if regions.is_dir() else []:
        parent = str(Path(os.path.realpath(region)).parent.parent)
        info = out.setdefault(parent, {})
        info["fpga_regions"] = int(info.get("fpga_regions", 0)) + 1
    return out


def _fpga_health(info: dict[str, AttrValue]) -> Health:
    # the FPGA manager's states that say programming failed ("write error", ...)
    return Health.UNHEALTHY if "error" in str(info.get("fpga_state", "")) else Health.HEALTHY


def _fpga_vendor(manager: str) -> str:
    lowered = manager.lower()
    for name in ("xilinx", "altera", "intel", "lattice", "microchip"):
        if name in lowered:
            return name
    return ""


def _read(path: Path) -> str:
    try:
        return path.read_text().strip()
    except OSError:
        return ""


def _hex(path: Path) -> int | None:
    try:
        return int(_read(path), 16)
    except ValueError:
        return None


def _int(path: Path) -> int | None:
    try:
        return int(_read(path))
    except ValueError:
        return None
